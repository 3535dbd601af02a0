"""`scale-out` read back: per backend, masters and shards, what the nodes spend per pass and
the busiest node's share (`summary`), each node's load by rank (`nodes`), the projected
ceiling with one node per machine and its interval (`summary`'s `ceiling`, how it is made is
said there), the check of that projection this machine can make (`check`), and the figure
(`draw`).
"""

from __future__ import annotations

import math
from typing import Any

KEYS = ["backend", "masters", "shards"]
RUN = [*KEYS, "processes", "repeat"]
#: What the projection assumes, said wherever it is drawn or quoted.
ASSUMES = ("one master per machine, each with a core to itself; a node's CPU per pass as "
           "measured here (on a shared 2-core machine, over loopback); enough worker "
           "machines that workers never bound the rate; shards placed by the hash of their "
           "tag, as measured, not evenly by hand")


def runs(frame: Any) -> Any:
    """One row a run (a configuration's repeat): its rate, its workers' CPU per pass, the
    nodes' CPU per pass summed, the busiest node's and its share, and its ceiling
    (`1000 / busiest_cpu_per_pass`, passes a second)."""
    wanted = ["passes_per_s", "worker_cpu_per_pass", "nodes_cpu_per_pass",
              "busiest_cpu_per_pass", "busiest_share", "busiest_commands_share"]
    rows = frame[frame["metric"].isin(wanted)]
    table = rows.pivot_table(index=RUN, columns="metric", values="value", aggfunc="first",
                             sort=False).reset_index()
    table["ceiling"] = 1000.0 / table["busiest_cpu_per_pass"]
    # The busiest node's utilisation while it ran: how far from its ceiling this machine
    # kept it (its rate times its CPU per pass).
    table["busy"] = table["passes_per_s"] * table["busiest_cpu_per_pass"] / 1000.0
    return table


def summary(frame: Any) -> Any:
    """Per backend, masters and shards: the medians over runs of each measure; the measured
    rate at each count of worker processes (`passes_per_s@<n>`); the projected ceiling with
    its interval (`ceiling`, `ceiling_lo`, `ceiling_hi`); `even`, the single node's ceiling
    times `masters` (what shards spread evenly would give, with that node's interval scaled
    the same way); and whether the store took `shards` (`shards_option`).

    The projection: a Redis node runs its commands on one thread, so a node with a machine of
    its own saturates when it spends one CPU second a second. If the busiest node spends `b`
    CPU seconds a pass, the cluster carries at most `1 / b` passes a second, however many
    nodes it has. With `C` the nodes' CPU per pass summed and `s` the busiest node's share,
    `b = s * C`: one node (`s = 1`) gives `X = 1 / C`; shards spread evenly over `N` nodes
    (`s = 1 / N`, `C` unchanged) give `N * X`; a queue on one slot keeps its share on one
    node, so its ceiling stays near `X`, raised only by the work that leaves that node anyway.
    Each run's `1 / b` is one sample; the interval is a bootstrap over the runs of a
    configuration (every worker-process count and repeat: a node's cost per pass does not
    depend on how many processes asked).
    """
    import pandas

    from experiments.readers.uncertainty import quantile

    per_run = runs(frame)
    out = []
    for key, part in per_run.groupby(KEYS, sort=True):
        entry: dict[str, Any] = dict(zip(KEYS, key, strict=True))
        entry["runs"] = len(part)
        for column in ("worker_cpu_per_pass", "nodes_cpu_per_pass", "busiest_cpu_per_pass",
                       "busiest_share", "busiest_commands_share"):
            entry[column] = float(part[column].median())
        found = quantile(part["ceiling"].to_numpy(), 0.5)
        entry |= {"ceiling": found.estimate, "ceiling_lo": found.lo, "ceiling_hi": found.hi}
        for processes, rates in part.groupby("processes", sort=True):
            entry[f"passes_per_s@{int(processes)}"] = float(rates["passes_per_s"].median())
        top = part[part["processes"] == part["processes"].max()]
        entry["busy"] = float(top["busy"].median())
        out.append(entry)
    table = pandas.DataFrame(out)
    if not len(table):
        return table
    for _, part in table.groupby("backend", sort=False):
        single = part[(part["masters"] == 1) & (part["shards"] == part["shards"].min())]
        for column in ("ceiling", "ceiling_lo", "ceiling_hi"):
            one = float(single[column].iloc[0]) if len(single) else math.nan
            table.loc[part.index, column.replace("ceiling", "even")] = part["masters"] * one
    option = frame.groupby("backend")["shards_option"].first() if "shards_option" in frame \
        else None
    if option is not None:
        table["shards_option"] = table["backend"].map(option).astype(str) == "True"
    return table


