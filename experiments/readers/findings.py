"""`python -m experiments findings [NAME ...] [--results DIR]`: the paragraphs of
`docs/findings.md`, their numbers computed from a run's rows, each with its interval or said to
have none, and "not distinguishable at this sample size" wherever a comparison's interval
allows "the same".

The page quotes the reference run; after a rerun this prints the paragraphs again from its
rows, as Markdown, to paste over the old ones rather than edit numbers by hand. It writes the
measured part only: what a paragraph adds by hand (an A/B since, why a number moved) stays the
page's. A section whose experiments are not in the folder says so instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from experiments.readers.reading import frame, ms, table, times, versus
from experiments.readers.tables import (
    DASH,
    RIVALS,
    SAME,
    TIMES,
    agreed,
    number,
    window_lengths,
)
from experiments.readers.uncertainty import LEVEL, Interval, distinguishable, ratio
from experiments.results import RESULTS

__all__ = ["SECTIONS", "findings"]

#: The findings' rivals beside the scheduler of ours each would replace, for the headline ratios.
HEADLINE = (("redis-stream", "saq"), ("postgres", "pgqueuer"))


def _span(found: Interval, scale: float = 1.0) -> str:
    """ " (lo-hi)" (an en dash), or nothing where there is no interval."""
    if found.lo != found.lo:
        return ""
    return f" ({number(found.lo * scale)}{DASH}{number(found.hi * scale)})"


def _told(found: Interval, scale: float = 1.0) -> str:
    """A figure and its interval as prose, "n (lo-hi)"; the figure alone where the interval
    reads as it at the digits shown (every run or window counted the same)."""
    shown = number(found.estimate * scale)
    if agreed(found.estimate * scale, found.lo * scale, found.hi * scale):
        return shown
    return f"{shown}{_span(found, scale)}"


def _cell(found: Interval) -> str:
    """A ratio for a table: estimate (interval), marked `SAME` where it holds 1."""
    if found.estimate != found.estimate:
        return ""
    shown = f"{number(found.estimate)}{_span(found)}"
    return shown if distinguishable(found) else f"{shown} {SAME}"


def _apart(a: Interval, b: Interval) -> str:
    """How two figures with intervals compare, in words."""
    return ("not distinguishable at this sample size" if a.overlaps(b) else
            "told apart at this sample size")


def _ratios(where: Path) -> str:
    from experiments.readers.summaries.throughput import rates, sized

    rows = sized(frame("throughput", where))
    counts = sorted(int(p) for p in rows["processes"].dropna().unique())
    sizes = sorted(float(w) for w in rows["workflows"].dropna().unique()) or [math.nan]
    head = ["ours / theirs", *(["workflows"] if len(sizes) > 1 else []),
            "latency p50 at 20/s", *(f"throughput {TIMES}{n}" for n in counts)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mine, theirs in HEADLINE:
        latency = _cell(versus("latency", mine, theirs, where))
        for size in sizes:
            at = None if size != size else size
            cells = [_cell(ratio(rates(rows, mine, n, workflows=at),
                                 rates(rows, theirs, n, workflows=at))) for n in counts]
            lines.append("| " + " | ".join([f"{mine} / {theirs}",
                                            *([number(size)] if len(sizes) > 1 else []),
                                            latency, *cells]) + " |")
    return (f"**Headline ratios**, ours over theirs at their defaults, with {LEVEL:.0%} intervals "
            "(latency: a bootstrap over the submissions, and the repeats where there are; "
            f"throughput: over the repeats); {SAME}: the interval holds 1, so the two are not "
            "distinguishable at this sample size.\n\n" + "\n".join(lines))


def _idle(where: Path) -> str:
    t = table("idle", where)
    t = t[t["variant"] == "default"].set_index("backend")
    windows = frame("idle", where)
    windows = windows[windows["metric"] == "window"]

    def at(backend: str, column: str = "worker_requests") -> Interval:
        if backend not in t.index or column not in t:
            return Interval(math.nan, math.nan, math.nan, 0)
        row = t.loc[backend]
        estimate, lo, hi = (float(row.get(f"{column}{end}", math.nan))
                            for end in ("", "_lo", "_hi"))
        return Interval(estimate, lo, hi, 1)

    # SQLite counts statements (no server), and is woken by its doorbell, not a poll.
    woken = [b for b in ("redis-stream", "redis-set", "postgres", "sqlite") if b in t.index]
    polled = [b for b in ("redis-set-polled", "postgres-polled") if b in t.index]
    requests = _listed([f"{_told(at(b))} {_per_second(b, i == 0)}on {b}"
                        for i, b in enumerate(woken)])
    cpu = _listed([_told(at(b, "worker_cpu"), 1000) for b in woken])
    poll = _listed([f"{_told(at(b))} on {b}" for b in polled])
    windows = windows[windows["backend"].isin(woken + polled)]  # the backends said here
    per = windows.groupby(["backend", "variant"]).size()
    most = int(per.max()) if len(per) else 0
    seconds = window_lengths(windows)
    sure = (f"Each is the median of {most} windows{seconds}, with its {LEVEL:.0%} "
            "interval over them" if most > 1 else
            f"Each is one window{seconds} with no repeats, so no interval "
            "(`--repeat` would give one)")
    stream, set_ = at("redis-stream"), at("redis-set")
    pair = ""
    if stream.estimate == stream.estimate and set_.estimate == set_.estimate:
        pair = (f"; the stream's {number(stream.estimate)} against the set's "
                f"{number(set_.estimate)} is "
                + (_apart(stream, set_) if stream.lo == stream.lo and set_.lo == set_.lo else
                   "a difference one window each cannot show"))
    return (f"**Idle cost** ([`idle.ipynb`](notebooks/idle.ipynb)). By its own count, an idle "
            f"worker sends {requests}, for {cpu} ms of worker CPU a second; a polled one pays "
            f"for its poll: {poll}. {sure}{pair}.")


def _per_second(backend: str, first: bool) -> str:
    """The unit after an idle rate: said with the first, and with SQLite's statements."""
    if backend == "sqlite":
        return "statements a second "
    return "requests a second " if first else ""


