"""`contention` read back: per arm, worker processes and phase, the rate and what one operation
cost the server (statements, WAL bytes, transactions that wrote, CPU) and what its backends
waited on (`summary`); the statements of one configuration (`statements`); what the backends
waited on, by wait (`waits`); and the figure (`draw`): the rates against processes, arm by
arm, and the waits behind them."""

from __future__ import annotations

from typing import Any

#: The columns of `summary`, each from the metric of that name (the waits: see `_waits`).
MEASURES = ("rate", "statements_per_op", "wal_bytes_per_op", "writes_per_op",
            "server_cpu_per_op", "client_cpu_per_op", "deadlocks")
KEYS = ["arm", "partitions", "processes", "phase"]
#: What `pg_locks` calls the NOTIFY commit lock (`experiments.harness.accounts.NOTIFY_LOCK`).
NOTIFY = "notify (commit order)"
#: The lock waits on rows: a row another transaction updates (`transactionid`), or a tuple.
ROW_LOCKS = ("transactionid", "tuple")


def summary(frame: Any) -> Any:
    """Per arm, partitions, processes and phase, the median over repeats of each measure; the
    mean number of backends seen waiting on the NOTIFY lock (`notify_waits`), on rows
    (`row_waits`), in all (`waiting`: every wait but running on a CPU), and active
    (`active`); the runs."""
    import pandas as pd

    rows = frame[frame["metric"].isin(MEASURES)]
    table = rows.pivot_table(index=KEYS, columns="metric", values="value", aggfunc="median",
                             sort=False).reset_index()
    waits = _waits(frame)
    if len(waits):
        table = table.merge(waits, on=KEYS, how="left")
    runs = frame[frame["metric"] == "rate"].groupby(KEYS, sort=False)["value"].count()
    table = table.merge(runs.rename("runs").reset_index(), on=KEYS, how="left")
    columns = [*KEYS, *[c for c in MEASURES if c in table], "notify_waits", "row_waits",
               "waiting", "active", "runs"]
    table = table.reindex(columns=[c for c in columns if c in table.columns])
    for column in ("notify_waits", "row_waits", "waiting", "active"):
        if column in table:
            table[column] = pd.to_numeric(table[column]).fillna(0.0)
    return table


def _waits(frame: Any) -> Any:
    """Per configuration and repeat, the sampled means, then their median over repeats."""
    import pandas as pd

    group = [*KEYS, "repeat"]
    locks = frame[frame["metric"] == "lock_waits"]
    seen = frame[frame["metric"] == "waiting"]
    parts = []
    if len(locks):
        parts.append(locks[locks["lock"] == NOTIFY].groupby(group)["value"].sum()
                     .rename("notify_waits"))
        parts.append(locks[locks["lock"].isin(ROW_LOCKS)].groupby(group)["value"].sum()
                     .rename("row_waits"))
    if len(seen):
        parts.append(seen[seen["wait"] != "CPU"].groupby(group)["value"].sum()
                     .rename("waiting"))
        parts.append(seen.groupby(group)["value"].sum().rename("active"))
    if not parts:
        return pd.DataFrame(columns=KEYS)
    joined = pd.concat(parts, axis=1).fillna(0.0).reset_index()
    return joined.groupby(KEYS, sort=False).median(numeric_only=True).reset_index().drop(
        columns="repeat")


def statements(frame: Any, arm: str = "notify", processes: int = 4, phase: str = "work"
               ) -> Any:
    """One configuration's statements, by what each writes: calls, WAL bytes and execution
    milliseconds per operation (the median over repeats), most called first."""
    rows = frame[(frame["arm"] == arm) & (frame["processes"] == processes)
                 & (frame["phase"] == phase)
                 & frame["metric"].isin(["statement_calls", "statement_wal_bytes",
                                         "statement_ms"])]
    table = rows.pivot_table(index="statement", columns="metric", values="value",
                             aggfunc="median").reset_index()
    if "statement_calls" not in table:  # a run without that arm (`--set arm=partitioned`)
        import pandas as pd

        return pd.DataFrame(columns=["statement", "statement_calls", "statement_ms",
                                     "statement_wal_bytes"])
    return table.sort_values("statement_calls", ascending=False, ignore_index=True)


def waits(frame: Any, phase: str = "work") -> Any:
    """Backends seen in each wait (a column each, `CPU`: running), per arm and processes: the
    mean over the samples, the median over repeats."""
    rows = frame[(frame["metric"] == "waiting") & (frame["phase"] == phase)]
    table = rows.pivot_table(index=["arm", "processes"], columns="wait", values="value",
                             aggfunc="median", fill_value=0.0, sort=False)
    order = table.sum().sort_values(ascending=False).index
    return table[order].reset_index()


#: Each arm's colour and label.
ARMS = {"notify": ("#1f77b4", "as it is (NOTIFY sent)"),
        "silent": ("#ff7f0e", "NOTIFY silenced"),
        "partitioned": ("#2ca02c", "queue hash-partitioned")}


def draw(frame: Any) -> Any:
    """Three panels: arrivals a second (the `arrive` phase) and passes a second (the `work`
    phase) against worker processes, a line an arm; and, at the most processes, the backends
    seen waiting, by what they waited on, a bar an arm."""
    from experiments.readers.figures import figure, label, measured_ticks

    table = summary(frame)
    fig, axes = figure(columns=3, width=4.4, height=3.6)
    counts = sorted({int(n) for n in table["processes"]})
    for ax, phase, title, unit in (
            (axes[0][0], "arrive", "Arrivals a second (64 writers)", "arrivals per second"),
            (axes[0][1], "work", "Passes a second", "passes per second")):
        label(ax, title, "worker processes" + (" (idle, listening)" if phase == "arrive"
                                               else ""), unit)
        for arm, (colour, name) in ARMS.items():
            part = table[(table["arm"] == arm) & (table["phase"] == phase)]
            if not len(part) or "rate" not in part:
                continue
            part = part.sort_values("processes")
            ax.plot(part["processes"], part["rate"], marker="o", color=colour, label=name)
        if counts:
            measured_ticks(ax, counts)
        ax.set_ylim(bottom=0)
    axes[0][0].legend(loc="lower right")
    ax = axes[0][2]
    most = max(counts) if counts else 0
    seen = waits(frame)
    seen = seen[seen["processes"] == most]
    kinds = [c for c in seen.columns if c not in ("arm", "processes")][:6]
    label(ax, f"What the backends wait on ({most} processes)", "",
          "backends seen, mean over samples")
    width = 0.8 / max(len(kinds), 1)
    arms = [a for a in ARMS if a in set(seen["arm"])]
    for i, kind in enumerate(kinds):
        values = [float(seen[seen["arm"] == a][kind].iloc[0]) for a in arms]
        ax.bar([x + i * width for x in range(len(arms))], values, width=width, label=kind)
    ax.set_xticks([x + width * (len(kinds) - 1) / 2 for x in range(len(arms))],
                  [ARMS[a][1] for a in arms], rotation=12, fontsize=8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return fig
