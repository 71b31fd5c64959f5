"""The evaluation's record rank (mc.eval.record_rank): on recall documents with several records, how often LensNet
scores the queried record above every other. Hand-made scores on a tiny controller, so the count is known."""
from __future__ import annotations

import torch

from _tiny_config import SCENARIO, TINY
from mc.build import build_controller
from mc.config_loading import load_config
from mc.eval.evaluate import recall_eval_docs
from mc.eval.record_rank import record_rank, record_rank_line, record_scores
from mc.eval.stats import proportion_ci

RECALL = ["data.source=recall", "data.recall.n_records=3", "data.recall.key_len=2", "data.recall.value_len=2",
          "data.recall.records_region=0.5"]


def _setup(n_records: int = 3, n_docs: int = 8):
    cfg = load_config(TINY + SCENARIO + RECALL + [f"data.recall.n_records={n_records}"])
    return build_controller(cfg, device=torch.device("cpu")), recall_eval_docs(cfg, n_docs, 128)


def _score_record(ctrl, pick):
    """LensNet stand-in: 1 on the entries over the record ``pick(doc)`` names, 0 elsewhere."""
    state = {}
    ctrl.session_scores = lambda s: s.wc.overlap_mask(*state["span"]).float()  # what a refocus scores with
    real = ctrl.begin_session

    def begin(ids):  # which document is being scored: the one whose prompt this is
        doc = next(d.recall for d in state["docs"] if torch.equal(d.ids[: ids.numel()], ids))
        state["span"] = doc.record_spans[pick(doc)]
        return real(ids)
    ctrl.begin_session = begin
    return state


def test_a_lensnet_that_finds_the_queried_record_ranks_it_first_everywhere():
    ctrl, docs = _setup()
    _score_record(ctrl, lambda r: r.answer_record)["docs"] = docs
    rr = record_rank(ctrl, docs)
    assert rr["docs"] + rr["skipped"] == len(docs) and rr["docs"] > 0
    # a record that shares a gist with the queried one ties with it: not a win (LensNet cannot tell them apart there)
    per = [record_scores(ctrl, d.recall.ids[: d.recall.answer_span[0]], d.recall.record_spans) for d in docs]
    ties = sum(sorted(p)[-2] == max(p) for p in per if p is not None)
    assert rr["first"] == rr["docs"] - ties and rr["ties"] == ties and rr["first"] > 0
    assert rr["chance"] == round(1 / 3, 4) and rr["mean_margin"] > 0
    assert f"**{rr['first']} of {rr['docs']}**" in record_rank_line(rr)


def test_a_lensnet_that_finds_records_but_not_the_queried_one_ranks_it_first_only_by_chance():
    ctrl, docs = _setup()
    _score_record(ctrl, lambda r: 0)["docs"] = docs  # always the first record, whichever is asked for
    rr = record_rank(ctrl, docs)
    scored = [d.recall for d in docs if record_scores(ctrl, d.recall.ids[: d.recall.answer_span[0]],
                                                      d.recall.record_spans) is not None]
    assert rr["first"] <= sum(r.answer_record == 0 for r in scored) < rr["docs"]


def test_single_record_documents_have_no_record_rank():
    ctrl, docs = _setup(n_records=1, n_docs=2)
    assert record_rank(ctrl, docs) is None


def test_a_record_without_a_gist_over_it_is_left_out():
    ctrl, docs = _setup(n_docs=2)
    r = docs[0].recall
    tail = (r.answer_span[0] - 2, r.answer_span[0])  # tokens in the raw recent tail
    assert record_scores(ctrl, r.ids[: r.answer_span[0]], [r.record_spans[0], tail]) is None
    assert record_rank_line({"docs": 0, "skipped": 2}).startswith("Record rank: no recall document")


def test_the_report_line_says_what_the_interval_says_against_chance():
    """The verdict follows the Wilson interval: above chance only when its low end is, below only when its high end is
    (the line once called 11 of 14 with an interval of [52%, 92%] "near chance")."""
    def line(first, docs, chance=0.5):
        share = proportion_ci([1] * first + [0] * (docs - first))
        return record_rank_line({"docs": docs, "first": first, "ties": 0, "share": share, "chance": chance,
                                 "mean_margin": 0.1, "skipped": 0})
    assert "Above chance" in line(11, 14) and "Above chance" in line(14, 14)
    assert "Within chance" in line(7, 14) and "Within chance" in line(9, 14)
    assert "Below chance" in line(0, 14) and "Below chance" in line(1, 14, chance=0.5)
    assert "Within chance" in line(1, 14, chance=0.125)
