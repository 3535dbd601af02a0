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
    """The quantiles `qs` of `values` (0.5 the median), each with its interval."""
    import numpy

    (found,) = _groups([values]) or [numpy.empty(0)]
    if len(found) < 2:
        estimates = numpy.quantile(found, list(qs)) if len(found) else [math.nan] * len(qs)
        return [Interval(float(e), math.nan, math.nan, len(found)) for e in estimates]
    drawn = _drawn([found], qs, resamples, numpy.random.default_rng(seed), regroup=False)
    return _intervals(numpy.quantile(found, list(qs)), drawn, len(found))


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
    return _ratio([_groups([mine]), _groups([theirs])], q, resamples, seed, regroup=False)


def nested(repeats: Sequence[Sequence[float]], qs: Sequence[float], resamples: int = RESAMPLES,
           seed: int = SEED) -> list[Interval]:
    """The quantiles `qs` of every sample of every repeat together, each with an interval
    from a bootstrap in two steps: the repeats resampled, then the samples within each one
    drawn. So what moved between repeats (a busier spell of the machine) widens it, as a
    bootstrap over the pooled samples would not. One repeat: `quantiles` of it."""
    import numpy

    groups = _groups(repeats)
    if len(groups) < 2:
        return quantiles(list(groups[0]) if groups else [], qs, resamples, seed)
    pooled = numpy.concatenate(groups)
    drawn = _drawn(groups, qs, resamples, numpy.random.default_rng(seed), regroup=True)
    return _intervals(numpy.quantile(pooled, list(qs)), drawn, len(pooled))


