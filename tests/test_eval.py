"""Evaluation: end to end on tiny untrained nets, the budget of every variant, the CI maths."""
from __future__ import annotations

import json
import math

import pytest
import torch

from mc.build import build_controller, build_nets
from mc.config import RunConfig
from mc.config_checks import validate
from mc.data.tokenizer import ByteTokenizer
from mc.eval.baselines import lod0_answer, lod0_tail_loss
from mc.eval.evaluate import (VARIANTS, Focus, _variant_labels, load_trained_controller, run_evaluation, wc_recall,
                              wc_tail_loss)
from mc.eval.focus_policies import oracle_refocus, random_refocus, span_scores
from mc.eval.long_range import run_long_range
from mc.eval.read_budget import at_budget
from mc.eval.stats import mean_ci, paired_diff_ci, proportion_ci


def tiny_cfg(**eval_kw) -> RunConfig:
    c = RunConfig()
    c.model.d_model, c.model.n_layers, c.model.n_heads, c.model.max_seq_len = 32, 1, 2, 128
    for net in (c.gistnet, c.lensnet):
        net.d_model, net.n_layers, net.n_heads = 32, 1, 2
    c.mc.block_size, c.mc.max_lod, c.mc.max_entries, c.mc.recent_tokens = 4, 2, 48, 16
    c.mc.bucket_ladder, c.mc.gist_bucket_ladder, c.mc.history_tokens = [16, 32, 48], [1, 4, 16], 256
    r = c.data.recall
    r.doc_tokens, r.n_records, r.key_len, r.value_len = 256, 3, 2, 2
    c.eval.n_docs, c.eval.doc_tokens, c.eval.tail_tokens = 3, 256, 8
    for k, v in eval_kw.items():
        setattr(c.eval, k, v)
    c.train.device = "cpu"
    c.telemetry.jsonl = False
    # untrained LensNet scores still rank entries: the (default) relative allocator policy edits on them
    return validate(c)


