#!/bin/bash
# The ablation commands of this record (they name this VM's folders):
#   arms.sh RUN NAME DRAW MULTIPLES DEPTHS N_PER_CELL ARM...     (DRAW "fresh": mc_ablate.py draws and prints one)
# Section 1: arms.sh runs/tc_s0 s0_all 424242 '[4,16,32,64,128]' '[0.1,0.5,0.98]' 8 \
#   "one zoom:$I.branches=1,$I.branch_siblings=false,$I.branch_unchanged=false,$I.branch_lookahead=0" \
#   "no sibling branches:$I.branch_siblings=false" "no unchanged branch:$I.branch_unchanged=false" \
#   "no lookahead:$I.branch_lookahead=0" "no edge first:$I.edge_first=false" \
#   "no descend first:$I.descend_first=false,$I.branch_siblings=false"          (and tc_s1 -> s1_all)
# Section 2: arms.sh runs/tc_s0 s0_edge 424242 (same lengths, depths, 8) "edge sides 3:$I.edge_sides=3" \
#   "edge sides 4:$I.edge_sides=4"                                             (and tc_s1 -> s1_edge)
# Section 3: arms.sh runs/tc_s2 s2_fresh fresh '[4,16,32,64,128]' '[0.1,0.5,0.9]' 8 "edge sides 3:$I.edge_sides=3" \
#   "no sibling branches:$I.branch_siblings=false" \
#   "edge sides 3, no siblings:$I.edge_sides=3,$I.branch_siblings=false"       (and tc_s11 -> s11_fresh)
# with I=allocator.inference.
RUN=$1; NAME=$2; DRAW=$3; MULT=$4; DEP=$5; NPC=$6; shift 6
ARMS=(); for a in "$@"; do ARMS+=(--arm "$a"); done
DRAWARG=(); [ "$DRAW" != fresh ] && DRAWARG=(--draw-seed "$DRAW")
python scripts/mc_ablate.py --run-dir "$RUN" --quiet "${DRAWARG[@]}" --out "out/$NAME.json" "${ARMS[@]}" \
  "eval.long_range.multiples=$MULT" "eval.long_range.dense_multiples=[]" "eval.long_range.depths=$DEP" \
  "eval.long_range.n_per_cell=$NPC"
