"""A session's second question on a real model: the task suite's multi-key documents over SmolLM2 (a `smollm2_cpu`
run). Each case is one session: document A (its question at the end) is the prompt and `generate` answers it (greedy,
14 tokens); then document B, another multi-key document of the same cell whose question names one of its own keys,
is appended with refocus=False and `generate` answers again. B's answer is scored as the suite scores
(`string_match_all`) three ways (see second_question.py): generate-before (its refocus before the first token passed
as a scheduled one, no relayout: as before this record), generate-now (the code as it is) and fresh (a new session
over the same tokens: the reference).

Usage (from the repository root): python second_question_suite.py RUN_DIR DRAW [N_PER_CELL [BUDGET]]
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
budget, n_answer = cfg.mc.max_entries, ANSWER_TOKENS["multikey"]
real_refocus = ctrl.refocus


def old_refocus(*, scheduled=False):  # before: generate's refocus scheduled once the session had one, none relaid
    s = ctrl.session
    relayout, s.relayout_after_prompt = s.relayout_after_prompt, lambda: False
    try:
        return real_refocus(scheduled=True)
    finally:
        s.relayout_after_prompt = relayout


counts: dict = {}
t0 = time.time()
for mult in (8, 16):
    for depth in (0.1, 0.5, 0.9):
        for k in range(n_per_cell):
            a = suite_doc(cfg, source, tok, "multikey", mult * budget, depth, k)
            b = suite_doc(cfg, source, tok, "multikey", mult * budget, depth, k + n_per_cell)
            answer_a = None
            for way in ("generate-before", "generate-now", "fresh"):
                if way == "fresh":
                    s = ctrl.begin_session(torch.cat([a.ids, answer_a, b.ids]))
                else:
                    s = ctrl.begin_session(a.ids)
                    said_a = ctrl.generate(n_answer)
                    assert answer_a is None or torch.equal(said_a, answer_a)  # A's turn is the same every way
                    answer_a = said_a
                    ctrl.append(b.ids, refocus=False)
                if way == "generate-before":
                    ctrl.refocus = old_refocus
                text = tok.decode(ctrl.generate(n_answer).tolist())
                ctrl.refocus = real_refocus
                c = counts.setdefault((mult, way), [0.0, 0])
                c[0] += string_match_all(text, b.answers)
                c[1] += 1
print(f"run {run_dir}, draw {draw}, multikey, {n_per_cell} sessions a cell (depths 0.1, 0.5, 0.9), "
      f"{budget}-entry working context, {time.time() - t0:.0f} s")
for (mult, way), (right, n) in sorted(counts.items()):
    print(f"multikey {mult:3d}x + {mult:3d}x  {way:15s}: {right:4.1f} of {n}")