def fake_run(tmp_path, cfg, *, wrap=True):
    base, gist, lens = build_nets(cfg, torch.device("cpu"))
    (tmp_path / "stage1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "stage2").mkdir(parents=True, exist_ok=True)
    torch.save({"model": base.state_dict(), "step": 3}, tmp_path / "stage1" / "base.pt")
    state = {"gistnet": gist.state_dict(), "lensnet": lens.state_dict()}
    torch.save({"controller": state, "step": 5} if wrap else state, tmp_path / "stage2" / "ckpt.pt")
    return tmp_path


def test_run_evaluation_end_to_end(tmp_path):
    cfg = tiny_cfg()
    out = run_evaluation(cfg, fake_run(tmp_path, cfg), progress=False, max_files=150)
    on_disk = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert on_disk["budget"] == cfg.mc.max_entries
    assert set(on_disk["variants"]) == set(VARIANTS)
    assert out["documents"]["n_recall"] == 3 and out["documents"]["n_corpus"] == 3
    for metric in ("corpus_tail_loss", "recall_tail_loss", "recall_answer_nll", "recall_accuracy"):
        for v in VARIANTS:
            ci = on_disk["metrics"][metric][v]
            assert ci["n"] == 3, (metric, v)
            assert ci["lo"] <= ci["mean"] <= ci["hi"], (metric, v, ci)
            assert math.isfinite(ci["mean"])
        assert set(on_disk["paired"][metric]) == {"focused-recency", "focused-compressed", "focused-random",
                                                  "compressed-recency"}
    for row in on_disk["per_doc"]:  # the random control makes as many edits as LensNet did (when legal)
        for task, n in row["edits"].items():
            assert row["random_edits"][task] <= n, (task, row["edits"], row["random_edits"])
    # untrained byte model: the loss is near log(259)
    assert 4.0 < on_disk["metrics"]["corpus_tail_loss"]["recency"]["mean"] < 7.0
    maps = on_disk["lod_maps"]
    assert {m["source"] for m in maps} == {"corpus", "recall"}
    for m in maps:  # entries tile the history before and after the refocus
        for key in ("before", "after"):
            assert sum(cfg.mc.block_size ** lod for lod, _ in m[key]) == m["num_tokens"]
    assert any(m["before"] != m["after"] for m in maps), "the refocus never changed a layout"


def test_variants_use_the_budget(tmp_path):
    cfg = tiny_cfg(n_docs=2)
    out = run_evaluation(cfg, fake_run(tmp_path, cfg), progress=False, max_files=150)
    B, K = cfg.mc.max_entries, cfg.mc.block_size
    for row in out["per_doc"]:
        for task, ent in row["entries"].items():
            assert ent["recency"] == B, (task, ent)
            # fill=True expands while a block fits, appends collapse K siblings (freeing K-1) only when
            # the budget is full: the context ends within one block of the budget, never over it
            assert B - K < ent["compressed"] <= B, (task, ent)
            assert ent["focused"] <= B, (task, ent)
            assert ent["full"] == cfg.model.max_seq_len  # 256-token docs > max_seq_len: truncated, labelled
    assert "truncated" in out["variants"]["full"]


def test_all_lod0_context_matches_the_plain_base_model(tmp_path):
    """With a document that fits the budget, (c) is all LOD0 and must equal the plain LOD0 window:
    this pins the tail alignment (which logits predict which tokens) and LOD0 == plain rotary."""
    cfg = tiny_cfg()
    ctrl = load_trained_controller(cfg, fake_run(tmp_path, cfg), device=torch.device("cpu"))
    B, T = cfg.mc.max_entries, cfg.eval.tail_tokens
    ids = torch.randint(0, 256, (B,), generator=torch.Generator().manual_seed(3))
    c = wc_tail_loss(ctrl, ids, tail=T, focus=Focus("none"))
    assert all(lod == 0 for lod, _ in c["after"]) and c["entries"] == B
    assert c["loss"] == pytest.approx(lod0_tail_loss(ctrl.base, ids, window=B, tail=T), abs=1e-5)
    vl = cfg.data.recall.value_len
    rc = wc_recall(ctrl, ids, value_len=vl, focus=Focus("none"))
    ra = lod0_answer(ctrl.base, ids, window=B, value_len=vl)
    assert rc["nll"] == pytest.approx(ra["nll"], abs=1e-5)
    assert rc["predicted"] == ra["predicted"]


def test_bare_controller_state_and_missing_files(tmp_path):
    cfg = tiny_cfg()
    ctrl = load_trained_controller(cfg, fake_run(tmp_path / "bare", cfg, wrap=False), device=torch.device("cpu"))
    assert ctrl.lensnet is not None
    with pytest.raises(FileNotFoundError, match="stage-1"):
        load_trained_controller(cfg, tmp_path / "nothing")
    (tmp_path / "half" / "stage1").mkdir(parents=True)
    torch.save(build_controller(cfg).base.state_dict(), tmp_path / "half" / "stage1" / "base.pt")
    with pytest.raises(FileNotFoundError, match="stage 2"):
        load_trained_controller(cfg, tmp_path / "half")
    (tmp_path / "half" / "stage2").mkdir()
    torch.save({"optimizer": {}}, tmp_path / "half" / "stage2" / "ckpt.pt")
    with pytest.raises(ValueError, match="no controller state"):
        load_trained_controller(cfg, tmp_path / "half")


def test_mean_ci_known_values():
    ci = mean_ci([1.0, 2.0, 3.0, 4.0])
    sd = math.sqrt(5 / 3)  # sample sd of 1..4
    assert ci["mean"] == 2.5 and ci["sd"] == pytest.approx(sd)
    assert ci["hi"] - ci["mean"] == pytest.approx(1.959964 * sd / 2, rel=1e-6)
    assert ci["method"] == "normal"
    assert mean_ci([]) ["mean"] is None and mean_ci([]) ["n"] == 0
    one = mean_ci([0.7])
    assert one["lo"] == one["hi"] == 0.7
    with pytest.raises(ValueError, match="non-finite"):
        mean_ci([1.0, float("nan")])


def test_proportion_ci_wilson_known_values():
    ci = proportion_ci([1] * 8 + [0] * 2)  # 8/10: Wilson 95% = [0.4902, 0.9433]
    assert ci["mean"] == 0.8 and ci["method"] == "wilson"
    assert ci["lo"] == pytest.approx(0.4902, abs=1e-4) and ci["hi"] == pytest.approx(0.9433, abs=1e-4)
    zero = proportion_ci([False] * 5)  # never a zero-width interval at 0%
    assert zero["lo"] == 0.0 and zero["hi"] == pytest.approx(0.4345, abs=1e-4)
    with pytest.raises(ValueError, match="0/1"):
        proportion_ci([0.5])


def test_paired_diff_ci():
    d = paired_diff_ci([3.0, 4.0, 5.0], [2.0, 3.0, 4.5])
    assert d["mean"] == pytest.approx(2.5 / 3)
    with pytest.raises(ValueError, match="same documents"):
        paired_diff_ci([1.0], [1.0, 2.0])


def test_random_control_makes_as_many_edits_as_asked(tmp_path):
    """A draw of random scores often proposes no trade under the relative policy; the control draws again
    instead of stopping short (before it did, 5 of these 60 sessions got fewer edits than asked)."""
    cfg = tiny_cfg()
    ctrl = load_trained_controller(cfg, fake_run(tmp_path, cfg), device=torch.device("cpu"))
    for seed in range(12):
        ids = torch.randint(0, 256, (240,), generator=torch.Generator().manual_seed(seed))
        for n in (2, 4, 6, 8, 10):  # a full context: every expansion is a trade (two edits), so even counts
            ctrl.begin_session(ids)
            assert random_refocus(ctrl, n, torch.Generator().manual_seed(seed * 100 + n)) == n, (seed, n)
            assert len(ctrl.session.wc) <= cfg.mc.max_entries


def test_random_and_oracle_focus_policies(tmp_path):
    """random: exactly the requested number of legal edits; oracle: the span ends at LOD0 within budget."""
    cfg = tiny_cfg()
    ctrl = load_trained_controller(cfg, fake_run(tmp_path, cfg), device=torch.device("cpu"))
    ids = torch.randint(0, 256, (240,), generator=torch.Generator().manual_seed(5))
    s = ctrl.begin_session(ids)
    # a full context: every expansion is a trade (two edits), so ask for an even count
    assert random_refocus(ctrl, 4, torch.Generator().manual_seed(0)) == 4
    check = ctrl.session.wc.copy()
    assert len(check) <= cfg.mc.max_entries
    s = ctrl.begin_session(ids)
    span = (20, 22)  # far back: inside an LOD2 gist of the compressed layout
    assert any(lod == 2 for lod, _ in s.wc.entries[:1])
    made = oracle_refocus(ctrl, span)
    lod_map = s.wc.lod_map()
    assert made >= 2 and bool((lod_map[span[0]:span[1]] == 0).all()), (made, s.wc.entries[:12])
    assert len(s.wc) <= cfg.mc.max_entries
    assert span_scores(s.wc, *span).sum() == span[1] - span[0]  # one LOD0 entry per needle token
    with pytest.raises(ValueError, match="span"):
        oracle_refocus(ctrl, (5, 5))


def test_long_range_sweep_section(tmp_path):
    """eval.json gets `long_range` with base_window, one cell per task x length x depth x variant, and
    per-document rows; the random control never makes more edits than LensNet did."""
    cfg = tiny_cfg(n_docs=1)
    lr = cfg.eval.long_range
    lr.multiples, lr.depths, lr.n_per_cell, lr.n_needles = [1, 2], [0.1, 0.9], 1, 3
    out = run_evaluation(validate(cfg), fake_run(tmp_path, cfg), progress=False, max_files=150)
    sec = json.loads((tmp_path / "eval" / "eval.json").read_text())["long_range"]
    assert sec["base_window"] == cfg.model.max_seq_len and sec["lengths"] == [128, 256]
    assert sec["variants"] == ["recency", "compressed", "focused", "random", "salience", "oracle"]
    assert len(sec["cells"]) == 2 * 2 * 2 * 6
    for c in sec["cells"]:
        assert {"task", "length", "depth", "variant", "accuracy", "n"} <= set(c) and c["n"] == 1
        assert c["task"] in ("passkey", "multi_needle") and 0.0 <= c["accuracy"] <= 1.0
    assert len(sec["rows"]) == 8
    assert sec["depth_jitter"] == lr.depth_jitter > 0
    for r in sec["rows"]:
        assert abs(r["needle_depth"] - r["depth"]) <= lr.depth_jitter + 1e-9  # a bucket around the depth
        assert r["edits"]["random"] <= r["edits"]["focused"]
        if r["depth"] < 0.5:  # an early needle sits inside a gist of the compressed layout
            assert r["edits"]["oracle"] >= 1, r
            assert r["needle_lod"]["compressed"] >= 1, r
        assert set(r["needle_lod"]) == {"compressed", "focused", "random", "salience", "oracle"}
        assert r["edits"]["salience"] >= 0
        assert r["needle_lod"]["oracle"] == 0, r  # the oracle brings the needle to full detail
        assert r["branch"] == 0  # one branch (the default): LensNet's own path
    assert all((c["other_branch"] == 0.0) if c["variant"] == "focused" else (c["other_branch"] is None)
               for c in sec["cells"])
    oracle_cells = [c for c in sec["cells"] if c["variant"] == "oracle"]
    assert all(c["needle_at_lod0"] == 1.0 for c in oracle_cells)
    assert all(c["needle_at_lod0"] is None for c in sec["cells"] if c["variant"] == "recency")
    assert out["long_range"]["cells"] == sec["cells"]


def test_long_range_sweep_on_corpus_haystack_with_held_out_template():
    """With a corpus haystack, two training templates and a held-out one, each task is swept with the training
    templates in turn and again as ``<task>@held_out`` with the held-out template only; rows say which."""
    cfg = tiny_cfg(n_docs=1)
    r = cfg.data.recall
    r.haystack, r.templates, r.eval_template, r.near_decoys = "corpus", ["{k}={v}", "{k}: {v}"], "{k} is {v}", True
    lr = cfg.eval.long_range
    lr.multiples, lr.depths, lr.n_per_cell, lr.n_needles, lr.variants = [2], [0.5], 2, 3, ["compressed", "oracle"]
    sec = run_long_range(build_controller(validate(cfg), device="cpu"), cfg)
    assert sec["tasks"] == ["passkey", "multi_needle", "passkey@held_out", "multi_needle@held_out"]
    assert sec["haystack"] == "corpus" and sec["eval_template"] == "{k} is {v}"
    by_task = {t: [r["template"] for r in sec["rows"] if r["task"] == t] for t in sec["tasks"]}
    assert by_task["passkey"] == ["{k}={v}", "{k}: {v}"] and by_task["passkey@held_out"] == ["{k} is {v}"] * 2
    assert {c["task"] for c in sec["cells"]} == set(sec["tasks"]) and len(sec["cells"]) == 4 * 2
    # the oracle opens every needle as far as this tiny budget allows (a 9-token record across a 16-token gist
    # boundary at 2x does not fit whole at LOD0 in 48 entries: mc.eval.oracle_layout's test covers that rule)
    assert all(r["needle_lod"]["oracle"] < r["needle_lod"]["compressed"] for r in sec["rows"])


def test_long_range_reads_the_same_nets_at_another_budget():
    """eval.long_range.budget: every variant reads at W = 96 (the run trained at 48) through a controller over the
    same nets whose layouts hold more than 48 entries; the compression is against 96 and the run's controller never
    read a document. A budget past the base's window (recency could not read it) or inside the raw tail is refused."""
    cfg = validate(tiny_cfg(n_docs=1))
    lr = cfg.eval.long_range
    lr.multiples, lr.depths, lr.n_per_cell, lr.tasks = [4], [0.5], 1, ["passkey"]
    lr.variants, lr.budget = ["recency", "compressed", "oracle"], 96
    ctrl = build_controller(cfg, device="cpu")
    sec = run_long_range(ctrl, validate(cfg))
    assert sec["budget"] == 96 and sec["compression"] == {"512": round(512 / 96, 2)} and len(sec["rows"]) == 1
    assert ctrl.session is None and ctrl.cfg.mc.max_entries == 48
    wide, wcfg = at_budget(ctrl, cfg, 96)
    assert wide.lensnet is ctrl.lensnet and wide.gistnet is ctrl.gistnet and wcfg.mc.bucket_ladder == [16, 32, 48, 96]
    wide.begin_session(torch.arange(512) % 200)
    assert 48 < len(wide.session.wc) <= 96
    lr.budget = 48
    at_w = run_long_range(ctrl, validate(cfg))
    assert at_w["budget"] == 48 and ctrl.session is not None  # at the run's own W the run's controller reads
    for bad, says in ((8, "larger than mc.recent_tokens"), (-1, "integer >= 0"), (129, "<= model.max_seq_len")):
        lr.budget = bad
        with pytest.raises(ValueError, match=says):
            validate(cfg)


def test_long_range_rows_say_each_answer_and_count_copied_decoys(monkeypatch):
    """Each row keeps what every variant answered (``said``); ``exact`` is that answer against the queried value,
    and an answer that is another record's value counts as a copied decoy, per row and as a share per cell."""
    import mc.eval.long_range as long_range  # noqa: PLC0415 - the module whose helpers are replaced below

    cfg = validate(tiny_cfg(n_docs=1))
    lr = cfg.eval.long_range
    lr.multiples, lr.depths, lr.n_per_cell, lr.n_needles, lr.tasks = [2], [0.5], 2, 3, ["multi_needle"]
    lr.variants = ["recency", "compressed", "oracle"]
    ctrl = build_controller(cfg, device="cpu")
    for r in run_long_range(ctrl, cfg)["rows"]:
        assert set(r["said"]) == set(r["exact"]) == set(r["copied_decoy"]) == {"recency", "compressed", "oracle"}
        for v, said in r["said"].items():
            assert r["exact"][v] == (said == r["answer"]) and not (r["exact"][v] and r["copied_decoy"][v])
    docs = []
    make = long_range.make_long_doc
    monkeypatch.setattr(long_range, "make_long_doc", lambda *a, **k: docs.append(make(*a, **k)) or docs[-1])
    # every session variant answers the first distractor's value, as a base that copies a decoy would
    monkeypatch.setattr(long_range, "_answer", lambda *a: (ByteTokenizer().encode_body(docs[-1].values[1]), 0, 0))
    lr.variants = ["compressed", "oracle"]
    sec = run_long_range(ctrl, cfg)
    assert all(d.values[1] != d.answer for d in docs)
    assert all(r["copied_decoy"] == {"compressed": True, "oracle": True} and not any(r["exact"].values())
               and r["said"]["oracle"] == docs[i].values[1] for i, r in enumerate(sec["rows"]))
    assert {c["copied_decoy"] for c in sec["cells"]} == {1.0}


def test_long_range_docs_per_multiple():
    """``dense_multiples`` get ``dense_n_per_cell`` documents per cell; the documents a smaller count reads are the
    first ones of the larger count (same seed per document index), so raising a count only adds documents."""
    cfg = validate(tiny_cfg(n_docs=1))
    lr = cfg.eval.long_range
    lr.multiples, lr.depths, lr.n_per_cell, lr.tasks, lr.variants = [1, 2], [0.5], 1, ["passkey"], ["compressed"]
    lr.dense_multiples, lr.dense_n_per_cell = [2], 3
    ctrl = build_controller(cfg, device="cpu")
    sec = run_long_range(ctrl, cfg)
    w = cfg.model.max_seq_len
    assert {c["length"]: c["n"] for c in sec["cells"]} == {w: 1, 2 * w: 3}
    assert [r["doc"] for r in sec["rows"] if r["length"] == 2 * w] == [0, 1, 2]
    lr.dense_multiples = []
    fewer = run_long_range(ctrl, cfg)["rows"]
    pick = ("length", "doc", "needle_start", "needle_depth", "answer")
    assert [{k: r[k] for k in pick} for r in fewer] == [{k: r[k] for k in pick} for r in sec["rows"] if r["doc"] == 0]


def test_long_range_sweep_with_branched_refocus(tmp_path):
    """With ``allocator.inference.branches = 3`` each focused row says which path it kept, and a cell's
    ``other_branch`` is the share of its rows that kept another path than LensNet's zoom."""
    cfg = tiny_cfg(n_docs=1)
    cfg.allocator.inference.branches, cfg.allocator.inference.branch_margin = 3, 0.0
    lr = cfg.eval.long_range
    lr.multiples, lr.depths, lr.n_per_cell, lr.n_needles, lr.variants = [2], [0.1, 0.5], 2, 3, ["focused"]
    sec = run_evaluation(validate(cfg), fake_run(tmp_path, cfg), progress=False, max_files=150)["long_range"]
    rows = sec["rows"]
    assert len(rows) == 2 * 2 * 2 and all(r["branch"] in (0, 1, 2) for r in rows)
    for c in sec["cells"]:
        sel = [r for r in rows if (r["task"], r["length"], r["depth"]) == (c["task"], c["length"], c["depth"])]
        assert c["other_branch"] == sum(r["branch"] > 0 for r in sel) / len(sel)


def test_focused_label_states_the_edit_budget():
    """The report's description of the focused variant gives the refocus's edit budget (0 = iterations x max_edits)."""
    cfg = tiny_cfg(n_docs=1)
    inf = cfg.allocator.inference
    inf.iterations, inf.max_edits, inf.edit_budget = 4, 3, 0
    assert "<= 12 in all" in _variant_labels(cfg)["focused"]
    inf.edit_budget = 5
    assert "<= 5 in all" in _variant_labels(cfg)["focused"]


def test_evaluation_draws(tmp_path):
    """eval.draw_seed picks the documents: unset reads the documents seeded by train.seed (what evaluations always
    read), N reads draw N's, the entry points draw a fresh N (recorded), and bad values stop at start-up."""
    from mc.config_checks import ConfigError
    from mc.eval.draws import DRAW_RANGE, draw_seed, fresh_draw
    from mc.eval.evaluate import recall_eval_docs

    cfg = tiny_cfg()
    assert cfg.eval.draw_seed is None and draw_seed(cfg) == cfg.train.seed
    unset = [d.ids for d in recall_eval_docs(cfg, 2, 128)]
    drawn = fresh_draw(cfg)
    assert cfg.eval.draw_seed is None, "the caller's config is not changed"
    assert 0 <= drawn.eval.draw_seed < DRAW_RANGE and fresh_draw(drawn) is drawn
    again = [d.ids for d in recall_eval_docs(drawn, 2, 128)]
    assert [d.ids.tolist() for d in recall_eval_docs(drawn, 2, 128)] == [x.tolist() for x in again]
    assert any(a.tolist() != b.tolist() for a, b in zip(unset, again)), "another draw, other documents"
    for bad in (-1, 2 ** 31, True):
        c = tiny_cfg()
        c.eval.draw_seed = bad
        with pytest.raises(ConfigError, match="eval.draw_seed"):
            validate(c)
