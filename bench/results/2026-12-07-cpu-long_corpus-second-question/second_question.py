"""A session's second question: does `generate` answer it as a new session over the same history would?

Each case is one session: document A up to its value is the prompt and `generate` answers it; then document B up to
its value is appended and `generate` answers again. B's answer is scored (greedy, exact) six ways:
  generate-before  B appended with refocus=False, then generate, its refocus before the first token passed as a
                   scheduled one and without the relayout: as before this record (that refocus was scheduled once the
                   session had refocused, and no refocus rebuilt the layout);
  generate-now     the same with the code as it is: that refocus is the question's (no scheduled margin) and starts
                   from a new session's layout (InferenceSession.relayout_after_prompt);
  generate-unsched generate-before with its refocus not scheduled: this record's first change alone, without the
                   relayout;
  append-before    B appended with append's own refocus, due at B's end, as before this record (scheduled, no
                   relayout), then generate;
  append-now       the same as it is: a chunk of refocus_interval tokens or more is a prompt, its refocus the question's;
  fresh            a new session over the same tokens (A, A's answer, B), then generate: the reference.
Also counted: in how many the question's refocus made edits.

Usage (from the repository root): python second_question.py RUN_DIR DRAW [N_PER_CELL]"""
import sys
import time

import torch

from mc.build import load_run
from mc.data.hf_tokenizer import tokenizer_for
from mc.data.long_tasks import make_long_doc
from mc.data.loader import corpus_haystack

run_dir, draw = sys.argv[1], int(sys.argv[2])
n_per_cell = int(sys.argv[3]) if len(sys.argv) > 3 else 8
ctrl, _ = load_run(run_dir, device=torch.device("cpu"))
cfg = ctrl.cfg
rc, w, v = cfg.data.recall, cfg.model.max_seq_len, cfg.data.recall.value_len
tok = tokenizer_for(cfg.model)
hay = corpus_haystack(cfg.data, "val", tok)
real_refocus = ctrl.refocus


def doc_for(task, mult, depth, seed, k):
    return make_long_doc(task, mult * w, depth, seed, key_len=rc.key_len, value_len=v,
                         n_needles=cfg.eval.long_range.n_needles, tokenizer=tok,
                         template=rc.templates[k % len(rc.templates)], haystack=hay,
                         near_decoys=rc.near_decoys, exclude=[rc.eval_template] if rc.eval_template else ())


def no_relayout(scheduled: bool):
    def refocus(**_):  # whatever the caller asks for
        s = ctrl.session
        relayout, s.relayout_after_prompt = s.relayout_after_prompt, lambda: False
        try:
            return real_refocus(scheduled=scheduled)
        finally:
            s.relayout_after_prompt = relayout
    return refocus


old_refocus = no_relayout(True)  # before: the question's refocus scheduled once the session had one, none relaid


counts: dict = {}
t0 = time.time()
for task in ("passkey", "multi_needle"):
    for mult in (4, 16, 32):
        for depth in (0.1, 0.5, 0.9):
            for k in range(n_per_cell):
                a = doc_for(task, mult, depth, draw * 10_000 + k, k)
                b = doc_for(task, mult, depth, draw * 10_000 + 5_000 + k, k + 1)
                truth = b.ids[-v:].tolist()
                answer_a = None
                for way in ("generate-before", "generate-unsched", "generate-now", "append-before", "append-now",
                            "fresh"):
                    by_append = way.startswith("append")
                    if way == "fresh":
                        s = ctrl.begin_session(torch.cat([a.ids[:-v], answer_a, b.ids[:-v]]))
                    else:
                        s = ctrl.begin_session(a.ids[:-v])
                        said_a = ctrl.generate(v)
                        assert answer_a is None or torch.equal(said_a, answer_a)  # A's turn is the same every way
                        answer_a = said_a
                        if way == "append-before":
                            ctrl.refocus = old_refocus
                        ctrl.append(b.ids[:-v], refocus=by_append)
                    n_log = len(s.refocus_log) - by_append  # append's refocus at B's end is the question's
                    if way == "generate-before":
                        ctrl.refocus = old_refocus
                    if way == "generate-unsched":
                        ctrl.refocus = no_relayout(False)
                    said = ctrl.generate(v).tolist()
                    ctrl.refocus = real_refocus
                    q = s.refocus_log[n_log] if len(s.refocus_log) > n_log else None
                    c = counts.setdefault((task, mult, way), [0, 0, 0])
                    c[0] += said == truth
                    c[1] += 1
                    c[2] += q is not None and len(q.edits) > 0
print(f"run {run_dir}, draw {draw}, {n_per_cell} sessions a cell (depths 0.1, 0.5, 0.9), "
      f"scheduled_margin {cfg.allocator.inference.scheduled_margin}, {time.time() - t0:.0f} s")
for (task, mult, way), (right, n, edited) in sorted(counts.items()):
    print(f"{task:13s} {mult:3d}x + {mult:3d}x  {way:15s}: {right:3d} of {n} exact; the question's refocus edited in {edited}")
