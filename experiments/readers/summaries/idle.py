"""`idle` read back: per backend, what an idle worker sent and what its server counted a
second, with the CPU each spent, each with its interval (`summary`), and the figure: two bars a
backend, the worker's count and the server's (`draw`)."""

from __future__ import annotations

from typing import Any


def summary(frame: Any) -> Any:
    """Per backend and variant, each count a second: the median over the run's windows (one
    a repeat), and where there are two or more, its interval (`<count>_lo`, `<count>_hi`: a
    bootstrap over the windows); one window has none, and the columns are blank."""
    from experiments.readers.uncertainty import quantile

    wanted = ["worker_requests", "worker_round_trips", "server_requests", "worker_cpu",
              "server_cpu"]
    rows = frame[frame["metric"].isin(wanted)]
    table = rows.pivot_table(index=["backend", "variant"], columns="metric", values="value",
                             aggfunc="median", sort=False).reset_index()
    present = [c for c in wanted if c in table.columns]
    spread = {(b, v, m): quantile(g["value"].to_numpy(), 0.5)
              for (b, v, m), g in rows.groupby(["backend", "variant", "metric"], sort=False)}
    nothing = float("nan")
    for column in present:
        found = [spread.get((b, v, column)) for b, v in zip(table["backend"], table["variant"],
                                                            strict=True)]
        table[f"{column}_lo"] = [f.lo if f is not None else nothing for f in found]
        table[f"{column}_hi"] = [f.hi if f is not None else nothing for f in found]
    return table[["backend", "variant", *[c for column in present
                                          for c in (column, f"{column}_lo", f"{column}_hi")]]]


#: The two counts of each panel: (the worker's column, the server's column, the unit's scale).
PANELS = (("Requests an idle worker sends", "requests per second",
           "worker_requests", "server_requests", 1.0),
          ("CPU an idle worker costs", "CPU milliseconds per second",
           "worker_cpu", "server_cpu", 1000.0))


def draw(frame: Any) -> Any:
    """Two bars a backend (family by family): what the worker counted, solid, and what the
    server counted, pale and hatched; each with its number, or "not counted" where that side
    has no count (a rival's worker, a store with no server)."""
    from matplotlib.patches import Patch

    from experiments.readers.figures import bounds, family, figure, label, look, order

    table = summary(frame)
    rank = {b: i for i, b in enumerate(order(table["backend"]))}
    table = table.assign(_rank=table["backend"].map(rank)).sort_values(
        ["_rank", "variant"], kind="stable").reset_index(drop=True)
    looks = [look(str(b), v) for b, v in zip(table["backend"], table["variant"], strict=True)]
    fig, axes = figure(columns=2, width=6.5, height=1.4 + 0.32 * max(len(table), 4))
    y = list(range(len(table)))
    # a run with no server behind any backend (memory and SQLite) has one bar a backend
    servers = any(theirs in table for _, _, _, theirs, _ in PANELS)
    for ax, (title, unit, own, theirs, scale) in zip(axes[0], PANELS, strict=True):
        sides = ((own, -0.2, False), (theirs, 0.2, True)) if servers else ((own, 0.0, False),)
        for column, offset, pale in sides:
            values = table[column] * scale if column in table else None
            interval = bounds(table, column)
            # the number goes past the whisker where there is one, not under it
            ends = values if interval is None or values is None else \
                (interval[1] * scale).fillna(values)
            for i, seen in enumerate(looks):
                value = float("nan") if values is None else float(values.iloc[i])
                if value != value:
                    ax.annotate("not counted", (0, i + offset), xytext=(3, 0), fontsize=6.5,
                                textcoords="offset points", va="center", color="#888888")
                    continue
                ax.barh(i + offset, value, height=0.4, color=seen.colour,
                        alpha=0.4 if pale else 1.0, hatch="////" if pale else None,
                        edgecolor=seen.colour, linewidth=0.6)
                end = float(ends.iloc[i]) if ends is not None else value
                ax.annotate(f"{value:.3g}", (max(value, end), i + offset), xytext=(3, 0),
                            fontsize=6.5, textcoords="offset points", va="center")
            if interval is not None and values is not None:  # where the summary has one
                lo, hi = (side * scale for side in interval)
                ax.errorbar(values, [i + offset for i in y], xerr=[values - lo, hi - values],
                            fmt="none", ecolor="#333333", capsize=2, linewidth=0.8)
        for i in range(1, len(table)):  # a faint rule between families
            if family(str(table["backend"][i])) != family(str(table["backend"][i - 1])):
                ax.axhline(i - 0.5, color="#bbbbbb", linewidth=0.6)
        ax.set_yticks(y, [seen.name for seen in looks])
        ax.set_ylim(len(table) - 0.5, -0.5)  # the first backend on top
        ax.margins(x=0.12)  # room for the numbers at the bars' ends
        ax.grid(axis="y", visible=False)
        label(ax, title, unit, "")
    # the legend's swatches are what the bars are (solid; pale and hatched), not one backend's
    swatches = [Patch(facecolor="#555555", label="the worker's own count")]
    if servers:
        swatches.append(Patch(facecolor="#555555", alpha=0.4, hatch="////", edgecolor="#555555",
                              label="the server's count"))
    else:
        swatches.append(Patch(facecolor="none", edgecolor="none",
                              label="(no backend in this run has a server to count)"))
    fig.legend(handles=swatches, loc="outside lower center", ncol=2)
    return fig
