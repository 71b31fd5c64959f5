"""Probe: does a longer fit of the branches (allocator.inference.branch_tail_tokens = n) change a session's read?

    python session_tail_probe.py RUN_DIR DRAW N_DOCS N [N ...]

Reads each evaluation document's last 128 tokens as mc.eval.session_read does (compressed: never refocused; focused:
LensNet's refocus at the prefix's end and every refocus_interval tokens, the preset's refocus check on), once per
N, and prints focused - compressed per source with a paired 95% interval, with the refocuses checked and undone.
"""
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
from mc.config import RunConfig, from_dict  # noqa: E402
from mc.config_checks import validate  # noqa: E402
from mc.config_loading import apply_overrides  # noqa: E402
from mc.eval.eval_docs import corpus_eval_docs, recall_eval_docs  # noqa: E402
from mc.eval.evaluate import _eval_config, load_trained_controller  # noqa: E402
from mc.eval.focus_policies import Focus, prefix_session  # noqa: E402
from mc.eval.stats import paired_diff_ci  # noqa: E402
from mc.eval.streamed import wc_session_loss  # noqa: E402

run_dir, draw, n_docs, ks = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), [int(k) for k in sys.argv[4:]]
cfg = from_dict(RunConfig, json.loads((run_dir / "config.json").read_text()))
cfg = apply_overrides(cfg, [f"eval.draw_seed={draw}", "eval.session_tail=128", "allocator.inference.refocus_check=16"])
for k in ks:  # each K passes the start-up check
    validate(apply_overrides(cfg, [f"allocator.inference.branch_tail_tokens={k}"]))
ecfg = _eval_config(cfg)
ctrl = load_trained_controller(ecfg, run_dir, device=torch.device("cpu"))
docs = corpus_eval_docs(cfg, n_docs, cfg.eval.doc_tokens)[0] + recall_eval_docs(cfg, n_docs, cfg.eval.doc_tokens)
S, every = 128, cfg.allocator.inference.refocus_interval

rows = []
t0 = time.time()
for d in docs:
    prefix, tail = d.ids[:-S], d.ids[-S:]
    prefix_session(ctrl, prefix, focus=Focus("none"))
    comp, _ = wc_session_loss(ctrl, tail)
    row = {"name": d.name, "source": d.source, "compressed": comp}
    for k in ks:
        ctrl.cfg.allocator.inference.branch_tail_tokens = k  # the refocus reads the controller's config
        _, _, first = prefix_session(ctrl, prefix, focus=Focus("lensnet"))
        foc, later = wc_session_loss(ctrl, tail, every=every, refocus=lambda: len(ctrl.refocus().edits))
        checked = [r for r in ctrl.session.refocus_log if r.check_fits]
        row[str(k)] = {"loss": foc, "edits": [first, *later], "checked": len(checked),
                       "undone": sum(r.reverted for r in checked)}
    rows.append(row)
    print(d.name, d.source, round(comp, 3),
          {k: (round(row[str(k)]["loss"] - comp, 3), row[str(k)]["undone"], row[str(k)]["checked"]) for k in ks},
          flush=True)
print(f"{time.time() - t0:.0f} s")
for src in ("corpus", "recall"):
    rs = [r for r in rows if r["source"] == src]
    for k in ks:
        ci = paired_diff_ci([r[str(k)]["loss"] for r in rs], [r["compressed"] for r in rs])
        print(f"{src} tail {k}: focused - compressed {ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}], "
              f"undone {sum(r[str(k)]['undone'] for r in rs)} of {sum(r[str(k)]['checked'] for r in rs)} checked")
out = Path(sys.argv[0]).with_name(f"session-probe-{run_dir.name}-draw{draw}.json")
out.write_text(json.dumps({"run": str(run_dir), "draw": draw, "ks": ks, "rows": rows}, indent=1))
