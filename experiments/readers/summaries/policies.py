"""`policies` read back: one row a configuration (`summary`: its timing's median and 99th
percentile with their intervals, and its counts), a table an arm (`views`), what each design
pays for each policy, a row a backend (`pays`), the common path set against the same folder's
`throughput` and `latency` rows (`common`), and the figure: a panel an arm, the two limits
sharing one (`draw`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

#: Each arm's timing (the metric its percentiles are of) and the columns that tell its
#: configurations apart.
TIMED = {"schedule": "firing_delay", "priority": "urgent_start", "limit": "", "rate": "",
         "common": "submit_to_first_pass"}
SETTING = {"schedule": ["processes"], "priority": ["ordering"],
           "limit": ["at_most", "processes"], "rate": ["at_most", "processes"],
           "common": ["processes"]}
#: The counts a configuration's rows carry, summed over repeats (a rate: its median).
COUNTS = ("firings", "duplicates", "missing", "never_started", "backlog_after_last_urgent",
          "max_holders", "most_in_window", "overshoot", "passes")
RATES = ("passes_per_s", "ceiling_per_s", "every", "hold", "per", "slack")
COLUMNS = ["backend", "variant", "arm", "processes", "ordering", "at_most", "n", "p50",
           "p50_lo", "p50_hi", "p99", "p99_lo", "p99_hi", *COUNTS, *RATES]


def _keys(frame: Any) -> list[str]:
    return [c for c in ("backend", "variant", "arm", "processes", "ordering", "at_most")
            if c in frame]


def summary(frame: Any) -> Any:
    """A row per backend and configuration (`arm` and its setting): `n` timings and their
    `p50`, `p99` in ms with bootstrap intervals (`_lo`, `_hi`), the counts (`COUNTS`, summed
    over repeats) and the rates (`RATES`, their median)."""
    import pandas

    from experiments.readers.uncertainty import quantiles

    if not len(frame):
        return pandas.DataFrame(columns=COLUMNS)
    keys = _keys(frame)
    # A setting an arm has not (an ordering in the limit arm) groups as blank, not as NaN.
    filled = frame.assign(**{k: frame[k].astype(object).where(frame[k].notna(), "")
                             for k in keys if k != "backend"})
    rows = []
    for key, group in filled.groupby(keys, sort=False, dropna=False):
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        timing = TIMED.get(str(row["arm"]), "")
        values = group[group["metric"] == timing]["value"].to_numpy(dtype=float) \
            if timing else []
        row["n"] = len(values)
        if len(values):
            p50, p99 = quantiles(values, [0.5, 0.99])
            row.update(p50=p50.estimate, p50_lo=p50.lo, p50_hi=p50.hi, p99=p99.estimate,
                       p99_lo=p99.lo, p99_hi=p99.hi)
        for name in COUNTS:
            found = group[group["metric"] == name]["value"]
            row[name] = float(found.sum()) if len(found) else math.nan
        for name in RATES:
            found = group[group["metric"] == name]["value"]
            row[name] = float(found.median()) if len(found) else math.nan
        rows.append(row)
    table = pandas.DataFrame(rows)
    for column in COLUMNS:
        if column not in table:
            table[column] = math.nan
    for column in ("processes", "at_most"):
        table[column] = pandas.to_numeric(table[column], errors="coerce")
    return table[COLUMNS]


def limits(table: Any) -> Any:
    """The limit arm's rows with `cost`: the rate at the limit over the rate with none, at
    the same backend and processes (below 1: what the limit costs beyond its own ceiling),
    and `of_ceiling`: the rate over the limit's ceiling (`at_most` holds of `hold` ms)."""
    rows = table[table["arm"] == "limit"].copy()
    free = rows[rows["at_most"] == 0].set_index(["backend", "processes"])["passes_per_s"]
    rows["cost"] = [r["passes_per_s"] / free.get((r["backend"], r["processes"]), math.nan)
                    if r["at_most"] else math.nan for _, r in rows.iterrows()]
    rows["of_ceiling"] = rows["passes_per_s"] / rows["ceiling_per_s"]
    return rows


def rates(table: Any) -> Any:
    """The rate arm's rows with `of_ceiling`: the rate achieved after the first window's burst
    over the rate allowed (`ceiling_per_s`, `at_most` a `per`)."""
    rows = table[table["arm"] == "rate"].copy()
    rows["of_ceiling"] = rows["passes_per_s"] / rows["ceiling_per_s"]
    return rows


