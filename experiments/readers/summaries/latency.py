"""`latency` read back: per backend, rate and poll, the percentiles of submit → first pass,
each with its interval (`summary`), one configuration's samples (`samples`), and the figure:
the CDFs at the headline rate and the polled schedulers against their poll (`draw`)."""

from __future__ import annotations

from typing import Any

#: The percentiles the tables give, each with its interval.
QUANTILES = (0.5, 0.9, 0.99)


def summary(frame: Any) -> Any:
    """Per backend, variant, rate and poll: how many submissions started (`n`) of those made
    (`submitted`) over how many `repeats`, p50/p90/p99 each with its 95% interval (`p50_lo`,
    `p50_hi`, ...: a bootstrap over the submissions, and over the repeats first where there
    are several), the max, and p50 as a ratio to memory's at the same rate (the
    in-process floor measured in the same run)."""
    import pandas

    from experiments.readers.uncertainty import nested, quantiles

    rows = frame[frame["metric"] == "submit_to_first_pass"]
    keys = ["backend", "variant", "rate", "poll_ms"]
    rows = rows.assign(poll_ms=rows["poll_ms"].fillna(-1))
    made = frame[frame["metric"] == "submissions"]
    made = made.assign(poll_ms=made["poll_ms"].fillna(-1)).groupby(keys)["value"].sum()
    out = []
    for key, group in rows.groupby(keys, sort=False):
        values = group["value"].to_numpy()
        entry: dict[str, Any] = dict(zip(keys, key, strict=True))
        entry["n"] = len(values)
        entry["submitted"] = made.get(key, float("nan"))
        entry["repeats"] = group["repeat"].nunique() if "repeat" in group else 1
        found_all = (nested([g.to_numpy() for _, g in group.groupby("repeat")["value"]],
                            QUANTILES) if entry["repeats"] > 1 else quantiles(values, QUANTILES))
        for name, found in zip(("p50", "p90", "p99"), found_all, strict=True):
            entry[name], entry[f"{name}_lo"], entry[f"{name}_hi"] = found.estimate, found.lo, \
                found.hi
        entry["max"] = float(values.max())
        out.append(entry)
    table = pandas.DataFrame(out, columns=[*keys, "n", "submitted", "repeats", "p50", "p50_lo",
                                           "p50_hi", "p90", "p90_lo", "p90_hi", "p99",
                                           "p99_lo", "p99_hi", "max"])
    floor = table[table["backend"] == "memory"].set_index("rate")["p50"]
    table["p50_vs_memory"] = [
        p50 / floor[rate] if rate in floor.index and floor[rate] > 0 else float("nan")
        for p50, rate in zip(table["p50"], table["rate"], strict=True)
    ]
    table["poll_ms"] = table["poll_ms"].where(table["poll_ms"] >= 0)
    return table


def samples(frame: Any, backend: str, rate: float = 20.0, variant: str = "default",
            poll_ms: float | None = None) -> list[Any]:
    """One configuration's latencies (ms), one per submission that started, as one array per
    repeat (for `uncertainty.nested_ratio`)."""
    rows = frame[(frame["metric"] == "submit_to_first_pass") & (frame["backend"] == backend)
                 & (frame["rate"] == rate) & (frame["variant"] == variant)]
    rows = rows[rows["poll_ms"].isna()] if poll_ms is None else rows[rows["poll_ms"] == poll_ms]
    if "repeat" not in rows or rows["repeat"].nunique() <= 1:
        return [rows["value"].to_numpy()]
    return [group.to_numpy() for _, group in rows.groupby("repeat")["value"]]


def configurations(frame: Any) -> dict[tuple[str, str, float, float | None], list[Any]]:
    """`samples` of every configuration at once, keyed (backend, variant, rate, poll_ms or
    None): one pass over the rows rather than a filter of them all per configuration."""
    rows = frame[frame["metric"] == "submit_to_first_pass"]
    rows = rows.assign(poll_ms=rows["poll_ms"].fillna(-1),
                       repeat=rows["repeat"].fillna(0) if "repeat" in rows else 0)
    found: dict[tuple[str, str, float, float | None], list[Any]] = {}
    keys = ["backend", "variant", "rate", "poll_ms", "repeat"]
    for (backend, variant, rate, poll, _), group in rows.groupby(keys, dropna=False)["value"]:
        key = (str(backend), str(variant), float(rate), None if poll < 0 else float(poll))
        found.setdefault(key, []).append(group.to_numpy())
    return found


HEADLINE_RATE = 20.0


