"""Whether LensNet tells the queried record from the others in a recall document: the evaluation's ``record_rank``.

A recall document with ``data.recall.n_records > 1`` holds several records of one shape (sentence records share
a phrasing and differ in the name), and its question names one. Finding *a* record is one skill (a record looks
unlike its filler); finding *the queried* one needs LensNet to match the question's key with what a gist holds,
and the recall accuracy alone does not say which of the two failed. Here, on each such document's prompt (all
but the answer), the compressed layout is scored once and every record gets the highest score LensNet gives a gist
over its span; the document counts when the queried record's score is above every other record's. Documents
where a record has no gist over it (raw in the recent tail) are left out, since nothing there needs finding.
Chance is one over the number of records. (obsidian Evaluation, "Record rank".)
"""
from __future__ import annotations

import torch

from mc.eval.stats import proportion_ci


def record_scores(ctrl, ids, spans) -> list[float] | None:
    """LensNet's highest score over a gist covering each ``(start, end)`` token span in ``spans``, on the
    compressed layout of a session over ``ids`` (``[T]``; the controller's session is replaced). None when a span
    has no gist over it."""
    s = ctrl.begin_session(ids)
    scores = ctrl.session_scores(s)  # [len(wc)], the refocus's own scores (with the token index's match, if any)
    gist = torch.tensor(s.wc.lods()) > 0
    out = []
    for a, b in spans:
        over = (s.wc.overlap_mask(a, b) > 0) & gist
        if not over.any():
            return None
        out.append(float(scores[over].max()))
    return out


def record_rank(ctrl, docs) -> dict | None:
    """Over the recall documents of ``docs`` (:class:`mc.eval.evaluate.EvalDoc`) with more than one record: how
    often LensNet scores the queried record above every other (``first``, ``share`` with a Wilson 95% interval),
    ``ties`` (another record scores the same, as when they share a gist: not wins), the mean margin (queried minus
    best other score), ``chance`` and the documents left out. None when no document has more than one record."""
    rows = [d.recall for d in docs if d.recall is not None and len(d.recall.record_spans) > 1]
    if not rows:
        return None
    wins, ties, margins, chance, skipped = [], 0, [], 0.0, 0  # wins: per document, 1 when the queried record led
    for r in rows:
        per = record_scores(ctrl, r.ids[: r.answer_span[0]], r.record_spans)
        if per is None:
            skipped += 1
            continue
        others = max(v for i, v in enumerate(per) if i != r.answer_record)
        wins.append(int(per[r.answer_record] > others))
        ties += per[r.answer_record] == others
        margins.append(per[r.answer_record] - others)
        chance += 1.0 / len(per)
    n = len(margins)
    return {"docs": n, "first": sum(wins), "ties": ties, "share": proportion_ci(wins),
            "chance": round(chance / n, 4) if n else None, "mean_margin": round(sum(margins) / n, 4) if n else None,
            "skipped": skipped}


def record_rank_line(rr: dict) -> str:
    """One report line for a ``record_rank`` result."""
    if not rr.get("docs"):
        return f"Record rank: no recall document had every record under a gist ({rr.get('skipped', 0)} left out)."
    share = rr["share"]
    return (f"Record rank: LensNet scores the queried record above every other record of its document in "
            f"**{rr['first']} of {rr['docs']}** recall documents ({share['mean']:.0%} [{share['lo']:.0%}, "
            f"{share['hi']:.0%}]; chance {rr['chance']:.0%}; {rr.get('ties', '?')} tied with another record under a "
            f"shared gist; mean margin {rr['mean_margin']:+.3f}; {rr['skipped']} left out with a record raw in the "
            f"recent tail). {_verdict(share, rr['chance'])}")


def _verdict(share: dict, chance: float) -> str:
    """What the Wilson interval says against chance: above only when its low end is, below only when its high end is."""
    if share["lo"] > chance:
        return "Above chance: LensNet tells the queried record from the others."
    if share["hi"] < chance:
        return "Below chance: LensNet prefers the records the question does not ask for."
    return "Within chance: LensNet finds records, but these documents do not show it finding the queried one."