#: Where a one-sitting A/B of the common path is kept, under a results folder: runs of
#: `throughput` and `latency` at the revision before the policies (`seam*/`) and after
#: (`main*/`), interleaved (`results/ab/common-path-quiet/README.md` says how).
AB = Path("ab") / "common-path-quiet"
#: The A/B's folder prefix for each side.
SIDES = {"before": "seam", "after": "main"}


def common(frame: Any, where: Path | None) -> Any:
    """The common path (no priority, no limit, no schedule) after the policies over before: a
    row per backend with both sides' passes a second from one process and median start at
    20/s, and their ratios with 95% intervals (`rate_ratio`, `p50_ratio`, `_lo`, `_hi`).

    From the one-sitting A/B under `where / AB` where there is one (`attrs["source"]` says
    "one sitting"); else this run's `common` rows over the `throughput` and `latency` rows
    of the same folder, another sitting whose machine may have run at another speed
    (`attrs["calibrations"]`: each run's CPU calibration, seconds, lower is faster)."""
    import pandas

    from experiments.results import load, metadata

    if where is not None and (where / AB).is_dir():
        sides = {side: _sides(where / AB, prefix) for side, prefix in SIDES.items()}
        table = _against(sides["after"], sides["before"])
        table.attrs.update(source="one sitting", runs={k: len(v) for k, v in sides.items()})
        return table
    mine = frame[frame["arm"] == "common"] if "arm" in frame else frame.iloc[0:0]
    after = [(mine, mine)]
    before: list[tuple[Any, Any]] = []
    calibrations: dict[str, Any] = {}
    if where is not None and (where / "policies.json").exists():
        calibrations["policies"] = metadata("policies", where).get(
            "cpu_calibration_seconds", {}).get("at_start")
    found = {}
    for name in ("throughput", "latency"):
        if where is not None and (where / f"{name}.csv").exists():
            found[name] = load(name, where)
            calibrations[name] = metadata(name, where).get("cpu_calibration_seconds",
                                                           {}).get("at_start")
    if found:
        empty = pandas.DataFrame(columns=["backend", "metric", "value"])
        before = [(found.get("throughput", empty), found.get("latency", empty))]
    table = _against(after, before)
    table.attrs.update(source="another sitting", calibrations=calibrations)
    return table


def told(table: Any, name: str) -> str:
    """`common`'s ratio `name` (`rate` or `p50`) for each backend as prose: "redis-stream
    0.98 (0.91 to 1.05, with a dash)", the interval left out where there is none."""
    from experiments.readers.tables import _with

    column = f"{name}_ratio"
    if column not in table:
        return ""
    return ", ".join(f"{r['backend']} {_with(r[column], r[column + '_lo'], r[column + '_hi'])}"
                     for _, r in table.iterrows() if r[column] == r[column])


def _sides(folder: Path, side: str) -> list[tuple[Any, Any]]:
    """Each run of one side of the A/B: its (throughput rows, latency rows)."""
    from experiments.results import load

    return [(load("throughput", run), load("latency", run))
            for run in sorted(folder.glob(f"{side}*")) if (run / "throughput.csv").exists()
            and (run / "latency.csv").exists()]


def _one(rows: Any, metric: str) -> Any:
    """The common path's values of `metric` among `rows`: one process, the default variant,
    20 submissions a second and no poll, where the rows have those columns."""
    chosen = rows[rows["metric"] == metric]
    for column, value in (("processes", 1), ("rate", 20.0)):
        if column in chosen:
            chosen = chosen[chosen[column] == value]
    if "variant" in chosen:  # blank: an experiment with no variants (policies)
        chosen = chosen[chosen["variant"].isna() | (chosen["variant"] == "default")]
    if "poll_ms" in chosen:
        chosen = chosen[chosen["poll_ms"].isna()]
    return chosen


def _against(after: list[tuple[Any, Any]], before: list[tuple[Any, Any]]) -> Any:
    """A row per backend of `after`: rate and median start on each side, pooled over its
    runs, and after over before with a bootstrap interval."""
    import pandas

    from experiments.readers.uncertainty import ratio

    def pooled(runs: list[tuple[Any, Any]], backend: str, which: int, metric: str) -> list[float]:
        values: list[float] = []
        for run in runs:
            rows = _one(run[which], metric)
            values += rows[rows["backend"] == backend]["value"].astype(float).tolist()
        return values

    backends = list(dict.fromkeys(b for run in after for b in _one(run[0], "passes_per_s")
                                  ["backend"]))
    rows = []
    for backend in backends:
        row: dict[str, Any] = {"backend": backend}
        for name, which, metric in (("rate", 0, "passes_per_s"),
                                    ("p50", 1, "submit_to_first_pass")):
            mine, theirs = (pooled(after, backend, which, metric),
                            pooled(before, backend, which, metric))
            row[f"{name}_after"], row[f"{name}_before"] = _median(mine), _median(theirs)
            if mine and theirs:
                found = ratio(mine, theirs)
                row.update({f"{name}_ratio": found.estimate, f"{name}_ratio_lo": found.lo,
                            f"{name}_ratio_hi": found.hi})
        rows.append(row)
    return pandas.DataFrame(rows)


