#!/bin/bash
# A record (not a tool): after seed 1 trained, the fresh-draw sweeps ran one at a time with this script
while pgrep -f "name lc_s1" > /dev/null; do sleep 10; done
V="eval.long_range.variants=[recency,compressed,random,salience,focused,oracle]"
S=/tmp/lc/tools/sweep.sh
$S /tmp/lc/runs/lc_s0 f0_after 809552 "[4,16,32,64,128,256]" 8 "$V" mc.focus_room=32 eval.long_range.budget=112 --report
$S /tmp/lc/runs/lc_s1 f1_after 227922 "[4,16,32,64,128,256]" 8 "$V" mc.focus_room=32 eval.long_range.budget=112
$S /tmp/lc/runs/lc_s0 f0_before 809552 "[4,16,32,64]" 8 "$V" mc.focus_room=0
$S /tmp/lc/runs/lc_s1 f1_before 227922 "[4,16,32,64]" 8 "$V" mc.focus_room=0
echo alldone
