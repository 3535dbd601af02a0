"""`takeover` read back: per backend, lease and phase, the kills taken over and the median
wait with its interval against lease + tick (`summary`), the one figure quoted beside the other
measures (`typical`), and the figure: the median against the lease, the rivals below (`draw`)."""

from __future__ import annotations

import math
from typing import Any

from experiments.catalogue import PHASES, RECOVERIES, Recovery, tick_for
from experiments.readers.uncertainty import Interval


def summary(frame: Any) -> Any:
    """Per backend, lease and phase (and a rival's recovery): the trials (`n`), the median of
    those taken over with its interval (`median_lo`, `median_hi`: bootstrap over the kills),
    min, max, the bound lease + tick and the median as a share of it; for a rival how many
    were taken over, what it was set to and, where none or only some were, "never" and why
    (`typical` counts those as never in its median; here they are counted, not timed)."""
    from experiments.readers.uncertainty import quantile

    frame = frame.assign(recovery=frame["recovery"].fillna("") if "recovery" in frame
                         else "")
    keys = ["backend", "lease_s", "phase", "recovery"]
    trials_ = frame[frame["metric"].isin(["takeover", "not_taken_over"])]
    table = trials_.groupby(keys, sort=False)["metric"].agg(n="count").reset_index()
    took = frame[frame["metric"] == "takeover"].groupby(keys)["value"]
    stats = took.agg(["count", "median", "min", "max"])
    found = {key: quantile(group.to_numpy(), 0.5) for key, group in took}
    nothing = Interval(math.nan, math.nan, math.nan, 0)
    at = [tuple(k) for k in table[keys].itertuples(index=False)]
    table["median"] = [stats["median"].get(k, math.nan) for k in at]
    table["median_lo"] = [found.get(k, nothing).lo for k in at]
    table["median_hi"] = [found.get(k, nothing).hi for k in at]
    for column in ("min", "max"):
        table[column] = [stats[column].get(k, math.nan) for k in at]
    table["taken_over"] = [int(stats["count"].get(k, 0)) for k in at]
    bound = frame[frame["metric"] == "lease_plus_tick"].groupby(
        ["backend", "lease_s", "phase"])["value"].first()
    table["lease_plus_tick"] = [bound.get((b, lease, p), float("nan")) for b, lease, p in
                                zip(table["backend"], table["lease_s"], table["phase"],
                                    strict=True)]
    table["median_vs_bound"] = table["median"] / table["lease_plus_tick"]
    table["setting"] = [_recovery(b, r).setting.format(L=f"{lease:g}", Q=f"{lease / 4:g}")
                        for b, r, lease in zip(table["backend"], table["recovery"],
                                               table["lease_s"], strict=True)]
    table["note"] = [_note(b, r, n, t) for b, r, n, t in
                     zip(table["backend"], table["recovery"], table["n"], table["taken_over"],
                         strict=True)]
    return table


def _recovery(backend: str, recovery: str) -> Recovery:
    return RECOVERIES.get(backend, {}).get(recovery, Recovery(""))


def _note(backend: str, recovery: str, n: int, taken: int) -> str:
    """"never: why" where no trial was taken over, "k of n" where only some were."""
    if taken == n:
        return ""
    if taken == 0:
        return f"never: {_recovery(backend, recovery).never or 'not in the patience given'}"
    return f"{taken} of {n} taken over"


#: The one takeover figure quoted beside the other measures (the overview, the design
#: documents' table), named so wherever it is shown: a kill can land at any moment of a pass,
#: so both phases' kills count.
TYPICAL = "median of all kills, both phases"