#: The features a skipped arm's reason may name, the first one named in it taken ("a rate
#: limit" before "limit"); a reason naming none is its own feature.
FEATURES = ("rate limit", "priority", "limit", "cron", "schedule")


def skipped(where: Path | None) -> dict[str, list[str]]:
    """The arms a run skipped because a store lacked the feature, by feature: the backends
    (`attrs["skipped"]` of the run, its metadata's `skipped`)."""
    from experiments.results import metadata

    if where is None or not (where / "policies.json").exists():
        return {}
    found: dict[str, list[str]] = {}
    for key, why in metadata("policies", where).get("skipped", {}).items():
        if " arm=" not in key:
            continue
        feature = next((f for f in FEATURES if f in why), why)
        backend = key.split(" arm=", 1)[0]
        if backend not in found.setdefault(feature, []):
            found[feature].append(backend)
    return found


def _median(values: Any) -> float:
    import numpy

    return float(numpy.median(values)) if len(values) else math.nan


def pays(frame: Any, where: Path | None = None) -> Any:
    """What each design pays for each policy, a row a backend, every cell from the rows:
    a schedule's median firing delay at the most worker processes and its duplicates over
    all; urgent work's median start behind the backlog with a priority and without; a limit's
    overshoot over all its configurations and its rate at a limit of 16 over none (most
    processes); a rate limit's overshoot over all and its rate over the one allowed (the
    largest rate, most processes); the common path's throughput and median start after over
    before (`common`). A cell is blank where the arm was not run (or was skipped) for that
    backend."""
    import pandas

    from experiments.readers.tables import _with, number

    table = summary(frame)
    limited = limits(table)
    before = common(frame, where) if where is not None else pandas.DataFrame()
    rows = []
    for backend in dict.fromkeys(table["backend"]):
        mine = table[table["backend"] == backend]
        row: dict[str, str] = {"backend": backend}
        fired = mine[mine["arm"] == "schedule"]
        if len(fired):
            top = fired[fired["processes"] == fired["processes"].max()].iloc[0]
            row["schedule: delay p50 ms"] = (f"{number(top['p50'])} "
                                             f"(x{int(top['processes'])})")
            row["duplicates"] = number(fired["duplicates"].sum())
            row["missed"] = number(fired["missing"].sum())
        ordered = mine[mine["arm"] == "priority"].set_index("ordering")
        if len(ordered):
            medians = [number(ordered.at[o, "p50"]) if o in ordered.index else "—"
                       for o in ("priority", "none")]
            row["urgent p50 ms: priority / none"] = " / ".join(medians)
        mine_limits = limited[limited["backend"] == backend]
        held = mine_limits[mine_limits["at_most"] > 0]
        if len(held):
            row["limit overshoot"] = number(held["overshoot"].sum())
            at16 = held[held["at_most"] == held["at_most"].max()]
            at16 = at16[at16["processes"] == at16["processes"].max()]
            if len(at16):
                row["rate at 16 / none"] = number(at16["cost"].iloc[0])
        rated = rates(mine)
        if len(rated):
            row["rate limit overshoot"] = number(rated["overshoot"].sum())
            top_rate = rated[rated["at_most"] == rated["at_most"].max()]
            top_rate = top_rate[top_rate["processes"] == top_rate["processes"].max()]
            row["of the rate allowed"] = number(top_rate["of_ceiling"].iloc[0])
        if len(before) and backend in set(before["backend"]):
            r = before[before["backend"] == backend].iloc[0]
            if "rate_ratio" in r and r["rate_ratio"] == r["rate_ratio"]:
                row["common wf/s after/before"] = _with(r["rate_ratio"], r["rate_ratio_lo"],
                                                        r["rate_ratio_hi"])
            if "p50_ratio" in r and r["p50_ratio"] == r["p50_ratio"]:
                row["common p50 after/before"] = _with(r["p50_ratio"], r["p50_ratio_lo"],
                                                       r["p50_ratio_hi"])
        rows.append(row)
    from experiments.readers.figures import in_order

    found = in_order(pandas.DataFrame(rows))
    return found.set_index("backend").fillna("") if len(found) else found