def nodes(frame: Any) -> Any:
    """Per backend, masters, shards and node rank (1: the busiest in its run), each node's
    median CPU (ms) and commands per pass over the runs."""
    import pandas

    cpu = frame[frame["metric"] == "node_cpu_per_pass"]
    commands = frame[frame["metric"] == "node_commands_per_pass"]
    both = cpu.merge(commands[[*RUN, "node", "value"]], on=[*RUN, "node"],
                     suffixes=("_cpu", "_commands"))
    both["rank"] = both.groupby(RUN)["value_cpu"].rank(ascending=False, method="first")
    out = both.groupby([*KEYS, "rank"], sort=True).agg(
        cpu_per_pass=("value_cpu", "median"), commands_per_pass=("value_commands", "median"),
        runs=("value_cpu", "count")).reset_index()
    out["rank"] = out["rank"].astype(int)
    return pandas.DataFrame(out)


def check(frame: Any) -> Any:
    """What this machine can check of the projection, per backend and shards measured at both
    one and two masters (two nodes on two cores): the nodes' CPU per pass summed, two over
    one (the projection assumes splitting adds no work: about 1), the busiest node's CPU per
    pass, two over one (the projection: the busiest share at two), and the rate at the most
    worker processes, two over one (the projection's ceiling is not reached here, so it
    predicts about 1), each with its bootstrap interval over the runs."""
    import pandas

    from experiments.readers.uncertainty import ratio

    per_run = runs(frame)
    out = []
    for (backend, shards), part in per_run.groupby(["backend", "shards"], sort=True):
        one, two = part[part["masters"] == 1], part[part["masters"] == 2]
        if not len(one) or not len(two):
            continue
        top = int(min(one["processes"].max(), two["processes"].max()))
        entry: dict[str, Any] = {"backend": backend, "shards": shards, "processes": top,
                                 "share_at_two": float(two["busiest_share"].median())}
        for column, name in (("nodes_cpu_per_pass", "nodes_cpu"),
                             ("busiest_cpu_per_pass", "busiest_cpu")):
            found = ratio(two[column].to_numpy(), one[column].to_numpy())
            entry |= {name: found.estimate, f"{name}_lo": found.lo, f"{name}_hi": found.hi}
        found = ratio(two[two["processes"] == top]["passes_per_s"].to_numpy(),
                      one[one["processes"] == top]["passes_per_s"].to_numpy())
        entry |= {"rate": found.estimate, "rate_lo": found.lo, "rate_hi": found.hi,
                  "busy_at_one": float(one[one["processes"] == top]["busy"].median())}
        out.append(entry)
    return pandas.DataFrame(out)


def draw(frame: Any) -> Any:
    """Left: the projected ceiling against masters (one per machine), a line per backend and
    shards with its interval, beside the even split's `N * X` and the rates measured here.
    Right: the busiest node's share of the nodes' CPU against masters, beside `1 / N`."""
    from matplotlib.lines import Line2D

    from experiments.readers.figures import figure, label, look, measured_ticks, nothing

    table = summary(frame)
    fig, axes = figure(columns=2, width=5.6, height=4.2)
    left, right = axes[0][0], axes[0][1]
    label(left, "Projected ceiling, one master per machine", "masters (machines)",
          "passes a second the busiest node allows")
    label(right, "The busiest node's share of the nodes' CPU", "masters", "share")
    if not len(table):
        nothing(left, "no rows")
        nothing(right, "no rows")
        return fig
    every = sorted({int(m) for m in table["masters"]})
    shard_counts = sorted({int(s) for s in table["shards"]})
    widths = {s: 0.8 + 1.6 * i / max(1, len(shard_counts) - 1)
              for i, s in enumerate(shard_counts)}
    for backend, part in table.groupby("backend", sort=False):
        seen = look(str(backend))
        for shards, line in part.groupby("shards", sort=True):
            line = line.sort_values("masters")
            width = widths[int(shards)]
            left.errorbar(line["masters"], line["ceiling"],
                          yerr=[line["ceiling"] - line["ceiling_lo"],
                                line["ceiling_hi"] - line["ceiling"]],
                          color=seen.colour, marker=seen.marker, linewidth=width, capsize=3,
                          label=f"{seen.name}, {int(shards)} shard{'s' if shards > 1 else ''}")
            right.plot(line["masters"], line["busiest_share"], color=seen.colour,
                       marker=seen.marker, linewidth=width)
            rates = [c for c in line.columns if c.startswith("passes_per_s@")]
            if rates:
                measured = line[rates].max(axis=1)
                left.plot(line["masters"], measured, color=seen.colour, marker="x",
                          linestyle="none", markersize=7)
        even = part.groupby("masters")["even"].first()
        left.plot(even.index, even.to_numpy(), color=seen.colour, linestyle=":", linewidth=1)
    right.plot(every, [1 / m for m in every], color="#666666", linestyle=":", linewidth=1)
    for ax in (left, right):
        measured_ticks(ax, every)
    left.set_ylim(bottom=0)
    right.set_ylim(0, 1.05)
    handles, _ = left.get_legend_handles_labels()
    handles += [Line2D([], [], color="#666666", linestyle=":",
                       label="N·X: one node's ceiling times N (left); 1/N (right)"),
                Line2D([], [], color="#666666", marker="x", linestyle="none",
                       label="measured here, 2 cores shared by every node and worker")]
    fig.legend(handles=handles, loc="outside lower center", ncol=2)
    fig.suptitle(f"Assumes {ASSUMES}", fontsize=7, wrap=True)
    return fig