def _listed(items: Sequence[str]) -> str:
    """`a, b and c`."""
    items = [i for i in items if i]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}" if items \
        else "n/a"


def _growth(where: Path) -> str:
    t = table("growth", where)
    rows = frame("growth", where)

    def g(backend: str, trimming: object, column: str = "peak_entries") -> float:
        return at(backend, trimming, column).estimate

    def at(backend: str, trimming: object, column: str = "peak_entries") -> Interval:
        found = t[(t["backend"] == backend) & (t["trimming"].astype(str) == str(trimming))]
        if not len(found):
            return Interval(math.nan, math.nan, math.nan, 0)
        r = found.iloc[0]
        return Interval(float(r[column]), float(r.get(f"{column}_lo", math.nan)),
                        float(r.get(f"{column}_hi", math.nan)), int(r.get("repeats", 1)))

    def n(backend: str, trimming: object, column: str = "peak_entries") -> str:
        """The median over the runs, with its interval where there are several."""
        return _told(at(backend, trimming, column))

    wakeups = float(t["wakeups"].max())
    ends = (g("redis-stream", True, "final_entries"), g("redis-stream-8.2", True,
                                                        "final_entries"))
    ended = ("ends empty on both" if ends == (0.0, 0.0) else
             f"ends at {number(ends[0])} entries on 7 and {number(ends[1])} on 8.2")
    sql = max(g("postgres", ""), g("sqlite", ""))
    parts = [f"{number(wakeups)} wakeups leave {n('redis-stream', False, 'final_entries')}"
             f" entries in an untrimmed stream on Redis 7 and "
             f"{n('redis-stream-8.2', False, 'final_entries')} on 8.2. Trimmed, the stream "
             f"peaks at {n('redis-stream', True)} entries on Redis 7 and "
             f"{n('redis-stream-8.2', True)} on 8.2, and {ended}. The sorted set peaks "
             f"at {n('redis-set', '')} members and the SQL queues at {number(sql)} rows, "
             f"though Postgres' table keeps {n('postgres', '', 'final_kib')} KiB on disk "
             "until vacuum."]
    rivals = t[t["setting"].astype(bool)]
    if len(rivals):
        jobs = rows[rows["metric"] == "jobs"]["value"]
        kept = [f"{r.backend} {n(r.backend, False, 'final_entries')} entries, "
                f"{n(r.backend, False, 'final_kib')} KiB"
                for r in rivals[rivals["trimming"].astype(str) == "False"].itertuples()]
        cleaned = [f"{r.backend} {n(r.backend, True, 'final_entries')}, "
                   f"{n(r.backend, True, 'final_kib')} KiB"
                   for r in rivals[rivals["trimming"].astype(str) == "True"].itertuples()]
        parts.append(f"Each rival, given {number(jobs.max())} one-step jobs at the same rate, "
                     f"holds at its defaults once all have run: {'; '.join(kept)}."
                     + (f" With its own cleanup setting: {'; '.join(cleaned)}." if cleaned
                        else ""))
        counts = rows[rows["metric"].isin(["completed", "jobs"])]
        keys = ["backend", "trimming", *(["repeat"] if "repeat" in counts.columns else [])]
        done = counts.pivot_table(index=keys, columns="metric", values="value", aggfunc="sum")
        if {"completed", "jobs"} <= set(done.columns):
            extra = (done["completed"] - done["jobs"]).groupby(level=[0, 1], sort=False)
            for (backend, trimming), per_run in extra:
                per_run = per_run.dropna()
                if not len(per_run) or per_run.max() <= 0:
                    continue
                how = "with its cleanup" if str(trimming) == "True" else "at its defaults"
                shown = _listed([number(v) for v in per_run])
                parts.append(f"{backend} ran some of its jobs twice {how}: {shown} "
                             + ("in its one run." if len(per_run) == 1 else
                                f"in its {len(per_run)} runs."))
    runs = t["repeats"] if "repeats" in t.columns else None
    most = int(runs.max()) if runs is not None and len(runs) else 1
    parts.append("Each is one run's count of what the queue held, with nothing to resample: "
                 "no interval." if most == 1 else
                 f"Each is the median of {most} runs' counts of what the queue held, with its "
                 f"{LEVEL:.0%} interval over the runs where they differ (a count every run "
                 "agreed on is given alone).")
    return f"**Growth** ([`growth.ipynb`](notebooks/growth.ipynb)). {' '.join(parts)}"


