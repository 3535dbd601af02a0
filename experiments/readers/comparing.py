"""A run of one's own against another (the reference, by default): each headline measure's
ratio, run over reference, with its interval, backend by backend, in one frame.

asv's `compare` and pytest-benchmark's `--benchmark-compare` answer "did it get slower": here
the answer carries its interval, since the lab's numbers move between runs. A measure is
compared only where both runs measured it for the same backend; the intervals are the
readers' own (`uncertainty`), drawn over each side's samples (and its repeats, where it has
several), so a ratio whose interval holds 1 is not a change this pair of runs can tell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.results import RESULTS, find, load

__all__ = ["HEADLINES", "compare"]

#: The measures compared: (experiment, metric as the frame names it, what it is, unit).
HEADLINES = (
    ("latency", "p50", "submit → first pass, median at 20/s", "ms"),
    ("latency", "p99", "submit → first pass, p99 at 20/s", "ms"),
    ("idle", "worker_requests", "an idle worker's requests a second", "req/s"),
    ("throughput", "passes_per_s", "workflows a second, one process", "wf/s"),
    ("takeover", "takeover", "takeover after a kill, median at a 1 s lease", "s"),
)


def compare(run: Any, reference: str | Path | None = None) -> Any:
    """`run` (a folder, its path as text, "latest", or the frame `lab.run` returned) over
    `reference` (the committed reference by default): one row per headline measure and
    backend both measured, with both values, the ratio and its 95% interval, and whether
    that interval leaves out 1 (`changed`)."""
    import pandas

    from experiments.readers.figures import order
    from experiments.readers.uncertainty import distinguishable

    mine = _folder(run)
    theirs = RESULTS if reference is None else _folder(reference)
    rows = []
    for experiment, metric, what, unit in HEADLINES:
        if not ((mine / f"{experiment}.csv").exists() and (theirs / f"{experiment}.csv")
                .exists()):
            continue
        sides = (load(experiment, mine), load(experiment, theirs))
        shared = [b for b in order(sides[0]["backend"].unique()) if b in set(sides[1]["backend"])]
        for backend in shared:
            found = _ratio(experiment, metric, sides, str(backend))
            if found is None:
                continue
            interval, values = found
            rows.append({"measure": what, "backend": backend, "unit": unit,
                         "run": values[0], "reference": values[1],
                         "ratio": interval.estimate, "ratio_lo": interval.lo,
                         "ratio_hi": interval.hi, "changed": distinguishable(interval)})
    return pandas.DataFrame(rows, columns=["measure", "backend", "unit", "run", "reference",
                                           "ratio", "ratio_lo", "ratio_hi", "changed"])


def _folder(run: Any) -> Path:
    where = getattr(run, "attrs", {}).get("where") if not isinstance(run, str | Path) else run
    if where is None:
        raise TypeError("compare() takes a folder of results or the frame lab.run returned")
    return find(where)


def _ratio(experiment: str, metric: str, sides: tuple[Any, Any], backend: str
           ) -> tuple[Any, tuple[float, float]] | None:
    """The interval of `metric`'s ratio for `backend` (run over reference) and the two
    values, or None where a side has no samples of it."""
    import numpy

    from experiments.readers.uncertainty import nested, nested_ratio, ratio

    if experiment == "latency":
        from experiments.readers.summaries.latency import HEADLINE_RATE, samples

        q = {"p50": 0.5, "p99": 0.99}[metric]
        drawn = [samples(side, backend, HEADLINE_RATE) for side in sides]
        if not all(sum(len(r) for r in d) for d in drawn):
            return None
        values = tuple(nested(d, [q])[0].estimate for d in drawn)
        return nested_ratio(drawn[0], drawn[1], q), (values[0], values[1])
    if experiment == "throughput":
        from experiments.readers.summaries.throughput import rates

        drawn = [rates(side, backend, 1) for side in sides]
    elif experiment == "takeover":  # ours: a rival's kills are at settings of its own
        drawn = [side[(side["backend"] == backend) & (side["metric"] == metric)
                      & (side["lease_s"] == 1.0) & (side.get("phase", "") != "mid-job")
                      ]["value"].to_numpy() for side in sides]
    else:
        drawn = [side[(side["backend"] == backend) & (side["metric"] == metric)
                      & (side.get("variant", "default") == "default")]["value"].to_numpy()
                 for side in sides]
    if not all(len(d) for d in drawn):
        return None
    values = tuple(float(numpy.median(d)) for d in drawn)
    return ratio(drawn[0], drawn[1]), (values[0], values[1])