def views(frame: Any, summary_: Any) -> list[Any]:
    """The tables `report` prints and the notebook shows: the projection (`ceiling`), the
    rates measured here (`rates`), each node by rank (`nodes`) and the check two masters on
    two cores allow (`check`)."""
    from experiments.readers.tables import SAME, TIMES, View, agreed, number, span
    from experiments.readers.uncertainty import LEVEL, Interval, distinguishable

    level = f"{LEVEL:.0%}"

    def told(estimate: float, lo: float, hi: float) -> str:
        """"n (lo-hi)", or n alone where every run gave the same to the digits shown."""
        inner = "" if agreed(estimate, lo, hi) else span(lo, hi)
        return f"{number(estimate)} ({inner})" if inner else number(estimate)

    def framed(rows: list[dict[str, Any]], index: list[str]) -> Any:
        import pandas

        table = pandas.DataFrame(rows)
        return table.set_index(index) if len(table) else table

    keys = ["backend", "masters", "shards"]
    rows = [{**{k: r[k] for k in keys}, "runs": number(r["runs"]),
             "nodes' CPU ms a pass": number(r["nodes_cpu_per_pass"]),
             "busiest's CPU ms": number(r["busiest_cpu_per_pass"]),
             "busiest's share": number(r["busiest_share"]),
             f"ceiling a second, {level}": told(r["ceiling"], r["ceiling_lo"], r["ceiling_hi"]),
             "N·X": number(r["even"])} for _, r in summary_.iterrows()]
    refused = "shards_option" in summary_ and not bool(summary_["shards_option"].all())
    found = [View("ceiling", "The busiest master's cost per pass and the ceiling it projects, "
                  "one master per machine", framed(rows, keys),
                  (f"ceiling = 1000 / the busiest master's CPU ms a pass; its {level} interval "
                   "a bootstrap over the configuration's runs (each count of worker processes "
                   "and repeat); N·X: one master's ceiling times the masters, what shards "
                   "spread evenly at no extra cost would give", f"assumes {ASSUMES}",
                   *(["this store has no `shards` option: only the single-slot layout "
                      "(shards=1) was measured"] if refused else [])))]
    counts = sorted(int(c.split("@")[1]) for c in summary_.columns
                    if c.startswith("passes_per_s@"))
    rows = [{**{k: r[k] for k in keys},
             **{f"{TIMES}{n}": number(r.get(f"passes_per_s@{n}")) for n in counts},
             "worker CPU ms a pass": number(r["worker_cpu_per_pass"]),
             "busiest busy": f"{r['busy']:.0%}"} for _, r in summary_.iterrows()]
    found.append(View("rates", "Passes a second measured here, by worker processes",
                      framed(rows, keys),
                      ("every master and worker shares this machine's two cores, so these "
                       "rates are bound by the workers' CPU, not by a master; busiest busy: "
                       "the busiest master's CPU over the run's span at the most processes",)))
    ranked = nodes(frame)
    rows = [{**{k: r[k] for k in keys}, "node (1: busiest)": int(r["rank"]),
             "CPU ms a pass": number(r["cpu_per_pass"]),
             "commands a pass": number(r["commands_per_pass"])}
            for _, r in ranked.iterrows() if r["masters"] > 1]
    found.append(View("nodes", "Each master's load, ranked within each run",
                      framed(rows, [*keys, "node (1: busiest)"]),
                      ("commands: `INFO commandstats` calls, a script's inner commands "
                       "included; CPU: `INFO cpu`, user + system; medians over the runs",)))
    checked = check(frame)
    rows = []
    for _, r in checked.iterrows():
        cells = {}
        for name, label in (("nodes_cpu", "nodes' CPU a pass, 2 / 1"),
                            ("busiest_cpu", "busiest's CPU a pass, 2 / 1"),
                            ("rate", f"rate at {TIMES}{int(r['processes'])}, 2 / 1")):
            interval = Interval(r[name], r[f"{name}_lo"], r[f"{name}_hi"], 1)
            shown = told(r[name], r[f"{name}_lo"], r[f"{name}_hi"])
            cells[label] = shown if distinguishable(interval) else f"{shown} {SAME}"
        rows.append({"backend": r["backend"], "shards": r["shards"], **cells,
                     "share at 2": number(r["share_at_two"]),
                     "busiest busy at 1": f"{r['busy_at_one']:.0%}"})
    if rows:
        found.append(View("check", "What two masters on two cores check: two masters over one",
                          framed(rows, ["backend", "shards"]),
                          (f"{level} intervals: a bootstrap over both sides' runs; {SAME}: the "
                           "interval holds 1", "the projection predicts: nodes' CPU 1 (a "
                           "split adds no work), busiest's CPU the share at 2, and a rate of "
                           "1 here, where the workers, not a master, are the bound")))
    return found
