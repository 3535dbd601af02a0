"""`throughput` read back: per backend, variant and worker processes, workflows a second at
saturation with their interval over the repeats and the CPU and round trips a pass costs
(`summary`), one configuration's rates (`rates`), and the figure: a row a backend (`draw`)."""

from __future__ import annotations

from typing import Any


def summary(frame: Any) -> Any:
    """Per backend, variant, processes and workload size (`workflows`), the median over
    repeats of each measure; the rate's interval (`passes_per_s_lo`, `passes_per_s_hi`), the
    repeats (`runs`) and their range."""
    from experiments.readers.uncertainty import quantile

    wanted = ["passes_per_s", "worker_cpu_per_pass", "requests_per_pass", "round_trips_per_pass",
              "server_requests_per_pass", "server_commits_per_pass", "server_cpu_per_pass"]
    keys = ["backend", "variant", "processes", "workflows"]
    frame = sized(frame)
    rows = frame[frame["metric"].isin(wanted)]
    # A cluster's requests were read from one node's counters, not where every key lives: not
    # a count of the run's requests, so blank rather than the 0 earlier runs wrote.
    if "server" in rows:
        rows = rows[~((rows["server"] == "cluster")
                      & (rows["metric"] == "server_requests_per_pass"))]
    table = rows.pivot_table(index=keys, columns="metric", values="value", aggfunc="median",
                             sort=False).reset_index()
    floor = table[(table["backend"] == "memory")]["passes_per_s"]
    if len(floor) and "passes_per_s" in table:
        table["vs_memory"] = table["passes_per_s"] / float(floor.iloc[0])
    # The spread over repeats (`--repeat`), beside the median: its interval (a bootstrap over
    # the repeats, so with three it is about their range) and the range itself.
    rates = frame[frame["metric"] == "passes_per_s"].groupby(keys, sort=False)["value"]
    spread = rates.agg(runs="count", min="min", max="max").reset_index()
    found = [quantile(group.to_numpy(), 0.5) for _, group in rates]
    spread["passes_per_s_lo"] = [i.lo for i in found]
    spread["passes_per_s_hi"] = [i.hi for i in found]
    table = table.merge(spread, on=keys, how="left")
    return table[[c for c in [*keys, "passes_per_s", "passes_per_s_lo", "passes_per_s_hi",
                              *wanted[1:], "vs_memory", "runs", "min", "max"]
                  if c in table.columns]]


def sized(frame: Any) -> Any:
    """`frame` with every row's workload size in `workflows`: the override where one was
    given (`--set workflows=2000,12000` measures several), else the most passes any repeat of
    its configuration ran (what was preloaded: the rows of a run without the override do
    not say it otherwise)."""
    keys = ["backend", "variant", "processes"]
    ran = frame[frame["metric"] == "passes"].groupby(keys)["value"].max().rename("_ran")
    out = frame.join(ran, on=keys)
    given = out["workflows"] if "workflows" in out.columns else out["_ran"] * float("nan")
    return out.assign(workflows=given.fillna(out["_ran"])).drop(columns="_ran")


def rates(frame: Any, backend: str, processes: int = 1, variant: str = "default",
          workflows: float | None = None) -> Any:
    """One configuration's workflows a second, one per repeat (at one workload size, where
    the run measured several)."""
    rows = sized(frame)
    rows = rows[(rows["metric"] == "passes_per_s") & (rows["backend"] == backend)
                & (rows["processes"] == processes) & (rows["variant"] == variant)]
    if workflows is not None:
        rows = rows[rows["workflows"] == workflows]
    return rows["value"].to_numpy()


#: A marker for each count of worker processes: the rows are backends, the markers counts.
SHAPES = {1: "o", 2: "s", 4: "D"}


def draw(frame: Any) -> Any:
    """A row a backend (family by family, in its family's hue), a marker for each count of
    worker processes joined by a thin line: the rate at saturation and the CPU a pass costs.
    Twenty-odd backends read better as labelled rows than as lines matched to a legend."""
    from matplotlib.lines import Line2D

    from experiments.readers.figures import bounds, figure, label, look, order, plain_log

    table = summary(frame)
    rank = {b: i for i, b in enumerate(order(table["backend"]))}
    rows = sorted(table.groupby(["backend", "variant"], sort=False).groups,
                  key=lambda key: (rank[key[0]], key[1] != "default", key[1]))
    fig, axes = figure(columns=2, width=6.0, height=1.4 + 0.3 * max(len(rows), 4))
    counts = sorted({int(n) for n in table["processes"]})
    shapes = {n: SHAPES.get(n, "^v<>ph"[i % 6]) for i, n in enumerate(counts)}
    panels = ((axes[0][0], "passes_per_s", 1.0, "One-step workflows per second at saturation",
               "workflows per second (log scale)"),
              (axes[0][1], "worker_cpu_per_pass", 1.0, "Worker CPU per pass",
               "CPU milliseconds per pass"))
    for ax, column, scale, title, unit in panels:
        label(ax, title, unit, "")
        if column not in table:
            ax.text(0.5, 0.5, "not measured in this run", ha="center", va="center",
                    transform=ax.transAxes, color="#666666")
        for y, (backend, variant) in enumerate(rows):
            seen = look(str(backend), variant)
            part = table[(table["backend"] == backend) & (table["variant"] == variant)]
            part = part.sort_values("processes")
            if column not in part or part[column].isna().all():
                continue
            values = part[column] * scale
            ax.plot(values, [y] * len(part), color=seen.colour, linewidth=0.8, alpha=0.5,
                    linestyle=seen.dashes)
            for n, value in zip(part["processes"], values, strict=True):
                ax.plot(value, y, marker=shapes[int(n)], color=seen.colour, linestyle="none",
                        markerfacecolor="white" if seen.hollow else seen.colour, markersize=6)
            interval = bounds(part, column)
            if interval is not None:  # the interval, where the summary has one
                ax.errorbar(values, [y] * len(part), fmt="none", ecolor=seen.colour,
                            xerr=[values - interval[0] * scale, interval[1] * scale - values],
                            capsize=2, linewidth=0.8)
            elif column == "passes_per_s" and "runs" in part and (part["runs"] > 1).any():
                ax.errorbar(values, [y] * len(part), fmt="none", ecolor=seen.colour,
                            xerr=[values - part["min"], part["max"] - values], capsize=2,
                            linewidth=0.8)
        names = [look(str(b), v).name for b, v in rows]
        ax.set_yticks(range(len(rows)), names)
        for tick, (backend, _) in zip(ax.get_yticklabels(), rows, strict=True):
            tick.set_color(look(str(backend)).colour)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.grid(axis="y", visible=False)
    axes[0][0].set_xscale("log")
    plain_log(axes[0][0], "x")
    axes[0][1].set_xlim(left=0)
    repeats = "; whiskers min to max over repeats" if (
        "runs" in table and (table["runs"] > 1).any()) else ""
    handles = [Line2D([], [], marker=shapes[n], color="#444444", linestyle="none",
                      label=f"{n} worker process{'es' if n > 1 else ''}") for n in counts]
    if any(look(str(b), v).hollow for b, v in rows):
        handles.append(Line2D([], [], marker="o", color="#444444", markerfacecolor="white",
                              linestyle="none", label="hollow: a rival's tuned setting"))
    if repeats:
        handles.append(Line2D([], [], marker="|", color="#444444", linestyle="-",
                              label=repeats.removeprefix("; ")))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles))
    return fig
