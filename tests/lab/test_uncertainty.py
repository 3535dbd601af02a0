"""The intervals are drawn without a loop over the draws (`uncertainty._drawn`): these hold
them to what drawing every sample of every draw, the plain way, gives."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy
import pytest

from experiments.readers.uncertainty import _drawn, nested, nested_ratio, quantiles, ratio


def _plainly(groups: list[Any], q: float, resamples: int, seed: int, regroup: bool) -> Any:
    """The bootstrap as it was written first: per draw, repeats picked (with `regroup`),
    then each one's samples, concatenated, then the quantile."""
    rng = numpy.random.default_rng(seed)
    found = numpy.empty(resamples)
    for i in range(resamples):
        picked = ([groups[j] for j in rng.integers(0, len(groups), size=len(groups))]
                  if regroup else groups)
        again = numpy.concatenate([g[rng.integers(0, len(g), size=len(g))] for g in picked])
        found[i] = numpy.quantile(again, q)
    return found


def _shares(values: Any) -> Counter[float]:
    counted = Counter(round(float(v), 6) for v in values)
    return Counter({k: n / len(values) for k, n in counted.items()})


@pytest.mark.slow
@pytest.mark.parametrize("regroup", [True, False])
@pytest.mark.parametrize("q", [0.5, 0.3, 0.9])
def test_the_draws_have_the_distribution_drawing_every_sample_gives(q: float, regroup: bool
                                                                    ) -> None:
    # few distinct values, so every value a draw's quantile can take is counted: the two
    # ways must give each the same share (interpolated ones too), to sampling noise
    groups = [numpy.array([1.0, 2.0, 3.0, 7.0]), numpy.array([10.0, 20.0, 2.5])]
    if not regroup:
        groups = [numpy.array([1.0, 2.0, 3.0, 7.0, 9.0])]
    plain = _shares(_plainly(groups, q, 8_000, 1, regroup))
    fast = _shares(_drawn(groups, [q], 8_000, numpy.random.default_rng(2), regroup)[:, 0])
    assert max(abs(plain[v] - fast[v]) for v in set(plain) | set(fast)) < 0.025


def test_a_wrong_draw_would_be_told_apart_by_that_comparison() -> None:
    # the check above is not blind: the pooled samples drawn once (no repeats picked) have
    # another distribution, and it says so
    groups = [numpy.array([1.0, 2.0, 3.0, 7.0]), numpy.array([10.0, 20.0, 2.5])]
    plain = _shares(_plainly(groups, 0.5, 8_000, 1, True))
    once = _shares(_drawn([numpy.concatenate(groups)], [0.5], 8_000,
                          numpy.random.default_rng(2), False)[:, 0])
    assert max(abs(plain[v] - once[v]) for v in set(plain) | set(once)) > 0.025


def test_the_intervals_of_latencies_are_those_of_the_plain_bootstrap() -> None:
    rng = numpy.random.default_rng(5)
    repeats = [rng.lognormal(1.0, 0.5, 900), rng.lognormal(1.15, 0.5, 900),
               rng.lognormal(0.9, 0.6, 800)]
    for q, found in zip((0.5, 0.9, 0.99), nested(repeats, [0.5, 0.9, 0.99]), strict=True):
        plain = numpy.quantile(_plainly(repeats, q, 2000, 22, True), [0.025, 0.975])
        # 2,000 draws leave the bounds some Monte Carlo noise (the plain way's p99 bound moves
        # by a seventh of its interval between two seeds): within a fifth
        width = plain[1] - plain[0]
        assert abs(found.lo - plain[0]) < 0.2 * width and abs(found.hi - plain[1]) < 0.2 * width
        assert found.estimate == pytest.approx(numpy.quantile(numpy.concatenate(repeats), q))
    (one,) = quantiles(repeats[0], [0.9])
    plain = numpy.quantile(_plainly([repeats[0]], 0.9, 2000, 22, False), [0.025, 0.975])
    assert abs(one.lo - plain[0]) < 0.2 * (plain[1] - plain[0])
    assert abs(one.hi - plain[1]) < 0.2 * (plain[1] - plain[0])


def test_the_same_rows_give_the_same_bounds_and_edges_give_no_interval() -> None:
    rng = numpy.random.default_rng(6)
    repeats = [rng.lognormal(1.0, 0.5, 300) for _ in range(3)]
    assert nested(repeats, [0.5]) == nested(repeats, [0.5])
    assert nested_ratio(repeats, repeats[:2]) == nested_ratio(repeats, repeats[:2])
    assert numpy.isnan(ratio([], [1.0, 2.0]).estimate)
    assert numpy.isnan(ratio([1.0], [2.0]).lo) and ratio([1.0], [2.0]).estimate == 0.5
    assert numpy.isnan(quantiles([3.0], [0.5])[0].lo)
    assert numpy.isnan(nested([[float("nan")], []], [0.5])[0].estimate)