def _wakeups(where: Path) -> str:
    from experiments.catalogue import KEYS
    from experiments.readers.summaries.wakeups import share

    t = table("wakeups", where).set_index("backend")
    found = {b: Interval(float(r["lost_share"]), float(r["lost_share_lo"]),
                         float(r["lost_share_hi"]), int(r["races"])) for b, r in t.iterrows()}
    ours = [b for b in t.index if b not in KEYS]
    theirs = [b for b in t.index if b in KEYS]
    lost = [b for b in ours if t.at[b, "lost"] > 0]
    widest = max((found[b] for b in ours), key=lambda i: i.hi, default=None)
    said = (f"No scheduler of ours lost any of {number(t.loc[ours, 'races'].max())} wakeups "
            f"raced against a running pass (at most {widest.hi:.1%} each, at {LEVEL:.0%})"
            if not lost and widest is not None else
            "Of ours, " + ", ".join(f"{b} lost {number(t.at[b, 'lost'])} of "
                                     f"{number(t.at[b, 'races'])} ({share(found[b])})"
                                     for b in ours))
    parts = [f"{said}."]
    if theirs:
        refused = [b for b in theirs if t.at[b, "lost"] > 0]
        kept = [b for b in theirs if t.at[b, "lost"] == 0]
        parts.append("A rival has no inbox: a job is woken by enqueuing it again under its own "
                     "key for one job per workflow, which may refuse it while the first runs: "
                     + "; ".join([*(f"{b} lost {number(t.at[b, 'lost'])} of "
                                    f"{number(t.at[b, 'races'])} ({share(found[b])}; its "
                                    f"{KEYS[b][1]})" for b in refused),
                                  *(f"{b} lost none ({share(found[b])}; {KEYS[b][2]})"
                                    for b in kept)])
                     + ".")
        if refused and ours:
            apart = all(not found[b].overlaps(found[o]) for b in refused for o in ours)
            parts.append("Each rival that refused lost more than any of ours, told apart at "
                         "this sample size (the Wilson score intervals on the share lost do not "
                         "overlap)." if apart else "Not every rival that refused is told apart "
                         "from ours at this sample size: some of the intervals overlap.")
    return (f"**Lost wakeups** ([`results/wakeups.csv`](results/wakeups.csv)). "
            f"{' '.join(parts)}")


