"""The first-token order of `generate` (see README) on a real model: the task suite's passkey documents over SmolLM2
(a `smollm2_cpu` run), each prompt answered with `generate` (greedy, 10 tokens) with the prompt's refocus before the
first token (now) and after it (before 7c895d0, emulated by starting one token short of a due refocus), scored as the
suite scores (`string_match_all`).

Usage (from the repository root): python first_token_suite.py RUN_DIR DRAW [N_PER_CELL [BUDGET]]
(BUDGET: the working context's entries, as eval.tasks.budget; 0 = the run's own)"""
import sys
import time

import torch

from mc.build import load_run
from mc.data.loader import make_source
from mc.data.real_tasks import ANSWER_TOKENS, string_match_all
from mc.eval.read_budget import at_budget
from mc.eval.task_suite import suite_doc

run_dir, draw = sys.argv[1], int(sys.argv[2])
n_per_cell = int(sys.argv[3]) if len(sys.argv) > 3 else 4
ctrl, tok = load_run(run_dir, device=torch.device("cpu"))
ctrl, cfg = at_budget(ctrl, ctrl.cfg, int(sys.argv[4]) if len(sys.argv) > 4 else 0)
cfg.eval.draw_seed = draw
corpus = cfg.data if cfg.data.source != "recall" else type(cfg.data)(source="stdlib")
source = make_source(corpus, "val", tokenizer=tok)
interval, budget = cfg.allocator.inference.refocus_interval, cfg.mc.max_entries
counts: dict = {}
t0 = time.time()
for mult in (8, 16):
    for depth in (0.1, 0.5, 0.9):
        for k in range(n_per_cell):
            doc = suite_doc(cfg, source, tok, "passkey", mult * budget, depth, k)
            for way in ("before", "after"):
                s = ctrl.begin_session(doc.ids)
                if way == "after":  # one token short of due: the first token is drawn, then the refocus
                    s.tokens_since_refocus = interval - 1
                text = tok.decode(ctrl.generate(ANSWER_TOKENS["passkey"]).tolist())
                c = counts.setdefault((mult, way), [0.0, 0])
                c[0] += string_match_all(text, doc.answers)
                c[1] += 1
print(f"run {run_dir}, draw {draw}, passkey, {n_per_cell} documents a cell (depths 0.1, 0.5, 0.9), "
      f"{budget}-entry working context, {time.time() - t0:.0f} s")
for (mult, way), (right, n) in sorted(counts.items()):
    print(f"passkey {mult:3d}x  refocus {way:6s} the first token: {right:4.1f} of {n}")