def views(frame: Any, summary_: Any) -> list[Any]:
    """The tables `report` prints and the notebook shows, one an arm: `schedule`,
    `priority`, `limit`, `rate`, `common`."""
    import pandas

    from experiments.readers.tables import View, _with, number
    from experiments.readers.uncertainty import LEVEL

    level = f"{LEVEL:.0%}"

    def framed(rows: list[dict[str, Any]], index: list[str]) -> Any:
        table = pandas.DataFrame(rows)
        return table.set_index(index) if len(table) else table

    def arm(name: str) -> Any:
        return summary_[summary_["arm"] == name]

    fired = [{"backend": r["backend"], "processes": int(r["processes"]),
              "firings": number(r["firings"]), "duplicates": number(r["duplicates"]),
              "missing": number(r["missing"]),
              f"delay p50 ms ({level})": _with(r["p50"], r["p50_lo"], r["p50_hi"]),
              f"delay p99 ms ({level})": _with(r["p99"], r["p99_lo"], r["p99_hi"])}
             for _, r in arm("schedule").iterrows()]
    urgent = [{"backend": r["backend"], "ordering": r["ordering"], "n": number(r["n"]),
               f"start p50 ms ({level})": _with(r["p50"], r["p50_lo"], r["p50_hi"]),
               f"start p99 ms ({level})": _with(r["p99"], r["p99_lo"], r["p99_hi"]),
               "never started": number(r["never_started"]),
               "backlog after the last": number(r["backlog_after_last_urgent"])}
              for _, r in arm("priority").iterrows()]
    held = [{"backend": r["backend"], "limit": int(r["at_most"]) or "none",
             "processes": int(r["processes"]), "passes": number(r["passes"]),
             "most at once": number(r["max_holders"]), "overshoot": number(r["overshoot"]),
             "wf/s": number(r["passes_per_s"]), "ceiling wf/s": number(r["ceiling_per_s"]),
             "of ceiling": number(r["of_ceiling"]), "over none": number(r["cost"])}
            for _, r in limits(summary_).iterrows()]
    rated = [{"backend": r["backend"], "allowed /s": number(r["ceiling_per_s"]),
              "processes": int(r["processes"]), "passes": number(r["passes"]),
              "most in a window": number(r["most_in_window"]),
              "overshoot": number(r["overshoot"]), "wf/s": number(r["passes_per_s"]),
              "of allowed": number(r["of_ceiling"]),
              "never started": number(r["never_started"])}
             for _, r in rates(summary_).iterrows()]
    plain = [{"backend": r["backend"], "wf/s, one process": number(r["passes_per_s"]),
              f"start p50 ms at 20/s ({level})": _with(r["p50"], r["p50_lo"], r["p50_hi"])}
             for _, r in arm("common").iterrows()]
    return [
        View("schedule", "A schedule every 100 ms, fired by 1 to 4 worker processes",
             framed(fired, ["backend", "processes"]),
             ("delay: the firing's time to its workflow's first pass start; duplicates "
              "(a firing's step run twice) and missing (a firing never run) must be 0",)),
        View("priority", "Urgent work submitted behind a backlog, with a priority and without",
             framed(urgent, ["backend", "ordering"]),
             ("start: submit to first pass; backlog after the last: backlog workflows that "
              "started after the last urgent one did",)),
        View("limit", "A concurrency limit: the most holders seen at once, and its rate",
             framed(held, ["backend", "limit", "processes"]),
             ("most at once: counted from inside the bodies (each hold's span on one clock); "
              "overshoot (above the limit) must be 0; ceiling: limit / hold; over none: the "
              "rate over the same processes' with no limit",)),
        View("rate", "A rate limit: the most starts seen in a window, and the rate achieved",
             framed(rated, ["backend", "allowed /s", "processes"]),
             ("most in a window: the starts counted from inside the bodies in any window of "
              "the limit's period less its slack (`slack`, ms: a body starts a little after "
              "its take); overshoot (above the limit) must be 0; wf/s: after the first "
              "window's burst; of allowed: over at_most / period; never started: still "
              "queued after four times the windows the work should take",)),
        View("common", "The common path (no priority, no limit, no schedule)",
             framed(plain, ["backend"]),
             ("set against the folder's throughput and latency rows by `common`",)),
    ]