def draw(frame: Any, rate: float | None = None, table: Any = None) -> Any:
    """The CDF of submit → first pass at `rate` (by default the headline rate, 20/s, where
    the run has it, else its rate most measured; a panel per family when one axis would hold
    too many), the median against every rate the run measured (where it measured several and
    no `rate` is picked), and the polled schedulers' p50 and p99 against their poll. `table`
    is `summary(frame)` where the caller has it already."""
    from experiments.readers.figures import figure, grid, panels
    from experiments.refusals import BadInput

    rows = frame[frame["metric"] == "submit_to_first_pass"]
    rates = rows["rate"].value_counts()
    if rate is not None and float(rate) not in rates.index:
        raise BadInput(f"no rate {rate:g}/s in this run; it measured "
                       f"{', '.join(f'{r:g}' for r in sorted(rates.index)) or 'none'}")
    picked = rate is not None
    rate = float(rate) if rate is not None else HEADLINE_RATE if HEADLINE_RATE in rates.index \
        else (float(rates.index[0]) if len(rates) else HEADLINE_RATE)
    table = summary(frame) if table is None else table  # given: the summary of `frame`
    every = not picked and rows["rate"].nunique() > 1
    rows = rows[rows["rate"] == rate]
    plain = rows[rows["poll_ms"].isna()]
    series = list(plain.groupby(["backend", "variant"], sort=False).groups)
    groups = panels([b for b, _ in series], series=len(series)) or [("", [])]
    extra = 2 if every else 1
    columns, count = grid(len(groups) + extra)
    fig, axes = figure(columns=columns, rows=count, width=5.4 if len(groups) > 1 else 6.5,
                       height=3.9 if len(groups) > 1 else 4.5)
    flat = list(axes.flat)
    for ax in flat[len(groups) + extra:]:
        ax.set_visible(False)
    at_rate = table[table["rate"] == rate]
    for ax, (title, chosen) in zip(flat, groups, strict=False):
        _cdfs(ax, plain, at_rate, chosen, ghosts=len(groups) > 1)
        heading = f"Submit → first pass at {rate:g}/s (open loop)"
        ax.set_title(title or heading)
    if len(groups) > 1:
        fig.suptitle(f"Submit → first pass start at {rate:g}/s, open loop (the other "
                     "backends in grey)")
        for ax in flat[1:len(groups)]:
            ax.sharex(flat[0])
    if every:
        _rates(flat[len(groups)], table)
    _polls(flat[len(groups) + extra - 1], plain, at_rate, rate)
    return fig


