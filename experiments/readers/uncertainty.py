"""How sure a number is: percentile-bootstrap confidence intervals for every statistic the
lab's tables and prose quote, and for the ratios between two schedulers.

An interval resamples the unit the run drew independently of the others: submissions within a
latency configuration, repeats of a throughput configuration, kills in takeover, repetitions
at one size in scaling. It says how far the statistic would move had the same run drawn other
samples; it does not cover what moves *between* runs (the machine's load, a neighbour's
work), which only repeats measure, and submissions close in time share one moment of the
machine, so even within a run it errs narrow. Columns carrying an interval are named
`<statistic>_lo` and `<statistic>_hi`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LEVEL", "RESAMPLES", "SEED", "SMALL", "Interval", "bootstrap", "distinguishable",
           "nested", "nested_ratio", "proportion", "quantile", "quantiles", "ratio", "small"]

LEVEL = 0.95
RESAMPLES = 2000
#: Fixed: the same rows, the same bounds.
SEED = 22
#: Fewer samples than this and an interval is flagged as resting on too little: a quantile
#: needs about this many samples beyond it (so p99 wants several hundred), a rate this many
#: repeats.
SMALL = 5

#: A statistic of one resampled draw per sample: arrays shaped (resamples, n) in, one value
#: per resample out.
Statistic = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Interval:
    """A statistic with its `LEVEL` confidence interval, and how many samples it rests on
    (the smaller of the two sides, for a ratio). `lo` and `hi` are NaN where there is nothing
    to resample (one sample, or none)."""

    estimate: float
    lo: float
    hi: float
    n: int

    def overlaps(self, other: Interval) -> bool:
        """Whether the two intervals share a value (or either has none): not told apart."""
        if math.isnan(self.lo) or math.isnan(other.lo):
            return True
        return self.lo <= other.hi and other.lo <= self.hi

    def holds(self, value: float) -> bool:
        return math.isnan(self.lo) or self.lo <= value <= self.hi


def bootstrap(samples: Sequence[Sequence[float]], statistic: Statistic,
              resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """`statistic` of `samples` (one array each), with the interval of its value over
    `resamples` draws that resample each sample, independently, with replacement."""
    return _bootstrap(samples, statistic, 1, resamples, seed)[0]


def quantiles(values: Sequence[float], qs: Sequence[float], resamples: int = RESAMPLES,
              seed: int = SEED) -> list[Interval]:
    """The quantiles `qs` of `values` (0.5 the median), each with its interval, from one set
    of draws."""
    import numpy

    def read(a: Any) -> Any:
        return numpy.quantile(numpy.sort(a, axis=1), list(qs), axis=1)

    return _bootstrap([values], read, len(qs), resamples, seed)


def quantile(values: Sequence[float], q: float, resamples: int = RESAMPLES,
             seed: int = SEED) -> Interval:
    """The `q` quantile of `values`, with its interval."""
    return quantiles(values, [q], resamples, seed)[0]


def _bootstrap(samples: Sequence[Sequence[float]], statistic: Statistic, k: int,
               resamples: int, seed: int) -> list[Interval]:
    """`k` statistics at once: `statistic` gives `k` rows of one value per draw (or one row)."""
    import numpy

    arrays = [numpy.asarray(s, dtype=float) for s in samples]
    arrays = [a[~numpy.isnan(a)] for a in arrays]
    n = min((len(a) for a in arrays), default=0)
    if n == 0:
        return [Interval(math.nan, math.nan, math.nan, 0)] * k
    estimates = numpy.asarray(statistic(*(a[numpy.newaxis, :] for a in arrays)),
                              dtype=float).reshape(k, 1)[:, 0]
    if n < 2:
        return [Interval(float(e), math.nan, math.nan, n) for e in estimates]
    rng = numpy.random.default_rng(seed)
    drawn = [a[rng.integers(0, len(a), size=(resamples, len(a)))] for a in arrays]
    values = numpy.asarray(statistic(*drawn), dtype=float).reshape(k, resamples)
    tail = (1 - LEVEL) / 2
    found = []
    for estimate, row in zip(estimates, values, strict=True):
        row = row[numpy.isfinite(row)]
        if not len(row):
            found.append(Interval(float(estimate), math.nan, math.nan, n))
            continue
        lo, hi = numpy.quantile(row, [tail, 1 - tail])
        found.append(Interval(float(estimate), float(lo), float(hi), n))
    return found


def ratio(mine: Sequence[float], theirs: Sequence[float], q: float = 0.5,
          resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """The `q` quantile of `mine` over that of `theirs` (two independent samples: two
    configurations, or two sets of repeats), with its interval."""
    import numpy

    def divided(a: Any, b: Any) -> Any:
        below = numpy.quantile(b, q, axis=1)
        with numpy.errstate(divide="ignore", invalid="ignore"):
            return numpy.quantile(a, q, axis=1) / below

    return bootstrap([mine, theirs], divided, resamples, seed)


def nested(repeats: Sequence[Sequence[float]], qs: Sequence[float], resamples: int = RESAMPLES,
           seed: int = SEED) -> list[Interval]:
    """The quantiles `qs` of every sample of every repeat together, each with an interval
    from a bootstrap in two steps: the repeats resampled, then the samples within each one
    drawn. So what moved between repeats (a busier spell of the machine) widens it, as a
    bootstrap over the pooled samples would not. One repeat: `quantiles` of it."""
    import numpy

    groups = [numpy.asarray(r, dtype=float) for r in repeats]
    groups = [g[~numpy.isnan(g)] for g in groups]
    groups = [g for g in groups if len(g)]
    if len(groups) < 2:
        return quantiles(list(groups[0]) if groups else [], qs, resamples, seed)
    pooled = numpy.concatenate(groups)
    estimates = numpy.quantile(pooled, list(qs))
    rng = numpy.random.default_rng(seed)
    drawn = numpy.empty((resamples, len(qs)))
    for i in range(resamples):
        picked = [groups[j] for j in rng.integers(0, len(groups), size=len(groups))]
        again = numpy.concatenate([g[rng.integers(0, len(g), size=len(g))] for g in picked])
        drawn[i] = numpy.quantile(again, list(qs))
    tail = (1 - LEVEL) / 2
    bounds = numpy.quantile(drawn, [tail, 1 - tail], axis=0)
    return [Interval(float(e), float(lo), float(hi), len(pooled))
            for e, lo, hi in zip(estimates, bounds[0], bounds[1], strict=True)]


def nested_ratio(mine: Sequence[Sequence[float]], theirs: Sequence[Sequence[float]],
                 q: float = 0.5, resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """`ratio` where each side is a list of repeats (each a sample): with one repeat a side,
    `ratio` of the two; else each side resampled in the two steps of `nested`."""
    import numpy

    sides = [[numpy.asarray(r, dtype=float) for r in side if len(r)] for side in (mine, theirs)]
    if all(len(side) <= 1 for side in sides):
        flat = [list(side[0]) if side else [] for side in sides]
        return ratio(flat[0], flat[1], q, resamples, seed)
    if not all(sides):
        return Interval(math.nan, math.nan, math.nan, 0)
    pooled = [numpy.concatenate(side) for side in sides]
    with numpy.errstate(divide="ignore", invalid="ignore"):
        estimate = float(numpy.quantile(pooled[0], q) / numpy.quantile(pooled[1], q))
    rng = numpy.random.default_rng(seed)
    drawn = numpy.empty(resamples)
    for i in range(resamples):
        found = []
        for side in sides:
            picked = [side[j] for j in rng.integers(0, len(side), size=len(side))]
            found.append(numpy.quantile(numpy.concatenate(
                [g[rng.integers(0, len(g), size=len(g))] for g in picked]), q))
        with numpy.errstate(divide="ignore", invalid="ignore"):
            drawn[i] = found[0] / found[1]
    drawn = drawn[numpy.isfinite(drawn)]
    tail = (1 - LEVEL) / 2
    lo, hi = numpy.quantile(drawn, [tail, 1 - tail])
    return Interval(estimate, float(lo), float(hi), min(len(p) for p in pooled))


def proportion(count: float, trials: float) -> Interval:
    """The share `count` of `trials` is, with its Wilson score interval at `LEVEL`: what the
    share could be that `count` of `trials` would still be a likely draw from. It stays inside
    0..1 and is not empty at none or all (none of 300 is at most 1.3%).

    A share counted out of trials (wakeups lost of those raced) gets this rather than a
    bootstrap: resampling none-lost gives none-lost every time."""
    from statistics import NormalDist

    n = int(trials) if trials == trials else 0
    if n <= 0 or count != count:
        return Interval(math.nan, math.nan, math.nan, 0)
    share = float(count) / n
    z = NormalDist().inv_cdf(1 - (1 - LEVEL) / 2)
    middle = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    lo = 0.0 if count == 0 else max(0.0, middle - half)
    hi = 1.0 if count == n else min(1.0, middle + half)
    return Interval(share, lo, hi, n)


def distinguishable(between: Interval, even: float = 1.0) -> bool:
    """Whether a ratio's (or difference's) interval leaves out `even`, the value at which the
    two would be the same: False where it holds it, or where there is no interval at all."""
    return not math.isnan(between.lo) and not between.holds(even)


def small(n: int, q: float = 0.5) -> bool:
    """Whether `n` samples are too few for the `q` quantile's interval to mean much: fewer
    than `SMALL` of them beyond it (on its far side from the median)."""
    return n * min(q, 1 - q) < SMALL
