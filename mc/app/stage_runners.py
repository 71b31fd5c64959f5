"""The workflow's stage runners: ``fn(cfg, run_dir) -> summary dict`` for each run10 stage.

What each stage does lives in its own module (training, evaluation, bench, report), imported
lazily so the workflow's start-up checks stay fast; :mod:`mc.app.workflow` decides which stages run
and in what order (``STAGE_RUNNERS``).
"""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from mc.config import RunConfig, to_dict
from mc.io import write_json, write_text


def _say(msg: str) -> None:
    print(f"[run10] {msg}", flush=True)


def run_env(cfg: RunConfig, run_dir: Path) -> dict:
    import torch  # noqa: PLC0415

    from mc.build import resolve_device  # noqa: PLC0415
    from mc.harness.probes import device_label  # noqa: PLC0415

    device = resolve_device(cfg.train.device)
    try:
        import matplotlib  # noqa: F401, PLC0415
        plots = True
    except ImportError:
        plots = False
        _say("note: matplotlib is missing, the report will have no plots (MC_EXTRAS=plots bash run10.sh installs it)")
    return {"python": sys.version.split()[0], "platform": platform.platform(), "torch": torch.__version__,
            "device": device_label(device), "cuda_available": torch.cuda.is_available(), "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "matplotlib": plots, "executable": sys.executable}


def run_data(cfg: RunConfig, run_dir: Path) -> dict:
    from mc.data.loader import make_source  # noqa: PLC0415

    d = cfg.data
    out: dict[str, Any] = {"source": d.source, "recall_mix": d.recall_mix, "val_fraction": d.val_fraction,
                           "recall": to_dict(d.recall)}
    if d.source == "recall":
        out["fingerprint"] = make_source(d, "train").fingerprint()
        out["splits"] = {"train": "generated (recall seeds)", "val": "generated (disjoint recall seeds)"}
        return out
    t0 = time.perf_counter()
    splits = {s: make_source(d, s) for s in ("train", "val")}
    out["fingerprint"] = splits["train"].all_docs.fingerprint()  # whole corpus: {file_count, bytes, sha256}
    out["splits"] = {s: {"docs": len(src.docs), "bytes": src.docs.total_bytes()} for s, src in splits.items()}
    out["fingerprint_s"] = round(time.perf_counter() - t0, 2)
    return out


def _progress() -> bool:
    return os.environ.get("MC_PROGRESS", "1") != "0"


def run_stage1(cfg: RunConfig, run_dir: Path) -> dict:
    from mc.train.stage1 import train_stage1  # noqa: PLC0415

    return train_stage1(cfg, run_dir, progress=_progress())


def run_stage2(cfg: RunConfig, run_dir: Path) -> dict:
    from mc.train.stage2 import train_stage2  # noqa: PLC0415

    return train_stage2(cfg, run_dir, progress=_progress())


def run_eval(cfg: RunConfig, run_dir: Path) -> dict:
    from mc.eval.draws import fresh_draw  # noqa: PLC0415
    from mc.eval.evaluate import run_evaluation  # noqa: PLC0415

    return run_evaluation(fresh_draw(cfg), run_dir, progress=_progress())  # a new draw per run (eval.draw_seed)


def run_bench_stage(cfg: RunConfig, run_dir: Path) -> dict:
    """Eager vs the ``bench.modes`` on this run's config, each mode in its own subprocess."""
    from mc.app.bench import run_bench, to_markdown  # noqa: PLC0415

    out = run_dir / "bench"
    res = run_bench(cfg, modes=["eager", *cfg.bench.modes], quick=cfg.bench.quick, reps=cfg.bench.reps or None,
                    progress=_progress(), cases=cfg.bench.cases)
    write_text(out / "bench.md", to_markdown(res))
    write_json(out / "bench.json", res)
    return {"bench": str(out / "bench.json")}


def run_report(cfg: RunConfig, run_dir: Path) -> dict:
    from mc.app.report import write_report  # noqa: PLC0415

    return {"report": str(write_report(cfg, run_dir))}
