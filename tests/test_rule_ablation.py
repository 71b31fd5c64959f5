"""Refocus rules on and off (mc.eval.rule_ablation, scripts/mc_ablate.py) on tiny untrained nets."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mc.config import to_dict
from mc.eval.rule_ablation import BASELINE_ARM, DEFAULT_ARMS, ablation_markdown, arm_config, parse_arm, run_rule_ablation
from mc.eval.stats import fmt_ci
from scripts.mc_ablate import main as ablate_main
from tests.test_eval import fake_run, tiny_cfg


def _cfg():
    cfg = tiny_cfg(n_docs=1)
    lr = cfg.eval.long_range
    lr.multiples, lr.depths, lr.n_per_cell, lr.n_needles = [2], [0.1, 0.9], 2, 3
    cfg.eval.draw_seed = 11
    return cfg


def test_arms_read_the_same_documents_and_pair_per_document(tmp_path):
    """A no-op arm (the run's own value) differs from all rules by exactly 0 on every document; an arm that
    changes the refocus is swept on the very same documents; the baseline also sweeps salience and oracle."""
    cfg = _cfg()
    arms = {"same": ["allocator.inference.iterations=" + str(cfg.allocator.inference.iterations)],
            "one iteration": ["allocator.inference.iterations=1", "allocator.inference.max_edits=1"]}
    res = run_rule_ablation(cfg, fake_run(tmp_path, cfg), arms)
    assert list(res["arms"]) == [BASELINE_ARM, "same", "one iteration"] and res["draw_seed"] == 11
    assert res["tasks"] == ["passkey", "multi_needle"] and res["lengths"] == [256]
    base_cells = [c for c in res["cells"] if c["arm"] == BASELINE_ARM]
    assert {c["variant"] for c in base_cells} == {"focused", "salience", "oracle"}
    assert {c["variant"] for c in res["cells"] if c["arm"] != BASELINE_ARM} == {"focused"}
    assert all(c["n"] == 4 for c in res["cells"])  # 2 depths x 2 documents per task and length
    same = [d for d in res["diffs"] if d["arm"] == "same"]
    assert len(same) == 2 and all(d["mean"] == 0.0 and d["lo"] == 0.0 == d["hi"] for d in same)
    assert {(d["arm"], d["task"], d["variant"]) for d in res["diffs"]} == {(a, t, "focused") for a in arms
                                                                           for t in res["tasks"]}
    assert {(x["arm"], x["task"]) for x in res["leads"]} == {(BASELINE_ARM, t) for t in res["tasks"]}  # only arm with both
    md = ablation_markdown(res)
    assert "eval.draw_seed=11" in md and "| one iteration |" in md and f"| {BASELINE_ARM} (oracle) |" in md
    assert f"LensNet minus salience, same documents and search [95% CI]: {BASELINE_ARM} " in md


def test_salience_is_swept_and_paired_in_every_arm_when_asked(tmp_path):
    """salience=True: every arm sweeps the salience rule too (the rules shape its search), paired per document like
    focused: a no-op arm differs by exactly 0 on both variants; the Markdown has a row per arm and variant."""
    cfg = _cfg()
    arms = {"same": ["allocator.inference.iterations=" + str(cfg.allocator.inference.iterations)],
            "one iteration": ["allocator.inference.iterations=1", "allocator.inference.max_edits=1"]}
    res = run_rule_ablation(cfg, fake_run(tmp_path, cfg), arms, salience=True)
    assert res["salience"] is True
    assert {c["variant"] for c in res["cells"] if c["arm"] != BASELINE_ARM} == {"focused", "salience"}
    assert {(d["arm"], d["task"], d["variant"]) for d in res["diffs"]} == {
        (a, t, v) for a in arms for t in res["tasks"] for v in ("focused", "salience")}
    same = [d for d in res["diffs"] if d["arm"] == "same"]
    assert len(same) == 4 and all(d["mean"] == 0.0 and d["lo"] == 0.0 == d["hi"] for d in same)
    # each arm's lead of the learned locator: focused minus salience on the same documents (one length here, so the
    # paired mean is exactly the difference of the two cells' accuracies)
    assert {(x["arm"], x["task"]) for x in res["leads"]} == {(a, t) for a in res["arms"] for t in res["tasks"]}
    acc = {(c["arm"], c["task"], c["variant"]): c["accuracy"] for c in res["cells"]}
    for x in res["leads"]:
        assert x["mean"] == pytest.approx(acc[x["arm"], x["task"], "focused"] - acc[x["arm"], x["task"], "salience"])
        assert x["n"] == 4 and x["lo"] <= x["mean"] <= x["hi"]
    md = ablation_markdown(res)
    assert "| one iteration (salience) |" in md and "| same (salience) |" in md
    lead = next(x for x in res["leads"] if (x["arm"], x["task"]) == ("one iteration", "passkey"))
    assert f"; one iteration {fmt_ci(lead)}" in md


PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "configs" / "preset").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_default_arm_is_a_valid_config_of_every_preset(preset):
    """A default arm switches a rule off with the rules that need it (e.g. long_corpus's lookahead, short-history
    branches and anchor path go with its branches), so `mc_ablate.py --run-dir DIR` runs on any preset's run."""
    from mc.config_loading import load_config  # noqa: PLC0415
    cfg = load_config([f"preset={preset}"])
    for overrides in DEFAULT_ARMS.values():
        arm_config(cfg, overrides)  # raises ConfigError naming the key when a rule is left without what it needs


def test_bad_arms_are_refused():
    with pytest.raises(ValueError, match="name:key.path=value"):
        parse_arm("no edge first")
    with pytest.raises(ValueError, match="name:key.path=value"):
        parse_arm("x:edge_first")
    cfg = _cfg()
    with pytest.raises(ValueError, match="all rules"):
        run_rule_ablation(cfg, "unused", {BASELINE_ARM: ["allocator.inference.iterations=1"]})
    cfg.eval.draw_seed = None
    with pytest.raises(ValueError, match="draw_seed"):
        run_rule_ablation(cfg, "unused", {})


def test_cli_writes_json_and_markdown(tmp_path, capsys):
    cfg = _cfg()
    cfg.eval.draw_seed = None
    run = fake_run(tmp_path, cfg)
    (run / "config.json").write_text(json.dumps(to_dict(cfg)))
    arm = "one iteration:allocator.inference.iterations=1,allocator.inference.max_edits=1"
    assert ablate_main(["--run-dir", str(run), "--draw-seed", "3", "--arm", arm, "--salience", "--quiet"]) == 0
    res = json.loads((run / "eval" / "ablation.json").read_text())
    assert res["draw_seed"] == 3 and list(res["arms"]) == [BASELINE_ARM, "one iteration"] and res["salience"]
    md = (run / "eval" / "ablation.md").read_text()
    assert "| one iteration |" in md and "| one iteration (salience) |" in md
    # a bad arm fails at once with one line and exit 2, before any sweep
    assert ablate_main(["--run-dir", str(run), "--arm", "x:allocator.inference.no_such_rule=1"]) == 2
    assert "mc_ablate: error:" in capsys.readouterr().err
