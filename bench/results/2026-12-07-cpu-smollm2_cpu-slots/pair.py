"""Pair the two reads of the same 24 passkey documents (seed 2, draw 12345, 16x W, depth 0.1) by probe16.py
(../2026-12-07-cpu-smollm2_cpu-oracle-plans/): bounded positions (that record's probe16-s2.txt) and slot
positions (probe16-s2-slots.txt, `mc.positions=slots` at read time). Prints each document's kept layout over the
needle and both reads, and whether the kept layouts are the same."""
import re
import sys

bounded_txt, slots_txt = sys.argv[1], sys.argv[2]
bounded = {}
for line in open(bounded_txt):
    m = re.match(r"k\s*(\d+) needle \S+ focused (\d) (\d+) kept (\d) \| oracle (\d) (\d+)", line)
    if m:
        bounded[int(m[1])] = dict(f=int(m[2]), lods=m[3], branch=int(m[4]), o=int(m[5]))
same = f_b = f_s = o_b = o_s = 0
for line in open(slots_txt):
    m = re.search(r"k(\d+) span \S+ F=([\d.]+) (\d+) branch=(\d) O=([\d.]+)", line)
    if not m:
        continue
    k, b = int(m[1]), bounded[int(m[1])]
    f, lods, branch, o = int(float(m[2])), m[3], int(m[4]), int(float(m[5]))
    same += lods == b["lods"] and branch == b["branch"]
    f_b, f_s, o_b, o_s = f_b + b["f"], f_s + f, o_b + b["o"], o_s + o
    print(f"k{k:2d} needle LODs {lods} branch {branch} | focused bounded {b['f']} slots {f} | "
          f"oracle bounded {b['o']} slots {o}")
print(f"same kept layout (needle LODs and branch) in {same} of {len(bounded)}; "
      f"focused {f_b} -> {f_s}, oracle (neighbours plan) {o_b} -> {o_s} of {len(bounded)}")
