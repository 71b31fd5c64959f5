"""Confidence intervals over documents: the statistics the evaluation table reports.

Two estimators, each named in its output (``method``) so the report can say which was used:

* :func:`mean_ci` — a mean with a normal-approximation 95% interval, ``mean ± z * sd / sqrt(n)``
  with the sample standard deviation (``ddof=1``). Used for losses and for paired differences.
* :func:`proportion_ci` — a share of successes with the Wilson score 95% interval. The normal
  approximation collapses to a zero-width interval at 0% or 100% (``sd = 0``), which would claim
  certainty from a handful of documents; Wilson stays honest there.

Pure Python (no torch), so the maths is easy to test against hand-computed values.
"""
from __future__ import annotations

import math
from typing import Sequence

Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal


def _finite(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    bad = [v for v in out if not math.isfinite(v)]
    if bad:
        raise ValueError(f"{what}: {len(bad)} non-finite value(s) (e.g. {bad[0]}); every document must give a "
                         "finite number")
    return out


def mean_ci(values: Sequence[float], z: float = Z95) -> dict:
    """``{mean, lo, hi, sd, n, method}``: normal-approximation interval of the mean.

    One value gives a zero-width interval (``sd`` is reported as None: it is undefined). An empty
    list gives ``mean=None`` and ``n=0`` so a missing source shows up as "n/a", never as 0.
    """
    vals = _finite(values, "mean_ci")
    n = len(vals)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "sd": None, "n": 0, "method": "normal"}
    mean = sum(vals) / n
    if n == 1:
        return {"mean": mean, "lo": mean, "hi": mean, "sd": None, "n": 1, "method": "normal"}
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    half = z * sd / math.sqrt(n)
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd, "n": n, "method": "normal"}


def proportion_ci(successes: Sequence[bool | int | float], z: float = Z95) -> dict:
    """``{mean, lo, hi, n, k, method}``: Wilson score interval of a share of successes (0/1 values)."""
    vals = _finite(successes, "proportion_ci")
    if any(v not in (0.0, 1.0) for v in vals):
        raise ValueError("proportion_ci needs 0/1 (or bool) outcomes per document")
    n = len(vals)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0, "k": 0, "method": "wilson"}
    k = int(sum(vals))
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # clamp: the interval always contains p (rounding can put the bound a hair past it at p=0 or 1)
    lo, hi = min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))
    return {"mean": p, "lo": lo, "hi": hi, "n": n, "k": k,
            "method": "wilson"}


def paired_diff_ci(a: Sequence[float], b: Sequence[float], z: float = Z95) -> dict:
    """Mean of ``a[i] - b[i]`` over the same documents, with a normal-approximation interval.

    Pairing removes the per-document difficulty that dominates the spread of each mean alone,
    so a difference can be clear even when the two intervals overlap.
    """
    if len(a) != len(b):
        raise ValueError(f"paired_diff_ci needs the same documents on both sides, got {len(a)} and {len(b)} values")
    return mean_ci([x - y for x, y in zip(a, b)], z)


def fmt_ci(ci: dict | None, digits: int = 3, *, percent: bool = False) -> str:
    """``"1.234 [1.100, 1.368]"`` (or percentages), ``"n/a"`` when there is no value."""
    if not ci or ci.get("mean") is None:
        return "n/a"
    scale, unit = (100.0, "%") if percent else (1.0, "")
    d = 1 if percent else digits
    return f"{ci['mean'] * scale:.{d}f}{unit} [{ci['lo'] * scale:.{d}f}, {ci['hi'] * scale:.{d}f}]"