def _lifecycle(where: Path) -> str:
    from experiments.readers.reading import summary
    from experiments.readers.summaries.lifecycle import races

    t = summary("lifecycle", where)
    backends = list(dict.fromkeys(t["backend"]))

    def each(case: str, metric: str, q: str = "p50") -> str:
        found = []
        for b in backends:
            rows = t[(t["backend"] == b) & (t["case"] == case) & (t["metric"] == metric)]
            if len(rows):
                r = rows.iloc[0]
                found.append(f"{b} {_told(Interval(r[q], r[q + '_lo'], r[q + '_hi'], r['n']))}")
        return ", ".join(found)

    raced = races(frame("lifecycle", where)).set_index("backend")
    bad = float((raced["both"] + raced["lost"]).sum())
    n = int(t["n"].max()) if len(t) else 0
    race = (f"Of {number(raced['races'].max())} cancels raced against a pass's last write on "
            "each store, " + ("none had both or neither win" if bad == 0 else
                              f"{number(bad)} had both or neither win")
            + " (the cancel won " + ", ".join(f"{b} {number(raced.at[b, 'cancel_won'])}"
                                              for b in raced.index)
            + "; the rest the pass), and no cancelled blocked workflow ran a step when its "
            "input came" + ("" if float(raced["revived"].sum()) == 0 else
                            f" but {number(float(raced['revived'].sum()))}") + ".")
    return ("**Cancel and result** ([`results/lifecycle.csv`](results/lifecycle.csv), a worker "
            f"and its client in one process, {n} samples each, medians in ms with their "
            f"{LEVEL:.0%} intervals). A pass cancelled mid-step is never cut short: it stops at "
            f"its next write, {each('mid-step', 'after_effect')} after its step's effect ends "
            f"(p99 {each('mid-step', 'after_effect', 'p99')}). A sleeper or a blocked one has "
            "no pass to stop: the cancel itself takes it off the timer or its wait and writes "
            f"`cancelled`, a call of {each('sleeper', 'cancel')} for a sleeper. A waiter in "
            "`durable.result` returns "
            f"{each('result', 'to_result')} after the completing pass's body returned, the "
            f"ending's write included (p99 {each('result', 'to_result', 'p99')}). {race}")


def _policies(where: Path) -> str:
    from experiments.readers.summaries.policies import (
        common,
        limits,
        rates,
        skipped,
        summary,
        told,
    )

    rows = frame("policies", where)
    t = summary(rows)
    backends = list(dict.fromkeys(t["backend"]))
    fired = t[t["arm"] == "schedule"]
    most = int(fired["processes"].max()) if len(fired) else 0
    top = fired[fired["processes"] == most]
    delays = ", ".join(
        f"{r['backend']} {_told(Interval(r['p50'], r['p50_lo'], r['p50_hi'], r['n']))}"
        for _, r in top.iterrows())
    crons = fired["backend"].isin([rival for _, rival in RIVALS])
    ours, theirs = fired[~crons], fired[crons]
    bad = float(ours["duplicates"].sum() + ours["missing"].sum())
    rivals = "".join(
        f"; {b} (a cron every second) ran {number(g['firings'].sum())}, "
        f"{number(g['duplicates'].sum())} twice, {number(g['missing'].sum())} missed"
        for b, g in theirs.groupby("backend", sort=False))
    schedule = (f"Of {number(ours['firings'].sum())} firings of a schedule every "
                f"{number(ours['every'].min())} ms fired by 1 to {most} worker processes, "
                + ("none ran twice or was missed" if bad == 0 else
                   f"{number(ours['duplicates'].sum())} ran twice and "
                   f"{number(ours['missing'].sum())} were missed")
                + f"{rivals}. The median delay from a firing's time to its pass at {most} "
                f"processes: {delays}." if len(ours) else "")
    urgent = t[t["arm"] == "priority"]
    pairs = []
    for b in backends:
        mine = urgent[urgent["backend"] == b].set_index("ordering")
        if "none" in mine.index:
            with_ = (f"{ms(float(mine.at['priority', 'p50']))} with a priority against "
                     if "priority" in mine.index else "(no priority yet) ")
            pairs.append(f"{b} {with_}{ms(float(mine.at['none', 'p50']))} without")
    priority = ("Urgent work submitted behind a backlog starts (median) "
                + "; ".join(pairs) + "." if pairs else "")
    held = limits(t)
    held = held[held["at_most"] > 0]
    over = float(held["overshoot"].sum()) if len(held) else 0.0
    limit = (f"Across {len(held)} limit configurations (limits 1 to "
             f"{number(held['at_most'].max())}, 1 to {number(held['processes'].max())} worker "
             "processes) the most holders seen at once, counted inside the bodies, "
             + ("never passed the limit" if over == 0 else f"passed it by {number(over)} in all")
             + "; at the largest limit and most processes the rate over none's: "
             + ", ".join(f"{r['backend']} {number(r['cost'])}" for _, r in held[
                 (held["at_most"] == held["at_most"].max())].groupby("backend", sort=False)
                 .tail(1).iterrows()) + "." if len(held) else "")
    rated = rates(t)
    rate = ""
    if len(rated):
        top = rated[rated["at_most"] == rated["at_most"].max()]
        rover = float(rated["overshoot"].sum())
        rate = (f"Across {len(rated)} rate-limit configurations ({number(rated['at_most'].min())}"
                f" to {number(rated['at_most'].max())} starts a second) the most starts "
                "counted inside the bodies in a window "
                + ("never passed the limit" if rover == 0 else
                   f"passed it by {number(rover)} in all")
                + "; the rate achieved at the largest over the one allowed: "
                + ", ".join(f"{r['backend']} {number(r['of_ceiling'])}" for _, r in
                            top.groupby("backend", sort=False).tail(1).iterrows()) + ".")
    plain = common(rows, where)
    ab = ""
    if plain.attrs.get("source") == "one sitting" and len(plain):
        ab = ("The common path (no priority, no limit, no schedule), after the policies over "
              "before, from the one-sitting A/B in `results/ab/common-path-quiet/`: one "
              f"process's one-step throughput {told(plain, 'rate')}; median start at 20/s "
              f"{told(plain, 'p50')}.")
    elif "rate_ratio" in plain:
        k = plain.attrs.get("calibrations", {})
        ab = ("The common path (no priority, no limit, no schedule) against the reference "
              "`throughput` and `latency` runs, another sitting (their machine ran the "
              f"calibration loop in {k.get('throughput', 0):.3f} s, this run's in "
              f"{k.get('policies', 0):.3f} s): one process's throughput "
              f"{told(plain, 'rate')}; median start at 20/s {told(plain, 'p50')}.")
    left = skipped(where)
    missing = (" Not measured, the store lacking the feature when the run was made: "
               + "; ".join(f"{feature} on {', '.join(names)}" for feature, names in left.items())
               + "." if left else "")
    return ("**Schedules, priorities and limits** ([`results/policies.csv`]"
            "(results/policies.csv), medians in ms with their "
            f"{LEVEL:.0%} intervals). " + " ".join(p for p in (schedule, priority, limit, rate, ab)
                                                    if p) + missing)