def _rates(ax: Any, table: Any) -> None:
    """Each backend's median (and its interval, a band) against every arrival rate the run
    measured: where a queue keeps up, and where it falls behind."""
    from matplotlib.ticker import NullLocator

    from experiments.readers.figures import bounds, look, order, plain_log

    plain = table[table["poll_ms"].isna()]
    for backend in order(plain["backend"]):
        for variant, group in plain[plain["backend"] == backend].groupby("variant",
                                                                          sort=False):
            group = group.sort_values("rate")
            seen = look(backend, variant).line()
            ax.plot(group["rate"], group["p50"], markersize=4, **seen)
            interval = bounds(group, "p50")
            if interval is not None:
                ax.fill_between(group["rate"], interval[0], interval[1], color=seen["color"],
                                alpha=0.12, linewidth=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log(ax)
    measured = sorted(float(r) for r in plain["rate"].unique())
    ax.set_xticks(measured, [f"{r:g}" for r in measured])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_title("p50 against the arrival rate, every rate this run measured")
    ax.set_xlabel("submissions a second (open loop)")
    ax.set_ylabel("p50 latency (ms, log scale)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=7)


def _cdfs(ax: Any, plain: Any, table: Any, chosen: list[str], ghosts: bool) -> None:
    from experiments.readers.figures import bounds, counted, look, nothing, plain_log

    if not chosen:
        nothing(ax, "no submission started in this run")
        return
    for (backend, variant), group in plain.groupby(["backend", "variant"], sort=False):
        values = group["value"].sort_values().to_numpy()
        if len(values) == 0:
            continue
        shares = [(i + 1) / len(values) for i in range(len(values))]
        if str(backend) not in chosen:
            if ghosts:
                ax.step(values, shares, where="post", color="#cccccc", linewidth=0.8,
                        zorder=1)
            continue
        seen = look(str(backend), variant).line()
        seen["label"] = counted(seen["label"], len(values))
        ax.step(values, shares, where="post", markevery=_spread(len(values), str(backend)),
                markersize=4, zorder=3, **seen)
        drawn = table[(table["backend"] == backend) & (table["variant"] == variant)
                      & table["poll_ms"].isna()]
        interval = bounds(drawn, "p50")
        if interval is not None:  # the median's interval, where the summary carries one
            lo, hi = (float(v.iloc[0]) for v in interval)
            ax.plot([lo, hi], [0.5, 0.5], color=seen["color"], linewidth=3, alpha=0.6,
                    solid_capstyle="butt", zorder=4)
    ax.set_xscale("log")
    plain_log(ax, "x")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("share of submissions")
    # below the panel: inside, a legend covers the fastest curves (upper left) or the
    # slowest tails (lower right)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3 if len(chosen) > 4 else 2)


def _spread(count: int, backend: str) -> Any:
    """Markers every tenth of a curve, started at a backend's own offset, so two curves that
    lie on each other still show both markers."""
    step = max(1, count // 8)
    return slice(sum(map(ord, backend)) % step, None, step)


def _woken(swept: Any) -> bool:
    """Whether a backend swept across poll intervals is woken rather than polled, from its own
    rows: at its longest poll its median is under a quarter of that poll, where a polled one
    waits about half (a doorbell behind the poll, SQLite's, or a scheduler of your own)."""
    longest = swept.loc[swept["poll_ms"].idxmax()]
    return bool(longest["p50"] < longest["poll_ms"] / 4)


def _polls(ax: Any, plain: Any, table: Any, rate: float) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    from experiments.readers.figures import (
        bounds,
        counted,
        look,
        measured_ticks,
        nothing,
        order,
        plain_log,
    )

    swept = table[table["poll_ms"].notna()]
    ax.set_title(f"Latency against the poll interval ({rate:g}/s)")
    if swept.empty:
        nothing(ax, "no polled backend ran a poll sweep in this run")
        return
    handles: list[Any] = []
    for backend in order(swept["backend"]):
        group = swept[swept["backend"] == backend].sort_values("poll_ms")
        seen = look(backend)
        for column, dashes, width in (("p50", "-", 1.8), ("p99", ":", 1.2)):
            ax.plot(group["poll_ms"], group[column], color=seen.colour, marker=seen.marker,
                    linestyle=dashes, linewidth=width, markersize=5 if column == "p50" else 3)
            interval = bounds(group, column)
            if interval is not None:
                ax.fill_between(group["poll_ms"], interval[0], interval[1], color=seen.colour,
                                alpha=0.15, linewidth=0)
        name = f"{backend} (woken; polls only as a fallback)" if _woken(group) else backend
        handles.append(Line2D([], [], color=seen.colour, marker=seen.marker,
                              label=counted(name, int(group["n"].min()))))
    polls = sorted(float(p) for p in swept["poll_ms"].unique())
    ax.set_xscale("log")
    ax.set_yscale("log")
    measured_ticks(ax, polls)
    left, right = ax.get_xlim()
    ax.plot([left, right], [left / 2, right / 2], color="grey", linewidth=0.8, zorder=1)
    ax.set_xlim(left, right)
    handles += [Line2D([], [], color="#444444", linestyle="-", label="p50"),
                Line2D([], [], color="#444444", linestyle=":", label="p99"),
                Line2D([], [], color="grey", linewidth=0.8, label="half a poll")]
    # the woken schedulers' medians, as levels with their names at the right edge; names of
    # levels that would print on each other share one line
    woken = []
    for backend in ("redis-stream", "redis-set", "postgres"):
        pushed = plain[plain["backend"] == backend]["value"]
        if len(pushed):
            woken.append((float(pushed.quantile(0.5)), backend))
    at_edge = blended_transform_factory(ax.transAxes, ax.transData)
    placed: list[tuple[float, list[str]]] = []
    for value, backend in sorted(woken):
        ax.axhline(value, color=look(backend).colour, linewidth=0.9, linestyle="--", zorder=1)
        if placed and value < placed[-1][0] * 1.4:
            placed[-1][1].append(backend)
        else:
            placed.append((value, [backend]))
    levels = [*swept["p50"], *swept["p99"], *(value for value, _ in woken)]
    ax.set_ylim(min(levels) / 1.6, max(levels) * 1.6)  # room for the labels at either end
    plain_log(ax)
    for value, names in placed:
        ax.text(0.99, value * 1.08, f"{', '.join(names)}: woken, no poll (p50)", ha="right",
                va="bottom", fontsize=7, color="#333333", transform=at_edge)
    ax.set_xlabel("poll interval (ms)")
    ax.set_ylabel("latency (ms, log scale)")
    ax.legend(handles=handles, loc="upper left", ncol=2)
