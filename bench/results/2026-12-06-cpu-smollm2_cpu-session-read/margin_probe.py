"""Probe (not a feature): does a margin in the unchanged layout's favour cut a session's refocus harm?

    python bench/results/2026-12-06-cpu-smollm2_cpu-session-read/margin_probe.py RUN_DIR DRAW N_DOCS MARGIN [MARGIN ...]

Reads each evaluation document's last eval.session_tail=128 tokens as mc.eval.session_read does (compressed: never
refocused; focused: LensNet's refocus at the prefix's end and every 32 tokens), with the unchanged layout's fit
raised by MARGIN nats before the reader's pick (so a zoom is kept only when it fits the newest tokens + the
lookahead by more than MARGIN better). Prints focused - compressed per source with a paired 95% interval.
"""
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from mc.config import RunConfig, from_dict  # noqa: E402
from mc.config_loading import apply_overrides  # noqa: E402
from mc.eval.eval_docs import corpus_eval_docs, recall_eval_docs  # noqa: E402
from mc.eval.evaluate import _eval_config, load_trained_controller  # noqa: E402
from mc.eval.focus_policies import Focus, prefix_session  # noqa: E402
from mc.eval.stats import paired_diff_ci  # noqa: E402
from mc.eval.streamed import wc_session_loss  # noqa: E402
from mc.refocus import run_refocus  # noqa: E402

run_dir, draw, n_docs, margins = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), [float(m) for m in sys.argv[4:]]
cfg = from_dict(RunConfig, json.loads((run_dir / "config.json").read_text()))
cfg = apply_overrides(cfg, [f"eval.draw_seed={draw}", "eval.session_tail=128"])
ecfg = _eval_config(cfg)
ctrl = load_trained_controller(ecfg, run_dir, device=torch.device("cpu"))
docs = corpus_eval_docs(cfg, n_docs, cfg.eval.doc_tokens)[0] + recall_eval_docs(cfg, n_docs, cfg.eval.doc_tokens)
S, every = 128, cfg.allocator.inference.refocus_interval


def refocus_with(margin):
    def fit_with_margin():
        calls = {"n": 0}
        def fit():
            calls["n"] += 1
            v = ctrl._tail_fit()
            return v + margin if calls["n"] == 1 else v  # the first call is the unchanged layout's (start_fit)
        return fit
    return lambda: len(run_refocus(ctrl.session, ctrl.session_scores, fit_with_margin()).edits)


rows = []
t0 = time.time()
for d in docs:
    prefix, tail = d.ids[:-S], d.ids[-S:]
    prefix_session(ctrl, prefix, focus=Focus("none"))
    comp, _ = wc_session_loss(ctrl, tail)
    row = {"source": d.source, "compressed": comp}
    for m in margins:
        ctrl.begin_session(prefix)
        rf = refocus_with(m)
        first = rf()
        foc, later = wc_session_loss(ctrl, tail, every=every, refocus=rf)
        row[m] = (foc, [first, *later])
    rows.append(row)
    print(d.name, d.source, round(comp, 3), {m: (round(row[m][0] - comp, 3), row[m][1]) for m in margins}, flush=True)
print(f"{time.time() - t0:.0f} s")
for src in ("corpus", "recall"):
    rs = [r for r in rows if r["source"] == src]
    for m in margins:
        ci = paired_diff_ci([r[m][0] for r in rs], [r["compressed"] for r in rs])
        idle = sum(x == 0 for r in rs for x in r[m][1])
        print(f"{src} margin {m:g}: focused - compressed {ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}], "
              f"refocuses without an edit {idle} of {sum(len(r[m][1]) for r in rs)}")