def _scaling(where: Path) -> str:
    from experiments.readers.summaries.scaling import FLAT, costs

    summary = table("scaling", where)
    medians = costs(frame("scaling", where))

    def slope(backend: str, dimension: str) -> str:
        row = summary[(summary["backend"] == backend) & (summary["dimension"] == dimension)]
        if not len(row):
            return ""
        r = row.iloc[0]
        found = Interval(float(r["slope"]), float(r["slope_lo"]), float(r["slope_hi"]), 1)
        lo, hi = found.lo, found.hi
        inner = "" if lo != lo else (f" ({lo:.2f} to {hi:.2f})" if lo < 0 else
                                     f" ({lo:.2f}{DASH}{hi:.2f})")
        return f"{backend} {found.estimate:.2f}{inner}"

    def cost(backend: str, dimension: str) -> tuple[str, float]:
        rows = medians[(medians["backend"] == backend) & (medians["dimension"] == dimension)]
        if not len(rows):
            return "n/a", math.nan
        r = rows.sort_values("size").iloc[-1]
        found = Interval(float(r["median"]), float(r["median_lo"]), float(r["median_hi"]), 1)
        return f"{ms(found.estimate)}{_span(found)}", float(r["size"])

    stores = [b for b in ("redis-stream", "redis-set", "postgres", "sqlite")
              if b in set(summary["backend"])]

    def each(dimension: str) -> str:
        return ", ".join(s for s in (slope(b, dimension) for b in stores) if s)

    biggest = [cost(b, "records") for b in stores]
    sizes = {size for _, size in biggest if size == size}
    stream, deep = cost("redis-stream", "cancel")
    set_, _ = cost("redis-set", "cancel")
    ratio_ = versus("scaling", "redis-stream", "redis-set", where, dimension="cancel")
    return ("**Scaling** ([`scaling.ipynb`](notebooks/scaling.ipynb)). A checkpoint is read "
            "whole on every pass: claim + load grows with its records (log-log slopes "
            f"{each('records')}; at {number(max(sizes, default=math.nan))} records "
            f"{', '.join(f'{b} {c}' for b, (c, _) in zip(stores, biggest, strict=True))}). "
            f"Taking work does not grow with the queue (slopes {each('ready')}), nor the "
            f"timer's `wake_due` with the sleepers on the server stores ({each('sleeping')}); "
            f"the memory store's walks every sleeper ({slope('memory', 'sleeping')}). "
            f"Cancelling is where the stream pays: it reads the stream to find a workflow's "
            f"entries ({slope('redis-stream', 'cancel')}; {stream} at {number(deep)} queued), "
            f"while the set deletes one member ({set_}), so the stream's cancel costs "
            f"{times(ratio_)} the set's there. Slopes and costs "
            f"carry {LEVEL:.0%} intervals over the repetitions at each size; each size ran "
            f"once, at its own moment, which those intervals do not cover, so a slope under "
            f"{FLAT} either way reads as flat.")