def draw(frame: Any) -> Any:
    """Four panels: the schedule's median firing delay by processes; urgent work's median
    start with a priority and without (log); the limit's rate over its ceiling by limit, at
    the most processes, its overshoot written beside, and a rate limit's over the rate
    allowed (dotted, its own at_most); the common path's median start."""
    from experiments.readers.figures import (
        figure,
        label,
        look,
        measured_ticks,
        nothing,
        order,
        plain_log,
    )

    table = summary(frame)
    fig, axes = figure(columns=2, rows=2, width=5.2, height=3.4)
    (a, b), (c, d) = axes
    fired = table[table["arm"] == "schedule"]
    for backend in order(fired["backend"]):
        rows = fired[fired["backend"] == backend].sort_values("processes")
        seen = look(backend)
        a.errorbar(rows["processes"], rows["p50"], yerr=[rows["p50"] - rows["p50_lo"],
                   rows["p50_hi"] - rows["p50"]], capsize=2, **seen.line())
    label(a, "A schedule's firing delay", "worker processes", "ms (median, 95% interval)")
    if not len(fired):
        nothing(a, "no schedule arm in this run")
    else:
        a.set_yscale("log")
        plain_log(a, "y")
        a.set_xticks(sorted(set(fired["processes"].astype(int))))
        # Below the axes: the rivals' delays cross every height of the panel, so no
        # corner inside it is free of lines.
        a.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    urgent = table[table["arm"] == "priority"]
    names = order(urgent["backend"])
    for i, backend in enumerate(names):
        for j, ordering in enumerate(("priority", "none")):
            found = urgent[(urgent["backend"] == backend) & (urgent["ordering"] == ordering)]
            if len(found):
                b.barh(i - 0.2 + 0.4 * j, found["p50"].iloc[0], height=0.38,
                       color=look(backend).colour, alpha=1.0 if j == 0 else 0.4)
    b.set_yticks(range(len(names)), names, fontsize=8)
    b.set_ylim(len(names) - 0.5, -0.5)
    b.set_xscale("log")
    label(b, "Urgent work behind a backlog", "median start, ms (dark: priority, pale: none)",
          "")
    if not names:
        nothing(b, "no priority arm in this run")
    else:
        plain_log(b, "x")
    held = limits(table)
    held = held[held["at_most"] > 0]
    for backend in order(held["backend"]):
        rows = held[held["backend"] == backend]
        rows = rows[rows["processes"] == rows["processes"].max()].sort_values("at_most")
        c.plot(rows["at_most"], rows["of_ceiling"], **look(backend).line())
        for _, r in rows.iterrows():
            if r["overshoot"]:
                c.annotate(f"+{r['overshoot']:.0f}", (r["at_most"], r["of_ceiling"]),
                           color="red", fontsize=7)
    rated = rates(table)
    for backend in order(rated["backend"]):
        rows = rated[rated["backend"] == backend]
        rows = rows[rows["processes"] == rows["processes"].max()].sort_values("at_most")
        dotted = {**look(backend).line(), "linestyle": ":", "markerfacecolor": "white",
                  "label": None}
        c.plot(rows["at_most"], rows["of_ceiling"], **dotted)
        for _, r in rows.iterrows():
            if r["overshoot"]:
                c.annotate(f"+{r['overshoot']:.0f}", (r["at_most"], r["of_ceiling"]),
                           color="red", fontsize=7)
    label(c, "A limit's rate over its ceiling", "limit (most processes; dotted: a rate "
          "limit, a second)", "rate / ceiling")
    if not len(held) and not len(rated):
        nothing(c, "no limit measured in this run")
    else:
        c.set_xscale("log")
        c.set_yscale("log")
        measured_ticks(c, sorted(set(held["at_most"].astype(float))
                                 | set(rated["at_most"].astype(float))))
        plain_log(c, "y")
        c.legend(fontsize=7)
    plain = table[table["arm"] == "common"]
    names = order(plain["backend"])
    for i, backend in enumerate(names):
        r = plain[plain["backend"] == backend].iloc[0]
        d.barh(i, r["p50"], color=look(backend).colour)
    label(d, "The common path", "median start at 20/s, ms", "")
    if not names:
        nothing(d, "no common arm in this run")
    else:
        d.set_yticks(range(len(names)), names, fontsize=8)
        d.set_ylim(len(names) - 0.5, -0.5)
        d.set_xscale("log")
        plain_log(d, "x")
    return fig