def nested_ratio(mine: Sequence[Sequence[float]], theirs: Sequence[Sequence[float]],
                 q: float = 0.5, resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """`ratio` where each side is a list of repeats (each a sample): with one repeat a side,
    `ratio` of the two; else each side resampled in the two steps of `nested`."""
    sides = [_groups(side) for side in (mine, theirs)]
    if all(len(side) <= 1 for side in sides):
        return _ratio(sides, q, resamples, seed, regroup=False)
    if not all(sides):
        return Interval(math.nan, math.nan, math.nan, 0)
    return _ratio(sides, q, resamples, seed, regroup=True)


def _ratio(sides: list[list[Any]], q: float, resamples: int, seed: int, regroup: bool
           ) -> Interval:
    """The `q` quantile of the first side's samples over the second's, each side drawn on
    its own (`_drawn`), with its interval; `n` the fewer samples of the two."""
    import numpy

    n = min(sum(len(g) for g in side) for side in sides)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    pooled = [numpy.concatenate(side) for side in sides]
    with numpy.errstate(divide="ignore", invalid="ignore"):
        estimate = float(numpy.quantile(pooled[0], q) / numpy.quantile(pooled[1], q))
    if n < 2:
        return Interval(estimate, math.nan, math.nan, n)
    rng = numpy.random.default_rng(seed)
    found = [_drawn(side, [q], resamples, rng, regroup)[:, 0] for side in sides]
    with numpy.errstate(divide="ignore", invalid="ignore"):
        drawn = found[0] / found[1]
    return _intervals([estimate], drawn[:, numpy.newaxis], n)[0]


def _intervals(estimates: Sequence[float], drawn: Any, n: int) -> list[Interval]:
    """Each estimate with the `LEVEL` interval of its column of `drawn` (its finite values;
    none there, no interval)."""
    import numpy

    tail = (1 - LEVEL) / 2
    found = []
    for estimate, column in zip(estimates, drawn.T, strict=True):
        column = column[numpy.isfinite(column)]
        if not len(column):
            found.append(Interval(float(estimate), math.nan, math.nan, n))
            continue
        lo, hi = numpy.quantile(column, [tail, 1 - tail])
        found.append(Interval(float(estimate), float(lo), float(hi), n))
    return found


def _groups(repeats: Sequence[Sequence[float]]) -> list[Any]:
    """The repeats as arrays, NaNs and empty repeats left out."""
    import numpy

    groups = [numpy.asarray(r, dtype=float) for r in repeats]
    groups = [g[~numpy.isnan(g)] for g in groups]
    return [g for g in groups if len(g)]


def _drawn(groups: Sequence[Any], qs: Sequence[float], resamples: int, rng: Any,
           regroup: bool) -> Any:
    """The quantiles `qs` (linear, as `numpy.quantile`) of `resamples` bootstrap draws of
    the pooled `groups`, an array (resamples, len(qs)): each group's samples drawn from it
    with replacement, after (with `regroup`) as many groups drawn from `groups`, with
    replacement, as there are.

    Not drawn sample by sample: a draw holds `n_j` samples of group `j` (its size times how
    often it was picked), so how many of them fall in a span of the sorted pooled samples is
    binomial, and the draw's sample at one rank is found by halving the span, a few
    binomials a level (`_Ranks`), the same distribution as drawing every sample. Each
    quantile gets draws of its own, which leaves each one's interval as it was. (A Python
    loop sorting thousands of values a draw made a notebook take a minute and a half.)"""
    import numpy

    if not regroup and len(groups) == 1:
        return _order_statistics(groups[0], qs, resamples, rng)
    ranks = _Ranks(groups)
    if regroup:
        picks = rng.integers(0, len(groups), size=(resamples, len(groups)))
        times = (picks[:, :, numpy.newaxis] == numpy.arange(len(groups))).sum(axis=1)
    else:
        times = numpy.ones((resamples, len(groups)), dtype=numpy.int64)
    counts = times * ranks.sizes
    drawn = counts.sum(axis=1)
    found = numpy.empty((resamples, len(qs)))
    for column, q in enumerate(qs):
        place = q * (drawn - 1)
        low = numpy.floor(place).astype(numpy.int64)
        below, above = ranks.pair(counts, low, rng)
        found[:, column] = below + (place - low) * (above - below)
    return found


def _order_statistics(values: Any, qs: Sequence[float], resamples: int, rng: Any) -> Any:
    """`_drawn` of one group, not regrouped: a draw of n samples from n with replacement
    is the sorted samples read at n uniform places, so its k-th smallest is read at the
    k-th smallest of n uniforms, Beta(k, n + 1 - k), and the next one further on by the
    least of the n - k uniforms beyond it: two draws per resample rather than n."""
    import numpy

    ranked = numpy.sort(values)
    n = len(ranked)
    found = numpy.empty((resamples, len(qs)))
    for column, q in enumerate(qs):
        place = q * (n - 1)
        low = math.floor(place)
        at = rng.beta(low + 1, n - low, size=resamples)
        below = ranked[numpy.clip(numpy.ceil(n * at).astype(numpy.int64) - 1, 0, n - 1)]
        above = below
        if low + 1 < n:
            at = at + (1 - at) * rng.beta(1, n - low - 1, size=resamples)
            above = ranked[numpy.clip(numpy.ceil(n * at).astype(numpy.int64) - 1, 0, n - 1)]
        found[:, column] = below + (place - low) * (above - below)
    return found


class _Ranks:
    """The pooled samples of some groups, sorted once, and the draw's sample at a rank.

    A draw is `counts[j]` samples from group `j`, uniformly with replacement. Within a span
    of the sorted pooled samples, how many of group `j`'s fall in its left half is binomial
    (the share of `j`'s members there); so the sample at rank `k` is reached by halving
    the span, going left where `k` is below the left half's count."""

    def __init__(self, groups: Sequence[Any]) -> None:
        import numpy

        self.sizes = numpy.array([len(g) for g in groups])
        pooled = numpy.concatenate(groups)
        order = numpy.argsort(pooled, kind="stable")
        self.values = pooled[order]
        owner = numpy.repeat(numpy.arange(len(groups)), self.sizes)[order]
        # members of each group among the first r pooled samples: (total + 1, groups)
        self.before = numpy.zeros((len(pooled) + 1, len(groups)), dtype=numpy.int64)
        self.before[1:] = numpy.cumsum(owner[:, numpy.newaxis] == numpy.arange(len(groups)),
                                       axis=0)

    def pair(self, counts: Any, rank: Any, rng: Any) -> tuple[Any, Any]:
        """Per draw (a row of `counts`), its samples at `rank` and at `rank + 1` (the same
        where it has no more)."""
        import numpy

        start = numpy.zeros(len(rank), dtype=numpy.int64)
        leaf, within, held, (after, after_end, after_counts) = self._descend(
            start, numpy.full_like(start, len(self.values)), counts, rank, rng)
        below = self.values[leaf]
        above = below.copy()
        # the next sample is the leaf's own value again while the leaf holds it, else the
        # first of the nearest span to the leaf's right that the draw holds any of
        beyond = numpy.flatnonzero((within + 1 >= held) & (rank + 1 < counts.sum(axis=1)))
        if len(beyond):
            first = self._descend(after[beyond], after_end[beyond], after_counts[beyond],
                                  numpy.zeros(len(beyond), dtype=numpy.int64), rng)[0]
            above[beyond] = self.values[first]
        return below, above

    def _descend(self, start: Any, end: Any, counts: Any, rank: Any, rng: Any
                 ) -> tuple[Any, Any, Any, tuple[Any, Any, Any]]:
        """Halve each draw's span [start, end), holding `counts` of each group, down to the
        one sample at `rank` in it: that sample's index, `rank`'s place among the draw's
        copies of it and how many copies there are, and the nearest span right of it the
        draw holds any of (start, end, counts; empty where none)."""
        import numpy

        start, end, counts, rank = start.copy(), end.copy(), counts.copy(), rank.copy()
        after, after_end = numpy.zeros_like(start), numpy.zeros_like(start)
        after_counts = numpy.zeros_like(counts)
        live = numpy.flatnonzero(end - start > 1)
        while len(live):  # only the spans not yet down to one sample: the binomials cost
            a, b, held, k = start[live], end[live], counts[live], rank[live]
            middle = (a + b) // 2
            inside = self.before[b] - self.before[a]
            share = numpy.divide(self.before[middle] - self.before[a], inside,
                                 out=numpy.zeros(inside.shape), where=inside > 0)
            left = rng.binomial(held, share)
            right = held - left
            on_left = left.sum(axis=1)
            leftward = k < on_left
            noted = leftward & right.any(axis=1)
            after[live[noted]], after_end[live[noted]] = middle[noted], b[noted]
            after_counts[live[noted]] = right[noted]
            start[live] = numpy.where(leftward, a, middle)
            end[live] = numpy.where(leftward, middle, b)
            counts[live] = numpy.where(leftward[:, numpy.newaxis], left, right)
            rank[live] = numpy.where(leftward, k, k - on_left)
            live = live[end[live] - start[live] > 1]
        return start, rank, counts.sum(axis=1), (after, after_end, after_counts)


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
