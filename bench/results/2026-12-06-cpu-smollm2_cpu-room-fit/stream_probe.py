"""The corpus tail read as a decoding session reads it: token by token, each token's loss under the layout as it
stands after the tokens before it were appended (no refocus while streaming), for no refocus (`compressed`) and one
refocus (`focused`) with the append hold off and on.

    PYTHONPATH=. python bench/results/2026-12-06-cpu-smollm2_cpu-room-fit/stream_probe.py RUN_DIR DRAW HOLD [OVERRIDE ...]

The evaluation's tail loss (`mc/eval/evaluate.py`, `wc_tail_loss`) appends the whole 32-token tail at once and
scores it under the layout after all the appends; with `allocator.inference.append_hold` that chunk is made room
for in two parts and the refocus's blocks are taken back before the scoring, so that metric cannot tell what the
hold costs the first tokens after a refocus. This probe can. The refocus is made once per document and its session
snapshotted; both hold settings stream from the same snapshot (the refocus does not depend on the hold: the
lookahead reads its continuation as the tokens right after the refocus). Prints per document the mean loss over
the tail (nats/token) and over its first HOLD tokens, then paired means with 95% intervals.
"""
import json
import sys

import torch
import torch.nn.functional as F

from mc.build import load_run
from mc.eval.evaluate import corpus_eval_docs
from mc.eval.stats import fmt_ci, paired_diff_ci

run_dir, draw, hold, overrides = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
torch.set_grad_enabled(False)
ctrl, tok = load_run(run_dir, device="cpu", overrides=[f"eval.draw_seed={draw}", *overrides])
cfg = ctrl.cfg
T = cfg.eval.tail_tokens
# the hold existed at 54b85b6 only; at a later commit the "hold" column is the plain focused read, not streamed twice
HAS_HOLD = hasattr(cfg.allocator.inference, "append_hold")
if not HAS_HOLD:
    print("allocator.inference.append_hold does not exist at this commit: the hold column repeats `focused`")


def stream(s, tail, h):
    """Per-token losses of ``tail`` appended one token at a time to the session as it stands."""
    if HAS_HOLD:
        cfg.allocator.inference.append_hold = s.cfg.allocator.inference.append_hold = h
    out = []
    for t in tail:
        out.append(float(F.cross_entropy(ctrl.next_token_logits()[None].float(), t.view(1))))
        ctrl.append(t.view(1), refocus=False)
    return out


docs, _ = corpus_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
rows = []
for d in docs:
    prefix, tail = d.ids[:-T], d.ids[-T:]
    s = ctrl.begin_session(prefix)
    comp = stream(s, tail, 0)
    s = ctrl.begin_session(prefix)
    edits = len(ctrl.refocus().edits)
    snap = s.snapshot()
    foc = stream(s, tail, 0)
    s.restore(snap)
    held = stream(s, tail, hold) if HAS_HOLD else foc
    rows.append({"doc": d.name, "edits": edits, "compressed": comp, "focused": foc, "focused_hold": held})
    m = lambda x, k=T: sum(x[:k]) / k  # noqa: E731
    print(f"{d.name:40s} edits {edits:2d}  tail: compressed {m(comp):.3f} focused {m(foc):.3f} hold {m(held):.3f}"
          f"   first {hold}: {m(comp, hold):.3f} {m(foc, hold):.3f} {m(held, hold):.3f}", flush=True)

for k, what in ((T, "whole tail"), (hold, f"first {hold} tokens"), (-1, f"tokens {hold + 1}..{T}")):
    sl = (lambda x: x[hold:]) if k == -1 else (lambda x: x[:k])
    mean = lambda r, v: sum(sl(r[v])) / len(sl(r[v]))  # noqa: E731
    c, f, h = ([mean(r, v) for r in rows] for v in ("compressed", "focused", "focused_hold"))
    print(f"{what}: focused - compressed {fmt_ci(paired_diff_ci(f, c))}; with the hold {fmt_ci(paired_diff_ci(h, c))}; "
          f"hold - no hold {fmt_ci(paired_diff_ci(h, f))}")
json.dump({"run_dir": run_dir, "draw": draw, "hold": hold, "overrides": overrides, "rows": rows},
          open(f"stream-draw{draw}-hold{hold}.json", "w"), indent=1)