def _scale_out(where: Path) -> str:
    from experiments.readers.summaries.scale_out import check

    t = table("scale-out", where)

    def at(backend: str, masters: int, shards: int, column: str = "ceiling") -> float:
        rows = t[(t["backend"] == backend) & (t["masters"] == masters)
                 & (t["shards"] == shards)]
        return float(rows[column].iloc[0]) if len(rows) else math.nan

    def ceiling(backend: str, masters: int, shards: int) -> Interval:
        return Interval(at(backend, masters, shards),
                        at(backend, masters, shards, "ceiling_lo"),
                        at(backend, masters, shards, "ceiling_hi"), 1)

    most, top = int(t["masters"].max()), int(t["shards"].max())
    parts = []
    for backend in dict.fromkeys(t["backend"]):
        one, slot = ceiling(backend, 1, 1), ceiling(backend, most, 1)
        text = (f"{backend}: one master saturates at {_told(one)} passes a second. At {most} "
                f"masters the single-slot queue's busiest master does "
                f"{at(backend, most, 1, 'busiest_share'):.0%} of the nodes' CPU, yet spends "
                f"{number(at(backend, most, 1, 'busiest_cpu_per_pass'))} ms a pass against "
                f"one master's {number(at(backend, 1, 1, 'busiest_cpu_per_pass'))}, since the "
                f"nodes' CPU per pass summed grows to "
                f"{number(at(backend, most, 1, 'nodes_cpu_per_pass'))} ms: its ceiling is "
                f"{_told(slot)}")
        if top > 1:
            # The best sharded layout is said first, then the most shards where they differ.
            layouts = sorted(int(s) for s in set(t["shards"]) if s > 1)
            best = max(layouts, key=lambda s: at(backend, most, s))
            said = [best] + ([top] if top != best else [])
            text += f"; at {best} shards it is " + f", at {top} shards ".join(
                f"{_told(ceiling(backend, most, s))} (busiest share "
                f"{at(backend, most, s, 'busiest_share'):.0%}, the nodes' CPU per pass "
                f"{number(at(backend, most, s, 'nodes_cpu_per_pass'))} ms summed)"
                for s in said)
            text += (f", against the {number(most * one.estimate)} an even split at no extra "
                     "cost would give")
        parts.append(text + ".")
    checked = check(frame("scale-out", where))
    checks = [f"{r.backend} at {r.shards} shard{'s' if r.shards > 1 else ''}: the nodes' CPU "
              f"per pass {_told(Interval(r.nodes_cpu, r.nodes_cpu_lo, r.nodes_cpu_hi, 1))} "
              f"times one master's, the busiest's "
              f"{_told(Interval(r.busiest_cpu, r.busiest_cpu_lo, r.busiest_cpu_hi, 1))} times "
              f"against a share of {number(r.share_at_two)}, the rate "
              f"{_told(Interval(r.rate, r.rate_lo, r.rate_hi, 1))} times"
              + (" (one run a side: no interval)" if r.rate_lo != r.rate_lo else "")
              for r in checked.itertuples()]
    added = [f"{r.backend} at {r.shards} shard{'s' if r.shards > 1 else ''}"
             for r in checked.itertuples() if r.nodes_cpu_lo > 1]
    busy = float(t["busy"].max())
    sharded = bool(t["shards_option"].all()) if "shards_option" in t else True
    return ("**Scale-out** ([`scale-out.ipynb`](notebooks/scale-out.ipynb)). A Redis node runs "
            "its commands on one thread, so with one master per machine the busiest master "
            "saturates at 1 / (its CPU seconds per pass): that is the cluster's ceiling, with "
            f"{LEVEL:.0%} intervals over each configuration's runs. "
            + " ".join(parts) + " "
            + ("" if sharded else "This run's store had no `shards` option, so only the "
               "single-slot layout was measured. ")
            + (f"Two masters on this machine's two cores against one ({'; '.join(checks)}) "
               "check what the projection rests on, not the ceiling itself: no master was "
               f"busy more than {busy:.0%} of a run, so the workers' CPU, not a master, bound "
               "the rate here. " if checks else "")
            + (f"For {', '.join(added)} splitting added work per pass (the nodes' CPU ratio's "
               "interval lies above 1), which the even split's N·X leaves out and the "
               "measured ceiling keeps. " if added else "")
            + "The projection assumes a master's CPU per pass measured on a shared 2-core "
            "machine over loopback holds on a machine of its own, and enough worker machines "
            "that workers never bound the rate.")


