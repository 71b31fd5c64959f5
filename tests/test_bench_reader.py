"""The reader bench (mc.app.bench_reader, scripts/mc_bench_reader.py) on a tiny model=hf config: both systems
run each case, the ratios and the in-window greedy equality are reported, the memory probe answers in JSON.
The SmolLM2 numbers are in bench/results/ and obsidian Inference ("Against transformers")."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

pytest.importorskip("transformers", reason="the reader bench needs the hf extra (scripts/setup_env.sh installs it)")

from mc.app.bench_reader import main  # noqa: E402
from _hf_models import tiny_hf_dir  # noqa: E402


def test_bench_reports_both_systems_and_the_ratios(tmp_path):
    d = tiny_hf_dir(tmp_path, "llama", 0.25)
    common = ["--in-window-tokens", "8", "--long-tokens", "200", "--new-tokens", "5", "preset=smoke", "model=hf",
              f"model.hf_path={d}", "train.device=cpu"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["--reps", "1", "--no-memory", "--json", str(tmp_path / "b.json"), "--md", str(tmp_path / "b.md"),
                     *common]) == 0
    res = json.loads((tmp_path / "b.json").read_text())
    win, long = res["cases"]["in_window"], res["cases"]["long"]
    assert win["same_tokens"]  # 13 tokens in a 64-entry working context: all LOD0, the same greedy tokens
    assert long["history_tokens"] == 205 and long["entries_read"] <= 64
    for case in (win, long):
        for system in ("megacontext", "transformers"):
            assert case[system]["ttft_s"] > 0 and case[system]["decode_tokens_per_s"] > 0
        assert case["decode_ratio"] == pytest.approx(case["megacontext"]["decode_tokens_per_s"]
                                                     / case["transformers"]["decode_tokens_per_s"])
    assert "MegaContext / transformers" in (tmp_path / "b.md").read_text()
    probe = io.StringIO()
    with redirect_stdout(probe):
        assert main(["--memory-probe", "transformers", "--case", "long", *common]) == 0
    peak = json.loads(probe.getvalue().strip().splitlines()[-1])["peak_mb"]
    assert peak is None or peak >= 0  # None only where /proc/self/clear_refs is not writable
