"""`scaling` read back: per backend and dimension, the slope of log(cost) on log(size) with its
interval and what it says in words (`summary`, `reads`), the median cost at each size
(`costs`), and the figure: a panel a dimension, cost against size on log-log axes (`draw`)."""

from __future__ import annotations

import math
from typing import Any


def slope(sizes: list[float], costs: list[float]) -> float:
    """The least-squares slope of log(cost) on log(size)."""
    points = [(math.log(s), math.log(c)) for s, c in zip(sizes, costs, strict=True)
              if s > 0 and c > 0]
    if len(points) < 2:
        return math.nan
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else math.nan


def summary(frame: Any) -> Any:
    """Per backend and dimension: the slope with its interval (`slope_lo`, `slope_hi`: a
    bootstrap over the repetitions at each size, the slope refitted to each draw's medians),
    what the slope says (`reads`), and the median cost at each size (`ms@<size>`)."""
    import pandas

    from experiments.readers.uncertainty import bootstrap

    rows = frame[frame["metric"] == "cost"]
    out = []
    for (backend, dimension), part in rows.groupby(["backend", "dimension"], sort=False):
        by_size = part.groupby("size", sort=True)["value"]
        sizes = [float(s) for s in by_size.groups]
        found = bootstrap([g.to_numpy() for _, g in by_size], _slopes(sizes))
        entry: dict[str, Any] = {"backend": backend, "dimension": dimension,
                                 "slope": found.estimate, "slope_lo": found.lo,
                                 "slope_hi": found.hi, "reads": reads(found)}
        for size, group in by_size:
            entry[f"ms@{int(size):,}"] = float(group.median())
        out.append(entry)
    return pandas.DataFrame(out)


def costs(frame: Any) -> Any:
    """Per backend, dimension and size, the median cost (ms) with its interval (`median_lo`,
    `median_hi`: a bootstrap over the repetitions), one row each, for a figure's bands."""
    import pandas

    from experiments.readers.uncertainty import quantile

    rows = frame[frame["metric"] == "cost"]
    out = []
    for (backend, dimension, size), group in rows.groupby(["backend", "dimension", "size"],
                                                          sort=False):
        found = quantile(group["value"].to_numpy(), 0.5)
        out.append({"backend": backend, "dimension": dimension, "size": size,
                    "median": found.estimate, "median_lo": found.lo, "median_hi": found.hi,
                    "n": found.n})
    return pandas.DataFrame(out, columns=["backend", "dimension", "size", "median",
                                          "median_lo", "median_hi", "n"])


def _slopes(sizes: list[float]) -> Any:
    """The slope of log(median cost) on log(size), for a bootstrap draw of each size's
    repetitions (arrays shaped (draws, repetitions), one per size)."""
    import numpy

    x = numpy.log(numpy.asarray(sizes))
    dx = x - x.mean()

    def fitted(*draws: Any) -> Any:
        if len(draws) < 2:
            return numpy.full(draws[0].shape[0], numpy.nan)
        with numpy.errstate(divide="ignore", invalid="ignore"):
            y = numpy.log(numpy.stack([numpy.median(d, axis=1) for d in draws], axis=1))
        return ((y - y.mean(axis=1, keepdims=True)) * dx).sum(axis=1) / (dx * dx).sum()

    return fitted


#: Below this (either way) a slope is read as flat. Each size is one configuration, measured
#: at its own moment, so between sizes the machine moves the medians by more than a slope's
#: interval (over the repetitions within each size) can show.
FLAT = 0.2


def reads(found: Any) -> str:
    """What a slope (an `uncertainty.Interval`) says, in words."""
    slope = found.estimate
    if slope != slope:
        return ""
    if abs(slope) < FLAT or (found.lo == found.lo and found.lo <= 0 <= found.hi):
        return "flat (below 0 is noise)" if slope < 0 else "flat"
    if slope < 0:
        return "falls: no design gets cheaper with size, so look at the run"
    if slope < 0.8:
        return "grows, below linear"
    return "about linear" if slope <= 1.1 else "faster than linear"


TITLES = {"records": "Claim + load + release against checkpoint records",
          "inbox": "... against inbox entries",
          "ready": "Take + finish against workflows queued",
          "sleeping": "wake_due against workflows sleeping",
          "cancel": "cancel against workflows queued"}


def draw(frame: Any) -> Any:
    """A panel per dimension, the median cost against the size on log-log axes, a line a
    backend in its family's look, and around it, shaded, the median's interval at each size
    (`costs`: a bootstrap over the repetitions, which covers the noise within a size's own
    moment, not what moved between sizes); the legend in the spare panel, clear of every line
    (the slopes, with theirs, are in the table, `summary`)."""
    from experiments.readers.figures import (
        bounds,
        figure,
        label,
        look,
        measured_ticks,
        nothing,
        order,
        plain_log,
    )
    from experiments.readers.uncertainty import LEVEL

    fig, axes = figure(columns=3, rows=2, width=5.0, height=3.6)
    table = costs(frame)
    panels = [a for row in axes for a in row]
    backends = order(table["backend"])
    for ax, dimension in zip(panels, TITLES, strict=False):
        part = table[table["dimension"] == dimension]
        ax.set_title(TITLES[dimension])
        if part.empty:
            nothing(ax, "not measured in this run")
            continue
        for backend in backends:
            group = part[part["backend"] == backend].sort_values("size")
            if group.empty:
                continue
            seen = look(backend)
            ax.plot(group["size"], group["median"], **seen.line())
            interval = bounds(group, "median")
            if interval is not None:
                ax.fill_between(group["size"], interval[0], interval[1], color=seen.colour,
                                alpha=0.18, linewidth=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        measured_ticks(ax, [float(s) for s in part["size"].unique()])
        plain_log(ax)
        label(ax, TITLES[dimension], "size (log scale)", "median cost (ms, log scale)")
    spare = panels[len(TITLES):]
    for ax in spare:
        ax.set_axis_off()
    handles = [h for ax in panels[:len(TITLES)] for h in ax.get_legend_handles_labels()[0]]
    unique = {h.get_label(): h for h in handles}
    said = (f"shaded: each median's {LEVEL:.0%} interval,\nover the repetitions at that size"
            if table["median_lo"].notna().any() else "one repetition a size: no interval")
    if spare and unique:
        spare[0].legend(list(unique.values()), list(unique), loc="center", fontsize=9,
                        title=f"backend\n({said})", title_fontsize=8,
                        alignment="center")
    elif unique:
        fig.legend(list(unique.values()), list(unique), loc="outside lower center", ncol=7,
                   title=said.replace("\n", " "), title_fontsize=8)
    return fig