def _design(where: Path) -> str:
    doorbell = versus("latency", "redis-stream", "redis-set", where)
    polled = versus("latency", "redis-set-polled", "redis-set", where)
    idle = table("idle", where)
    stream = idle[(idle["backend"] == "redis-stream") & (idle["variant"] == "default")]
    costs = (f"{number(float(stream['worker_requests'].iloc[0]))} requests a second"
             if len(stream) else "n/a")
    growth = table("growth", where)
    peaks = [growth[(growth["backend"] == b) & (growth["trimming"].astype(str) == "True")]
             ["peak_entries"] for b in ("redis-stream", "redis-stream-8.2")]
    runs = int(growth["repeats"].max()) if "repeats" in growth.columns and len(growth) else 1
    trimmed = (f"trimmed, it peaks at {number(float(peaks[0].iloc[0]))} entries on 7.0 and "
               f"{number(float(peaks[1].iloc[0]))} on 8.2, "
               + ("one run each" if runs == 1 else f"the median of {runs} runs each")
               if all(len(p) for p in peaks) else "")
    return ("**The design documents' table** ([`choosing.ipynb`](notebooks/choosing.ipynb)). "
            "*Waiting for work* no longer separates the stream from the set: the stream's "
            f"median start over the set's with its doorbell is {times(doorbell)}, and polling "
            f"as published takes {times(polled)} as long. *Redis version* no longer binds the "
            f"stream to 8.2, since the `MINID` trim keeps it as short on 7.0"
            + (f" ({trimmed})" if trimmed else "") + ". An idle worker costs not nothing but "
            f"{costs} on the stream (see idle cost for how sure).")


#: Each section: the experiments it reads, and what writes it.
SECTIONS: dict[str, tuple[tuple[str, ...], Callable[[Path], str]]] = {
    "ratios": (("latency", "throughput"), _ratios),
    "idle": (("idle",), _idle),
    "growth": (("growth",), _growth),
    "wakeups": (("wakeups",), _wakeups),
    "lifecycle": (("lifecycle",), _lifecycle),
    "policies": (("policies",), _policies),
    "scaling": (("scaling",), _scaling),
    "scale-out": (("scale-out",), _scale_out),
    "design": (("latency", "idle", "growth"), _design),
}


def findings(where: Path = RESULTS, names: Sequence[str] = ()) -> str:
    """The sections `names` (all by default) from the rows in `where`, as Markdown, one
    paragraph (or table) each. An unknown name is a `ValueError` naming the choices."""
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise ValueError(f"no finding {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(SECTIONS)}")
    parts = []
    for name in names or list(SECTIONS):
        needs, write = SECTIONS[name]
        missing = [n for n in needs if not (where / f"{n}.csv").exists()]
        parts.append(f"**{name}**: not in this run (no {', '.join(m + '.csv' for m in missing)})"
                     if missing else write(where))
    return "\n\n".join(_wrapped(part) for part in parts)


#: The docs' line width, so a paragraph pastes in as it reads there.
WIDTH = 95


def _wrapped(part: str) -> str:
    """Prose wrapped at `WIDTH`; a table's lines left whole (a Markdown row is one line)."""
    import textwrap

    return "\n".join(line if line.startswith("|") else textwrap.fill(
        line, WIDTH, break_long_words=False, break_on_hyphens=False)
        for line in part.split("\n"))

