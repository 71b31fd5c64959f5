"""Where in a session's read does `focused` lose to `compressed` on corpus text? Per tail position, the session read's
focused and compressed losses, plus a 'first only' session (the prefix-end refocus and its check, no later refocus).

Usage: python where_harm.py RUN_DIR DRAW [overrides...]"""
import sys
import time

import torch

from mc.build import load_run
from mc.eval import streamed
from mc.eval.eval_docs import corpus_eval_docs, recall_eval_docs
from mc.eval.focus_policies import Focus, prefix_session

run_dir, draw = sys.argv[1], int(sys.argv[2])
ov = ["eval.doc_tokens=2048", "eval.session_tail=256", f"eval.draw_seed={draw}", *sys.argv[3:]]
ctrl, _ = load_run(run_dir, device=torch.device("cpu"), overrides=ov)
cfg = ctrl.cfg
S, every = cfg.eval.session_tail, cfg.allocator.inference.refocus_interval
corpus, _ = corpus_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
docs = corpus + recall_eval_docs(cfg, cfg.eval.n_docs, cfg.eval.doc_tokens)
captured: list = []
real_seg = streamed._segment_losses


def seg(*a, **k):
    out = real_seg(*a, **k)
    captured.append(out)
    return out


streamed._segment_losses = seg


def per_token(fn):
    captured.clear()
    fn()
    v = torch.cat(captured)
    assert v.numel() == S, v.numel()
    return v


rows = {}
t0 = time.time()
for doc in docs:
    prefix, tail = doc.ids[:-S], doc.ids[-S:]
    prefix_session(ctrl, prefix, focus=Focus("none"))
    comp = per_token(lambda: streamed.wc_session_loss(ctrl, tail))
    _, _, first = prefix_session(ctrl, prefix, focus=Focus("lensnet"))
    foc = per_token(lambda: streamed.wc_session_loss(ctrl, tail, every=every,
                                                     refocus=lambda: len(ctrl.refocus(scheduled=True).edits)))
    first_log = ctrl.session.refocus_log[0]
    _, _, first2 = prefix_session(ctrl, prefix, focus=Focus("lensnet"))
    only = per_token(lambda: streamed.wc_session_loss(ctrl, tail, every=10 ** 9, refocus=lambda: 0))
    rows.setdefault(doc.source, []).append((comp, foc, only, first, bool(first_log.reverted) if first_log.check_fits else None))
print(f"run {run_dir}, draw {draw}, {time.time() - t0:.0f} s")
spans = [(0, 15), (15, 32), (32, 64), (64, S), (0, S)]
for src, rs in rows.items():
    comp = torch.stack([r[0] for r in rs]); foc = torch.stack([r[1] for r in rs]); only = torch.stack([r[2] for r in rs])
    edited = torch.tensor([r[3] > 0 for r in rs])
    undone = [r[4] for r in rs]
    print(f"\n{src}: {len(rs)} documents, first refocus edited in {int(edited.sum())}, undone by the check in "
          f"{sum(u is True for u in undone)}, kept in {sum(u is False for u in undone)}")
    for a, b in spans:
        d_f = (foc[:, a:b] - comp[:, a:b]).mean(1)  # per document
        d_o = (only[:, a:b] - comp[:, a:b]).mean(1)
        w = (b - a) / S
        print(f"  tokens {a:3d}-{b - 1:3d}: focused - compressed {d_f.mean():+.4f} (x share {w * d_f.mean():+.4f}), "
              f"first-only - compressed {d_o.mean():+.4f} (x share {w * d_o.mean():+.4f}); "
              f"first-only, edited docs {d_o[edited].mean() if edited.any() else float('nan'):+.4f}")
    kept = torch.tensor([u is False for u in undone]); und = torch.tensor([u is True for u in undone])
    for name, m in (("kept", kept), ("undone", und)):
        if m.any():
            print(f"  first refocus {name}: first-only - compressed over 0-14 {(only[m, :15] - comp[m, :15]).mean():+.4f}, "
                  f"15-255 {(only[m, 15:] - comp[m, 15:]).mean():+.4f}")

print("\nfocused - compressed by whether the first refocus edited (mean per token over the span; documents)")
for src, rs in rows.items():
    comp = torch.stack([r[0] for r in rs]); foc = torch.stack([r[1] for r in rs]); only = torch.stack([r[2] for r in rs])
    edited = torch.tensor([r[3] > 0 for r in rs])
    for name, m in (("edited", edited), ("not edited", ~edited)):
        if m.any():
            parts = ", ".join(f"{a}-{b - 1}: {(foc[m, a:b] - comp[m, a:b]).mean():+.4f}" for a, b in spans)
            po = ", ".join(f"{a}-{b - 1}: {(only[m, a:b] - comp[m, a:b]).mean():+.4f}" for a, b in spans)
            print(f"  {src} {name} ({int(m.sum())}): focused {parts}\n      first-only {po}")