def typical(frame: Any, backend: str, lease_s: float, recovery: str = "") -> Interval:
    """`TYPICAL` for one backend at one lease (a rival: at one of its `RECOVERIES`; ours have
    none, ""), as an `uncertainty.Interval` over the kills. A kill that was never taken over
    (a rival's `not_taken_over`) is longer than any that was, so it counts as `math.inf`: the
    estimate is inf where half the kills or more were never taken over, and so is a bound
    where that many of the resampled medians were; nothing becomes NaN."""
    import numpy

    from experiments.readers.uncertainty import LEVEL, RESAMPLES, SEED, quantile

    rows = frame[(frame["backend"] == backend) & (frame["lease_s"] == lease_s)]
    if "recovery" in rows:
        rows = rows[rows["recovery"].fillna("").astype(str) == recovery]
    took = rows.loc[rows["metric"] == "takeover", "value"].to_numpy(dtype=float)
    never = int((rows["metric"] == "not_taken_over").sum())
    if not never:
        return quantile(took, 0.5)
    values = numpy.concatenate([took, numpy.full(never, math.inf)])
    n = len(values)

    def median(a: Any) -> Any:  # the middle two's mean, as numpy's, but inf + inf is inf
        ordered = numpy.sort(a, axis=-1)
        return (ordered[..., (n - 1) // 2] + ordered[..., n // 2]) / 2

    estimate = float(median(values))
    if n < 2:
        return Interval(estimate, math.nan, math.nan, n)
    drawn = median(values[numpy.random.default_rng(SEED).integers(0, n, size=(RESAMPLES, n))])
    tail = (1 - LEVEL) / 2  # order statistics: interpolating toward inf would give NaN
    return Interval(estimate, float(numpy.quantile(drawn, tail, method="lower")),
                    float(numpy.quantile(drawn, 1 - tail, method="higher")), n)


def draw(frame: Any) -> Any:
    """Per phase, the median takeover against the lease (whiskers min to max; a thicker bar
    for the median's interval where the summary has one), beside the lease + tick bound; a row
    of panels per family where one axis would hold too many backends; the rivals, killed
    mid-job at their own settings, in a row of their own below."""
    from experiments.readers.figures import bounds, figure, label, look, nothing, panels

    table = summary(frame)
    if "variant" not in table:  # ours have one setting; a rival's row may name its own
        table = table.assign(variant="default")
    rivals = table[table["phase"] == "mid-job"]
    table = table[table["phase"] != "mid-job"]
    series = list(table.groupby(["backend", "variant"], sort=False).groups)
    groups = panels([b for b, _ in series], series=len(series))
    if not groups and not len(rivals):
        groups = [("", [])]
    rows = len(groups) + (1 if len(rivals) else 0)
    fig, axes = figure(columns=2, rows=rows, width=6.5,
                       height=4.5 if rows == 1 else 3.8 if rows <= 3 else 3.0)
    leases = sorted(table["lease_s"].unique())
    for row, (title, chosen) in zip(axes, groups, strict=False):
        for ax, phase in zip(row, PHASES, strict=True):
            part = table[(table["phase"] == phase) & table["backend"].isin(chosen)]
            ax.set_title(f"{title}: {phase}" if title else phase)
            if part.empty:
                nothing(ax, f"no {phase} takeovers measured for these backends")
                continue
            drawn = list(part.groupby(["backend", "variant"], sort=False))
            for k, ((backend, variant), group) in enumerate(drawn):
                group = group.sort_values("lease_s")
                # nudged apart a little at each lease, so whiskers that overlap can be told
                # apart (the lease is what is on the axis, not the nudge)
                x = group["lease_s"] + 0.03 * (k - (len(drawn) - 1) / 2)
                seen = look(str(backend), variant).line()
                ax.errorbar(x, group["median"], capsize=2, elinewidth=0.8, markersize=5,
                            yerr=[group["median"] - group["min"], group["max"] - group["median"]],
                            **seen)
                interval = bounds(group, "median")
                if interval is not None:
                    ax.errorbar(x, group["median"], fmt="none", elinewidth=3, alpha=0.5,
                                ecolor=seen["color"], yerr=[group["median"] - interval[0],
                                                            interval[1] - group["median"]])
            # drawn over the series (zorder), since a median can sit right on it; a marker
            # too, as a quick run measures one lease, where the line is a single point
            ax.plot(leases, [lease + tick_for(lease) for lease in leases], color="black",
                    linestyle=(0, (4, 2)), linewidth=1.5, marker="_", markersize=14,
                    label="lease + tick", zorder=5)
            ax.set_xticks(leases)
            # from zero, the lease being a length; one lease (a quick run's) in the middle
            ax.set_xlim(0, max(leases) * (1.1 if len(leases) > 1 else 2.0))
            label(ax, ax.get_title(), "lease (s)", "kill → other worker's pass starts (s)")
            ax.legend(loc="upper left")  # the lines rise to the right: the corner is empty
    ours = [ax for row in axes[:len(groups)] for ax in row]
    # one scale for every panel of ours, from zero: how far under lease + tick each one is
    top = max((ax.get_ylim()[1] for ax in ours), default=1.0)
    for ax in ours:
        ax.set_ylim(0, top * 1.05)  # headroom: lease + tick can be the highest point
    if len(rivals):
        left, right = axes[-1]
        grid = left.get_subplotspec().get_gridspec()
        left.remove()
        right.remove()
        _draw_rivals(fig.add_subplot(grid[-1, :]), rivals)
    fig.suptitle("Takeover after a SIGKILL: median, whiskers min to max", fontsize=10)
    return fig


def _draw_rivals(ax: Any, table: Any) -> None:
    """The rivals' takeovers as bars in their families' looks (median, whiskers min to max, a
    thicker bar for the median's interval), "never" written where it was, beside ours' bound
    at the same lease."""
    from experiments.readers.figures import bounds, label, look, order

    table = table.assign(rank=[order(table["backend"]).index(str(b)) for b in table["backend"]])
    table = table.sort_values("rank", kind="stable")
    names = [f"{b} ({r})" for b, r in zip(table["backend"], table["recovery"], strict=True)]
    y = list(range(len(table)))
    colours = [look(str(b)).colour for b in table["backend"]]
    ax.barh(y, table["median"].fillna(0), color=colours, height=0.6,
            xerr=[(table["median"] - table["min"]).fillna(0),
                  (table["max"] - table["median"]).fillna(0)],
            error_kw={"elinewidth": 0.8, "capsize": 2})
    interval = bounds(table, "median")
    if interval is not None:
        ax.errorbar(table["median"], y, fmt="none", elinewidth=3, alpha=0.5, ecolor="black",
                    xerr=[(table["median"] - interval[0]).fillna(0),
                          (interval[1] - table["median"]).fillna(0)])
    for i, (median, most, note, hue) in enumerate(zip(table["median"], table["max"],
                                                       table["note"], colours, strict=True)):
        never = note.startswith("never")
        # past the whisker, so the figure does not sit on it
        ax.annotate(note.split(":")[0] if never else f"{median:.3g} s" + (
                    f" ({note})" if note else ""), (0 if never else most, i),
                    xytext=(6, 0), textcoords="offset points", va="center", fontsize=9,
                    color=hue if never else "black", fontweight="bold" if never else None)
    lease = float(table["lease_s"].iloc[0])
    ax.axvline(lease + tick_for(lease), color="black", linestyle=(0, (4, 2)), linewidth=1.5,
               label=f"ours: lease + tick at a {lease:g} s lease")
    ax.legend(loc="lower right")
    ax.set_xlim(0, max(float(table["max"].fillna(0).max()), lease * 2) * 1.15)  # labels
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    label(ax, f"Rivals, killed mid-job (their settings made from a {lease:g} s lease)",
          "kill → another worker runs the job (s)", "")
