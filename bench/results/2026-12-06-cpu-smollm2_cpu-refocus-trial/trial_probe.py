"""Probe: do refocus trials or the fallback (allocator.inference.refocus_trial / _fallback) take away the harm the
refocus check leaves?

    python bench/results/2026-12-06-cpu-smollm2_cpu-refocus-trial/trial_probe.py RUN_DIR DRAW N_DOCS MODE [MODE ...]

Neither rule was kept: the trial modes run at commit b8c52c6, the fallback at b8c52c6 or 8e3b55d, ``none`` and
``check`` at any later commit (see the README).
MODE: ``none`` (k = 0: never checked), ``check`` (refocus_check 16, the preset before), ``trial`` (check 16 and the
scheduled refocuses as trials), ``fallback`` (check 16 and the fallback to the never-refocused layout every 16
tokens), ``trial_fallback`` (both). Reads each evaluation document's last 128 tokens as mc.eval.session_read does
(compressed: never refocused; focused: LensNet's refocus at the prefix's end, applied at once, and every
refocus_interval tokens, scheduled), once per mode; keeps each token's loss, so the harm can be placed in the tail
(16-token buckets: the first 16 after a refocus are read before its check). Prints focused - compressed per source
with a paired 95% interval, overall and per bucket, and the refocuses checked / undone, trials / taken.
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
import mc.eval.streamed as streamed  # noqa: E402

MODES = {"none": (0, False, False), "check": (16, False, False), "trial": (16, True, False),
         "fallback": (16, False, True), "trial_fallback": (16, True, True)}
run_dir, draw, n_docs, modes = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
cfg = from_dict(RunConfig, json.loads((run_dir / "config.json").read_text()))
cfg = apply_overrides(cfg, [f"eval.draw_seed={draw}", "eval.session_tail=128"])
for m in modes:  # each mode passes the start-up check
    k, trial, fallback = MODES[m]
    over = [f"allocator.inference.refocus_check={k}"] + (["allocator.inference.refocus_trial=true"] if trial else [])
    validate(apply_overrides(cfg, over + (["allocator.inference.refocus_fallback=true"] if fallback else [])))
ecfg = _eval_config(cfg)
ctrl = load_trained_controller(ecfg, run_dir, device=torch.device("cpu"))
docs = corpus_eval_docs(cfg, n_docs, cfg.eval.doc_tokens)[0] + recall_eval_docs(cfg, n_docs, cfg.eval.doc_tokens)
S, every, B = 128, cfg.allocator.inference.refocus_interval, 16

captured = []
_segment_losses = streamed._segment_losses


def keep(*args, **kw):  # each segment's per-token losses, in order: the session read's own numbers
    out = _segment_losses(*args, **kw)
    captured.append(out.detach().clone())
    return out


streamed._segment_losses = keep


def read(fn) -> tuple[list[float], float]:
    captured.clear()
    mean, _ = fn()
    return [round(float(x), 5) for x in torch.cat(captured)], mean


rows = []
t0 = time.time()
for d in docs:
    prefix, tail = d.ids[:-S], d.ids[-S:]
    prefix_session(ctrl, prefix, focus=Focus("none"))
    comp, comp_mean = read(lambda: streamed.wc_session_loss(ctrl, tail))
    row = {"name": d.name, "source": d.source, "compressed": comp_mean, "compressed_tok": comp}
    for m in modes:
        inf = ctrl.cfg.allocator.inference  # the session reads the controller's config
        k, trial, fallback = MODES[m]
        inf.refocus_check = k
        if trial or hasattr(inf, "refocus_trial"):  # the trial's code is only in b8c52c6 (see the README)
            inf.refocus_trial = trial
        if fallback or hasattr(inf, "refocus_fallback"):  # the fallback's in b8c52c6 and 8e3b55d
            inf.refocus_fallback = fallback
        _, _, first = prefix_session(ctrl, prefix, focus=Focus("lensnet"))
        scheduled = (lambda: ctrl.refocus(scheduled=True)) if trial else ctrl.refocus
        tok, mean = read(lambda: streamed.wc_session_loss(
            ctrl, tail, every=every, refocus=lambda: len(scheduled().edits)))
        log = [r for r in ctrl.session.refocus_log]
        row[m] = {"loss": mean, "tok": tok, "edits": [len(r.edits) for r in log],
                  "checked": sum(1 for r in log if r.check_fits and not getattr(r, "trial", False)),
                  "undone": sum(1 for r in log if r.check_fits and not getattr(r, "trial", False) and r.reverted),
                  "trials": sum(1 for r in log if r.check_fits and getattr(r, "trial", False)),
                  "taken": sum(1 for r in log if r.check_fits and getattr(r, "trial", False) and not r.reverted),
                  "fallbacks": len(getattr(ctrl.session, "fallback_log", [])),
                  "fell_back": sum(f["fell_back"] for f in getattr(ctrl.session, "fallback_log", []))}
    rows.append(row)
    print(d.name, d.source, round(comp_mean, 3), {m: round(row[m]["loss"] - comp_mean, 3) for m in modes}, flush=True)
print(f"{time.time() - t0:.0f} s")
for src in ("corpus", "recall"):
    rs = [r for r in rows if r["source"] == src]
    for m in modes:
        ci = paired_diff_ci([r[m]["loss"] for r in rs], [r["compressed"] for r in rs])
        diff = torch.tensor([[a - b for a, b in zip(r[m]["tok"], r["compressed_tok"])] for r in rs])  # [D, S]
        buckets = " ".join(f"{float(diff[:, i:i + B].mean()):+.3f}" for i in range(0, S, B))
        counts = {c: sum(r[m][c] for r in rs) for c in ("checked", "undone", "trials", "taken", "fallbacks", "fell_back")}
        print(f"{src} {m}: focused - compressed {ci['mean']:+.3f} [{ci['lo']:+.3f}, {ci['hi']:+.3f}]; per {B} tokens "
              f"{buckets}; undone {counts['undone']} of {counts['checked']}, taken {counts['taken']} of "
              f"{counts['trials']} trials, fell back {counts['fell_back']} of {counts['fallbacks']}")
out = Path(sys.argv[0]).with_name(f"probe-{run_dir.name}-draw{draw}.json")
out.write_text(json.dumps({"run": str(run_dir), "draw": draw, "modes": modes, "rows": rows}))
