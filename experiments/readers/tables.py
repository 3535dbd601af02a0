"""The tables a reader reads: each experiment's summary turned into a few screens of text.

`views(name, frame)` gives an experiment's tables as `View`s: one question each, a pivot where
a long table would repeat itself (a rate, a lease or a size as columns), readable headers,
numbers shown by `number` (thousands separators, three significant figures, never
e-notation), missing cells blank, every interval beside its statistic, and a flag on what
rests on too little (a configuration that started fewer than it submitted, a quantile with
few samples beyond it, a comparison whose interval holds "the same"). `report` prints them;
the notebooks show them. The numbers themselves stay in the summaries (`summary(frame)`),
whose `_lo` / `_hi` columns are the intervals figures draw as bands.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from experiments.readers.uncertainty import (
    LEVEL,
    Interval,
    distinguishable,
    nested_ratio,
    proportion,
    ratio,
    small,
)

__all__ = ["HEADERS", "QUICK", "RIVALS", "SAME", "View", "agreed", "number", "readable",
           "resampling", "span", "views"]

#: Each job queue beside the scheduler of ours it would replace (on the same server).
RIVALS = (("redis-stream", "saq"), ("redis-stream", "streaq"), ("redis-stream", "arq"),
          ("postgres", "pgqueuer"), ("postgres", "procrastinate"))
#: Said above the tables of a quick run.
QUICK = ("A quick run: every sample here is small (see the counts), so intervals are wide or "
         "missing; read it as a check that the lab runs, not as a comparison.")
#: Between an interval's bounds, and before a ratio's factor, as a reader would write them.
DASH, TIMES = "\N{EN DASH}", "\N{MULTIPLICATION SIGN}"
#: Appended to a ratio whose interval holds 1.
SAME = "≈"
_SAME_NOTE = (f"{SAME}: the interval holds 1, so the two are not distinguishable at this "
              "sample size")


@dataclass(frozen=True, slots=True)
class View:
    """One table: a short name to ask for it by (`reading.shown`), what it answers, the cells
    as text (the index is the row's key), and what a reader should know to read it (how sure
    it is, what is flagged)."""

    key: str
    title: str
    table: Any
    notes: tuple[str, ...] = ()


def number(value: Any) -> str:
    """A number as a table shows it: 10,617 and 1,262; 25.5, 0.944, 0.00028; 0.5 and 1 as
    such; blank for missing; text as it is."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, bool):
        return str(value)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(value):
        return ""
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    size = abs(float(f"{value:.3g}"))  # its size once rounded: 0.9997 is 1.00, not 1.000
    if size >= 100 or value == int(value):
        return f"{value:,.0f}"
    decimals = min(6, 2 - math.floor(math.log10(size)))
    shown = f"{value:.{decimals}f}"
    while decimals > 0 and round(value, decimals - 1) == value:
        decimals -= 1
        shown = f"{value:.{decimals}f}"
    return shown


def span(lo: float, hi: float) -> str:
    """An interval as text, blank where there is none."""
    if lo != lo or hi != hi:
        return ""
    return f"{number(lo)} to {number(hi)}" if lo < 0 else f"{number(lo)}{DASH}{number(hi)}"


def _with(estimate: float, lo: float, hi: float) -> str:
    """A statistic and its interval in one cell: "0.944 (0.928 to 0.965)" with a dash."""
    if estimate != estimate:
        return ""
    inner = span(lo, hi)
    return f"{number(estimate)} ({inner})" if inner else number(estimate)


def resampling(repeats: dict[str, int], what: str = "submissions") -> str:
    """How an interval over `what` was drawn, given each backend's count of repeats: over the
    repeats and then the `what` within each, where there are several; over one run's `what`
    (which leaves out what another run's load would move) where there is one; both, naming
    the backends of one run, where a merged run holds some of each."""
    several = [b for b, n in repeats.items() if n > 1]
    once = [b for b, n in repeats.items() if n <= 1]
    if several and not once:
        fewest = min(repeats[b] for b in several)
        return f"a bootstrap over the {fewest} repeats, then the {what} within each"
    if several:
        return (f"a bootstrap over the repeats, then the {what} within each; for "
                f"{', '.join(once)}, run once, over that run's {what} alone")
    return (f"a bootstrap over the {what} of this one run (what another run's load would move "
            "is not in them: --repeat measures it)")


def _agreed(estimate: float, lo: float, hi: float) -> str:
    """`_with`, but a count the runs agreed on to the digits shown (an interval that would
    read "n (n-n)") shown alone."""
    return number(estimate) if agreed(estimate, lo, hi) else _with(estimate, lo, hi)


def agreed(estimate: float, lo: float, hi: float) -> bool:
    """Whether an interval reads as its estimate alone at the digits `number` shows."""
    return number(lo) == number(hi) == number(estimate)


def _times(found: Interval) -> str:
    """A ratio and its interval, marked `SAME` where the interval holds 1."""
    if found.estimate != found.estimate:
        return ""
    shown = _with(found.estimate, found.lo, found.hi)
    return shown if distinguishable(found) else f"{shown} {SAME}"


def _name(backend: str, variant: str) -> str:
    return backend if variant == "default" else f"{backend} ({variant})"


def _frame(rows: list[dict[str, Any]], index: list[str]) -> Any:
    import pandas

    table = pandas.DataFrame(rows)
    return table.set_index(index) if len(table) else table


#: What `readable` shows of each experiment's summary: the columns a reader needs, each under
#: a header with its unit (the summary keeps the rest: every interval, every count).
HEADERS: dict[str, dict[str, str]] = {
    "latency": {"backend": "backend", "variant": "variant", "rate": "rate /s",
                "poll_ms": "poll ms", "n": "started", "submitted": "submitted",
                "p50": "p50 ms", "p50_lo": "p50 from", "p50_hi": "p50 to", "p90": "p90 ms",
                "p99": "p99 ms", "max": "max ms", "p50_vs_memory": f"p50 {TIMES} memory"},
    "idle": {"backend": "backend", "variant": "variant", "worker_requests": "worker req/s",
             "worker_round_trips": "round trips/s", "server_requests": "server req/s",
             "worker_cpu": "worker CPU ms/s", "server_cpu": "server CPU ms/s"},
    "growth": {"backend": "backend", "trimming": "trimmed", "peak_entries": "peak entries",
               "final_entries": "final entries", "peak_kib": "peak KiB",
               "final_kib": "final KiB", "wakeups": "wakeups", "repeats": "runs"},
    "takeover": {"backend": "backend", "phase": "phase", "recovery": "recovery",
                 "lease_s": "lease s", "n": "kills", "median": "median s",
                 "median_lo": "median from", "median_hi": "median to",
                 "taken_over": "taken over", "lease_plus_tick": "lease + tick s",
                 "median_vs_bound": "of lease + tick"},
    "throughput": {"backend": "backend", "variant": "variant", "processes": "processes",
                   "workflows": "workflows", "passes_per_s": "wf/s",
                   "passes_per_s_lo": "wf/s from", "passes_per_s_hi": "wf/s to",
                   "worker_cpu_per_pass": "worker CPU ms/pass",
                   "requests_per_pass": "requests/pass",
                   "server_requests_per_pass": "server req/pass", "runs": "runs"},
    "scaling": {"backend": "backend", "dimension": "dimension", "slope": "slope",
                "slope_lo": "slope from", "slope_hi": "slope to", "reads": "reads"},
    "wakeups": {"backend": "backend", "races": "races", "lost": "lost",
                "lost_share": "lost share", "lost_share_hi": "lost share at most",
                "refused": "refused"},
    "contention": {"arm": "arm", "partitions": "partitions", "processes": "processes",
                   "phase": "phase", "rate": "ops/s", "statements_per_op": "statements/op",
                   "wal_bytes_per_op": "WAL bytes/op", "writes_per_op": "commits/op",
                   "server_cpu_per_op": "server CPU ms/op",
                   "notify_waits": "backends on NOTIFY lock", "row_waits": "backends on rows",
                   "waiting": "backends waiting", "deadlocks": "deadlocks", "runs": "runs"},
    "scale-out": {"backend": "backend", "masters": "masters", "shards": "shards",
                  "nodes_cpu_per_pass": "nodes' CPU ms/pass",
                  "busiest_cpu_per_pass": "busiest's CPU ms/pass", "ceiling": "ceiling /s",
                  "ceiling_lo": "ceiling from", "ceiling_hi": "ceiling to",
                  "even": "N·X /s", "worker_cpu_per_pass": "worker CPU ms/pass",
                  "busy": "busiest busy"},
    "lifecycle": {"backend": "backend", "what": "timing", "n": "samples", "p50": "p50 ms",
                  "p50_lo": "p50 from", "p50_hi": "p50 to", "p99": "p99 ms"},
    "policies": {"backend": "backend", "arm": "arm", "processes": "processes",
                 "ordering": "ordering", "at_most": "limit", "n": "samples",
                 "p50": "p50 ms", "p99": "p99 ms", "duplicates": "firings twice",
                 "missing": "firings missed", "max_holders": "most at once",
                 "overshoot": "overshoot", "passes_per_s": "wf/s",
                 "ceiling_per_s": "ceiling /s"},
    "soak": {"backend": "backend", "variant": "variant", "metric": "measure", "unit": "unit",
             "start": "first", "end": "last", "max": "most",
             "slope_per_hour": "slope /h, 2nd half", "samples": "samples"},
}


def readable(summary: Any, name: str) -> Any:
    """`summary` as a frame that computes as the summary does (every column, numbers as
    numbers) and shows as a reader reads it: only `HEADERS`' columns, under headers with
    their units, numbers by `number` (or as `_TEXTS` says), blank where a value does not
    apply."""
    headers = dict(HEADERS.get(name, {}))
    if name == "latency" and "poll_ms" in summary:
        # a polled backend's rows at no poll of the sweep ran at its own default poll: said
        # so (a registered one's too), where a woken one's poll is blank
        polled = set(summary.loc[summary["poll_ms"].notna(), "backend"])
        summary = summary.assign(poll=[
            ("its default" if b in polled else "") if p != p else number(p)
            for b, p in zip(summary["backend"], summary["poll_ms"], strict=True)])
        headers = {("poll" if c == "poll_ms" else c): h for c, h in headers.items()}
    if name == "scaling":
        headers.update({c: f"ms at {c.removeprefix('ms@')}" for c in summary.columns
                        if str(c).startswith("ms@")})
    if name == "scale-out":
        # the rates measured, a column each count of worker processes, before the costs
        rates = {c: f"passes/s {TIMES}{c.split('@')[1]}" for c in summary.columns
                 if str(c).startswith("passes_per_s@")}
        at = list(headers).index("worker_cpu_per_pass")
        items = list(headers.items())
        headers = dict(items[:at] + list(rates.items()) + items[at:])
    table = _shown_type()(summary)
    table.headers = headers
    table.experiment = name
    return table


def _scaled(factor: float) -> Callable[[Any], str]:
    return lambda value: number(value * factor if isinstance(value, int | float) else value)


def _decimals(value: Any) -> str:
    """A slope: two decimals, as the report prints it (0.98, -0.13)."""
    return "" if value != value else f"{value:.2f}"


def _share(value: Any) -> str:
    return "" if value != value else f"{value:.0%}"


#: Columns that read better other than by `number`: idle's CPU, seconds a second, as ms a
#: second; a slope at two decimals; a share as a percentage.
_COLUMNS: dict[str, dict[str, Callable[[Any], str]]] = {
    "idle": {"worker_cpu": _scaled(1000), "server_cpu": _scaled(1000)},
    "scaling": {"slope": _decimals, "slope_lo": _decimals, "slope_hi": _decimals},
    "scale-out": {"busy": _share},
    "takeover": {"median_vs_bound": _share},
}


def _takeover_text(data: Any, text: Any) -> Any:
    """A kill never taken over reads "never", not a blank median."""
    if {"median", "taken_over", "n"} <= set(data.columns):
        never = (data["taken_over"] == 0) & (data["n"] > 0) & data["median"].isna()
        text.loc[never, "median"] = "never"
    return text


def _growth_text(data: Any, text: Any) -> Any:
    """Trimmed as the growth table says it: yes or no for the stream, a rival's own cleanup
    setting or its defaults."""
    if "trimming" in text.columns:
        rival = (data["setting"].fillna("").astype(str) != "") if "setting" in data.columns \
            else [False] * len(data)
        text["trimming"] = [
            ({"True": "its cleanup", "False": "defaults"} if r else
             {"True": "yes", "False": "no"}).get(str(t), "")
            for t, r in zip(data["trimming"], rival, strict=True)]
    return text


#: Whole-table touches after the cells are shown: what a cell says depends on its row.
_TEXTS: dict[str, Callable[[Any, Any], Any]] = {"takeover": _takeover_text,
                                                "growth": _growth_text}


@functools.cache
def _shown_type() -> type:
    import pandas

    class Shown(pandas.DataFrame):  # type: ignore[misc]
        """A summary that shows only the columns a reader needs (`readable`)."""

        _metadata: ClassVar[list[str]] = ["headers", "experiment"]
        headers: dict[str, str] = {}  # noqa: RUF012  (pandas copies it to each frame made)
        experiment: str = ""

        @property
        def _constructor(self) -> type:
            return Shown

        def shown(self) -> Any:
            """What a reader sees: the chosen columns, headed, as text."""
            plain = pandas.DataFrame(self)
            columns = [c for c in self.headers if c in plain.columns]
            if not columns:
                return plain
            formats = _COLUMNS.get(self.experiment, {})
            text = pandas.DataFrame({
                c: [v if isinstance(v, str) else formats.get(c, number)(v)
                    for v in plain[c]] for c in columns}, index=plain.index)
            touch = _TEXTS.get(self.experiment)
            if touch is not None:
                text = touch(plain, text)
            return text.rename(columns=self.headers)

        def _index(self) -> bool:
            return not isinstance(self.index, pandas.RangeIndex)

        def _repr_html_(self) -> str:
            return str(self.shown().to_html(index=self._index()))

        def __repr__(self) -> str:
            return str(self.shown().to_string(index=self._index()))

    return Shown


# -- one experiment each ----------------------------------------------------------------------


def _latency(frame: Any, summary: Any) -> list[View]:
    from experiments.readers.summaries.latency import configurations

    found_in = configurations(frame)

    def samples(_: Any, backend: str, rate: float, variant: str = "default") -> list[Any]:
        return found_in.get((backend, variant, float(rate), None)) or [[]]

    level = f"{LEVEL:.0%}"
    plain = summary[summary["poll_ms"].isna()]
    short = summary[summary["n"] < summary["submitted"]]

    def key(row: Any) -> tuple[str, str, float, float | None]:
        """A configuration, its poll None rather than NaN (no NaN is equal to another)."""
        poll = None if row.poll_ms != row.poll_ms else float(row.poll_ms)
        return (str(row.backend), str(row.variant), float(row.rate), poll)

    started = {key(r): f"{r.n:,.0f} of {r.submitted:,.0f}" for r in short.itertuples()}

    def cell(row: Any) -> str:
        found = _with(row.p50, row.p50_lo, row.p50_hi)
        return f"{found} *" if key(row) in started else found

    which = "; ".join(f"{_name(b, v)} at {r:g}/s: {n}" for (b, v, r, _), n in started.items())
    shortfall = (f"* started fewer than it submitted ({which}): the percentiles count only "
                 "those that started, so they understate the wait")
    views = []
    headline = plain[plain["rate"] == 20.0]
    if len(headline):
        rows = []
        for r in headline.itertuples():
            rows.append({"backend": r.backend, "variant": r.variant,
                         "started": started.get(key(r), number(r.n)),
                         "p50": number(r.p50), f"p50 {level}": span(r.p50_lo, r.p50_hi),
                         "p90": number(r.p90),
                         "p99": number(r.p99) + (" (few)" if small(r.n, 0.99) else ""),
                         f"p99 {level}": span(r.p99_lo, r.p99_hi), "max": number(r.max),
                         f"{TIMES} memory": number(r.p50_vs_memory)})
        views.append(View("headline", "Submit → first pass at 20 submissions a second (ms)",
                          _frame(rows, ["backend", "variant"]),
                          (f"{level} intervals: " + resampling(
                              headline.groupby("backend", sort=False)["repeats"].max()
                              .astype(int).to_dict())
                           + "; (few): under 500 submissions, so p99 rests on the slowest few",)))
    if plain["rate"].nunique() > 1:
        rows = []
        for (backend, variant), group in plain.groupby(["backend", "variant"], sort=False):
            entry = {"backend": backend, "variant": variant}
            entry.update({f"{r.rate:g}/s": cell(r) for r in group.itertuples()})
            rows.append(entry)
        views.append(View("rates", "p50 (ms, with its interval) against the arrival rate",
                          _frame(rows, ["backend", "variant"]).fillna(""),
                          (shortfall,) if started else ()))
    polled = summary[summary["poll_ms"].notna()]
    if len(polled):
        rows = []
        for backend, group in polled.groupby("backend", sort=False):
            entry = {"backend": backend}
            entry.update({f"{r.poll_ms:g} ms": _with(r.p50, r.p50_lo, r.p50_hi)
                          for r in group.sort_values("poll_ms").itertuples()})
            rows.append(entry)
        views.append(View("polls", "p50 (ms) against the poll interval, at 20/s",
                          _frame(rows, ["backend"]).fillna("")))
    rates = sorted(plain["rate"].unique())
    rows = []
    for mine, theirs in RIVALS:
        for variant in plain[plain["backend"] == theirs]["variant"].unique():
            entry = {"ours / theirs": f"{mine} / {_name(theirs, variant)}"}
            for rate in rates:
                if not len(plain[(plain["backend"] == theirs) & (plain["variant"] == variant)
                                 & (plain["rate"] == rate)]):
                    continue
                found = nested_ratio(samples(frame, mine, rate),
                                     samples(frame, theirs, rate, variant))
                sides = {(mine, "default", float(rate), None), (theirs, variant, float(rate), None)}
                entry[f"{rate:g}/s"] = _times(found) + (" *" if sides & set(started) else "")
            rows.append(entry)
    if rows:
        views.append(View("rivals",
                          "p50 ratio against the job queues (below 1: ours starts sooner)",
                          _frame(rows, ["ours / theirs"]).fillna(""),
                          (f"{level} intervals: a bootstrap over both sides' submissions, "
                           "and first over their repeats where each has several",
                           _SAME_NOTE, *(["* a side started fewer than it submitted (above)"]
                                         if started else []))))
    return views


def _throughput(frame: Any, summary: Any) -> list[View]:
    from experiments.readers.summaries.throughput import rates

    level = f"{LEVEL:.0%}"
    runs = summary["runs"].dropna()
    fewest = int(runs.min()) if len(runs) else 0
    sizes = sorted(float(w) for w in summary["workflows"].dropna().unique())
    keys = ["backend", "variant"] + (["workflows"] if len(sizes) > 1 else [])
    about = (f"the median of {fewest} repeat{'s' if fewest != 1 else ''}, with its {level} "
             "interval (a bootstrap over the repeats"
             + (", so with so few about their range)" if fewest < 10 else ")")
             if fewest > 1 else "one run: no interval (run with --repeat 3 or more)")
    workload = (f"at {sizes[0]:,.0f} workflows preloaded per configuration: a ratio at another "
                "size may differ, and this run measures one (--set workflows=2000,12000 "
                "measures several)" if len(sizes) == 1 else
                f"at {', '.join(f'{w:,.0f}' for w in sizes)} workflows preloaded per "
                "configuration, each a row of its own")
    rows = []
    for key, group in summary.groupby(keys, sort=False):
        entry = dict(zip(keys, key, strict=True))
        if "workflows" in entry:
            entry["workflows"] = number(entry["workflows"])
        for r in group.itertuples():
            entry[f"{TIMES}{int(r.processes)} process{'es' if r.processes != 1 else ''}"] = _with(
                r.passes_per_s, r.passes_per_s_lo, r.passes_per_s_hi)
        rows.append(entry)
    views = [View("rates", "Workflows a second at saturation",
                  _frame(rows, keys).fillna(""), (f"{about}; {workload}",))]
    one = summary[summary["processes"] == 1]
    columns = {"worker_cpu_per_pass": "worker CPU ms", "requests_per_pass": "requests",
               "round_trips_per_pass": "round trips",
               "server_requests_per_pass": "server requests",
               "server_commits_per_pass": "commits",
               "server_cpu_per_pass": "server CPU ms"}
    rows = [{**{k: (number(r[k]) if k == "workflows" else r[k]) for k in keys},
             **{label: number(r.get(column)) for column, label in columns.items()}}
            for _, r in one.iterrows()]
    views.append(View("costs",
                      "What a pass costs, one worker process (per pass, median of repeats)",
                      _frame(rows, keys),
                      ("requests and round trips: the worker's own count (ours); the "
                       "server's: its counters, which count a script's commands inside it; "
                       "commits: the Postgres transactions that wrote (each a commit)",)))
    rows = []
    counts = sorted(int(p) for p in summary["processes"].unique())
    for mine, theirs in RIVALS:
        for variant in summary[summary["backend"] == theirs]["variant"].unique():
            for size in sizes:
                entry = {"ours / theirs": f"{mine} / {_name(theirs, variant)}"}
                if len(sizes) > 1:
                    entry["workflows"] = number(size)
                for n in counts:
                    found = ratio(rates(frame, mine, n, workflows=size),
                                  rates(frame, theirs, n, variant, workflows=size))
                    entry[f"{TIMES}{n}"] = _times(found)
                rows.append(entry)
    if rows:
        views.append(View("rivals",
                          "Throughput ratio against the job queues (above 1: ours does more)",
                          _frame(rows, ["ours / theirs", *keys[2:]]).fillna(""),
                          (f"{level} intervals: a bootstrap over both sides' repeats",
                           _SAME_NOTE)))
    return views


def _takeover(frame: Any, summary: Any) -> list[View]:
    from experiments.readers.summaries.takeover import TYPICAL, typical

    level = f"{LEVEL:.0%}"
    rivals = summary[summary["phase"] == "mid-job"]
    summary = summary[summary["phase"] != "mid-job"]
    if not len(summary):
        return _rival_takeovers(frame, rivals)
    leases = sorted(summary["lease_s"].unique())
    bounds = summary.groupby("lease_s")["lease_plus_tick"].first()
    views = []
    rows = []
    for backend in summary["backend"].unique():
        entry = {"backend": backend}
        for lease in leases:
            found = typical(frame, backend, lease)
            entry[f"lease {number(lease)} s"] = _with(found.estimate, found.lo, found.hi)
        rows.append(entry)
    kills = summary.groupby(["backend", "lease_s"])["n"].sum()
    views.append(View("typical",
                      f"Takeover (s), the {TYPICAL}", _frame(rows, ["backend"]).fillna(""),
                      (f"{level} intervals: a bootstrap over the {kills.min():,.0f}"
                       f"{'' if kills.min() == kills.max() else f' to {kills.max():,.0f}'} "
                       "kills of each cell (each phase's table below: half as many)"
                       + (", so rough" if small(int(kills.min())) else ""),
                       "the bound, lease + tick: " + ", ".join(
                           f"{number(bounds[lease])} s at {number(lease)}" for lease in leases))))
    for phase, group in summary.groupby("phase", sort=False):
        rows = []
        for backend, part in group.groupby("backend", sort=False):
            entry = {"backend": backend}
            entry.update({f"lease {number(r.lease_s)} s":
                          _with(r.median, r.median_lo, r.median_hi)
                          + (f" {r.median_vs_bound:.0%}" if r.median_vs_bound == r.median_vs_bound
                             else "")
                          for r in part.itertuples()})
            rows.append(entry)
        views.append(View(str(phase), f"Killed {phase}: the median takeover (s), and what share of "
                          "lease + tick it is", _frame(rows, ["backend"]).fillna("")))
    return views + _rival_takeovers(frame, rivals)


def _rival_takeovers(frame: Any, rivals: Any) -> list[View]:
    """The rivals' kills, one row a recovery: `TYPICAL` over them ("never" where half or more
    were never taken over) with its interval, and what the rival was set to; why it never
    was, and which were only in part, said below."""
    from experiments.readers.summaries.takeover import TYPICAL, typical

    if not len(rivals):
        return []
    level = f"{LEVEL:.0%}"
    rows, said = [], []
    for r in rivals.itertuples():
        found = typical(frame, r.backend, r.lease_s, r.recovery)
        rows.append({"rival (recovery)": f"{r.backend} ({r.recovery})",
                     f"takeover s ({level})": "never" if math.isinf(found.estimate)
                     else _with(found.estimate, found.lo, found.hi).replace("∞", "never"),
                     "setting": r.setting})
        if r.note:
            said.append(f"{r.backend} ({r.recovery}) {r.note}")
    lease = float(rivals["lease_s"].iloc[0])
    kills = rivals["n"]
    return [View("mid-job", f"Rivals killed mid-job, each at its own settings made from a "
                 f"{number(lease)} s lease: the {TYPICAL.split(',')[0]} (s)",
                 _frame(rows, ["rival (recovery)"]),
                 (f"{level} intervals: a bootstrap over the {kills.min():,.0f}"
                  f"{'' if kills.min() == kills.max() else f' to {kills.max():,.0f}'} kills of "
                  "each row; a kill no other worker ran again within the patience given counts "
                  "as never", *said))]


def window_lengths(windows: Any) -> str:
    """How long the idle windows were, as a phrase: " of 15 s" when all were, else each length
    with the backends measured over it (a merged run can hold several)."""
    if not len(windows):
        return ""
    lengths = windows.groupby("backend", sort=False)["value"].median().round()
    if lengths.nunique() == 1:
        return f" of {lengths.iloc[0]:,.0f} s"
    by = [f"{seconds:,.0f} s for {', '.join(names)}"
          for seconds, names in sorted(lengths.groupby(lengths).groups.items(), reverse=True)]
    return " (" + "; ".join(by) + ")"


def _idle(frame: Any, summary: Any) -> list[View]:
    columns = {"worker_requests": ("worker req/s", 1), "worker_round_trips": ("round trips/s", 1),
               "server_requests": ("server req/s", 1), "worker_cpu": ("worker CPU ms/s", 1000),
               "server_cpu": ("server CPU ms/s", 1000)}
    rows = [{"backend": r["backend"], "variant": r["variant"],
             **{label: _agreed(*(r.get(f"{column}{end}", math.nan) * scale
                                 for end in ("", "_lo", "_hi")))
                for column, (label, scale) in columns.items()}}
            for _, r in summary.iterrows()]
    windows = frame[frame["metric"] == "window"]
    seconds = window_lengths(windows)
    most = int(windows.groupby(["backend", "variant"]).size().max()) if len(windows) else 1
    over = (f"the median of {most} windows{seconds} per backend, with its {LEVEL:.0%} interval "
            "(a bootstrap over the windows, so with so few about their range), shown where "
            "the windows differ" if most > 1 else
            f"one window{seconds} per backend, no repeats: no interval (--repeat gives one)")
    return [View("idle",
                 "An idle worker: what it costs a second", _frame(rows, ["backend", "variant"]),
                 (f"{over}; blank: not counted there (a rival has no counting hook of ours; "
                  "memory and SQLite no server)",))]


def _growth(frame: Any, summary: Any) -> list[View]:
    columns = {"peak_entries": "peak entries", "final_entries": "final entries",
               "peak_kib": "peak KiB", "final_kib": "final KiB", "wakeups": "wakeups"}
    rows, settings = [], []
    for _, r in summary.iterrows():
        trimming = str(r["trimming"])
        rival = bool(r.get("setting"))
        shown = ({"True": "its cleanup", "False": "defaults"} if rival else
                 {"True": "yes", "False": "no"}).get(trimming, "")
        rows.append({"backend": r["backend"], "trimmed": shown,
                     **{label: _agreed(r[column], r.get(f"{column}_lo", math.nan),
                                       r.get(f"{column}_hi", math.nan))
                        if column != "wakeups" else number(r[column])
                        for column, label in columns.items()}})
        if rival:
            settings.append({"backend": r["backend"], "trimmed": shown,
                             "setting": r["setting"]})
    repeats = summary["repeats"] if "repeats" in summary.columns else None
    most = int(repeats.max()) if repeats is not None and len(repeats) else 1
    fewest = int(repeats.min()) if repeats is not None and len(repeats) else 1
    over = ("one run each: no interval (--repeat gives one)" if most == 1 else
            f"the median of {most} runs each, with its {LEVEL:.0%} interval (a bootstrap over "
            "the runs, so with so few about their range), shown where the runs differ" if
            fewest == most else
            f"the median of up to {most} runs, with its {LEVEL:.0%} interval where the runs "
            "differ (a bootstrap over the runs); a row of one run has none")
    views = [View("growth", "The queue's size while workflows wake many times",
                  _frame(rows, ["backend", "trimmed"]),
                  (f"{over}; trimmed is said only of the stream, the one queue of ours that "
                   "keeps what it delivered; a rival's job per wakeup, at its defaults or with "
                   "its own cleanup setting (below)",))]
    if settings:
        views.append(View("settings", "What each rival ran with",
                          _frame(settings, ["backend", "trimmed"])))
    return views


def _scaling(frame: Any, summary: Any) -> list[View]:
    level = f"{LEVEL:.0%}"
    views = []
    for key, title, dimensions in (
            ("checkpoint", "A checkpoint's read against its size", ("records", "inbox")),
            ("queue", "The queue's operations against its depth", ("ready", "sleeping",
                                                                   "cancel"))):
        part = summary[summary["dimension"].isin(dimensions)]
        if not len(part):
            continue
        sizes = [c for c in part.columns if c.startswith("ms@") and part[c].notna().any()]
        rows = []
        for _, r in part.iterrows():
            rows.append({"backend": r["backend"], "dimension": r["dimension"],
                         "slope": f"{r['slope']:.2f}",
                         f"{level}": _slopes(r["slope_lo"], r["slope_hi"]),
                         "reads": r["reads"],
                         **{f"ms at {c.removeprefix('ms@')}": number(r[c]) for c in sizes}})
        views.append(View(key, f"{title}: the log-log slope and the median cost (ms)",
                          _frame(rows, ["backend", "dimension"])))
    if views:
        views[-1] = View(views[-1].key, views[-1].title, views[-1].table, (
            "slope of log(cost) on log(size): 0 flat, 1 linear; its interval is a bootstrap "
            "over the repetitions at each size, and each size ran once, at its own moment, so "
            "a slope under 0.2 either way is read as flat",))
    return views


def _slopes(lo: float, hi: float) -> str:
    if lo != lo:
        return ""
    return f"{lo:.2f} to {hi:.2f}" if lo < 0 else f"{lo:.2f}{DASH}{hi:.2f}"


def _wakeups(frame: Any, summary: Any) -> list[View]:
    from experiments.catalogue import KEYS
    from experiments.readers.summaries.wakeups import share

    level = f"{LEVEL:.0%}"
    rivals = "refused" in summary and bool(summary["refused"].notna().any())
    rows = [{"backend": r["backend"], "raced": number(r["races"]), "lost": number(r["lost"]),
             f"lost share, {level}": share(Interval(r["lost_share"], r["lost_share_lo"],
                                                    r["lost_share_hi"], int(r["races"]))),
             **({"refused": number(r["refused"]),
                 "poked under": KEYS[r["backend"]][1] if r["backend"] in KEYS else ""}
                if rivals else {})}
            for _, r in summary.iterrows()]
    how = [f"{r['backend']}: {r['how']}" for _, r in summary.iterrows() if r.get("how")]
    most = int(summary["races"].max()) if summary["races"].notna().any() else 0
    interval = (f"the lost share's {level} interval: a Wilson score interval over the races "
                + (f"(none lost of {most:,} is still at most {proportion(0, most).hi:.1%})"
                   if most else ""))
    return [View("wakeups", "Wakeups given while a pass was running, and how many were lost",
                 _frame(rows, ["backend"]),
                 (interval, "a rival has no inbox: its poke is the job enqueued again under its "
                  "own key for one job per workflow, which may refuse it (refused); lost: not "
                  "run again after the poke", *how) if rivals else (interval,))]


def _contention(frame: Any, summary: Any) -> list[View]:
    from experiments.readers.summaries.contention import statements

    columns = {"rate": "per s", "statements_per_op": "statements", "wal_bytes_per_op":
               "WAL bytes", "writes_per_op": "commits", "server_cpu_per_op": "server CPU ms",
               "notify_waits": "on NOTIFY lock", "row_waits": "on rows", "waiting": "waiting",
               "deadlocks": "deadlocks"}
    rows = [{"arm": r["arm"], "processes": int(r["processes"]), "phase": r["phase"],
             **{label: number(r.get(column, math.nan)) for column, label in columns.items()}}
            for _, r in summary.iterrows()]
    most = int(summary["runs"].max()) if "runs" in summary and len(summary) else 1
    bounds = View("bounds", "What one operation costs one Postgres, and what its backends wait"
                  " on", _frame(rows, ["arm", "processes", "phase"]),
                  (f"per arrival (arrive) or pass (work), the median of {most} runs; the waits "
                   "are backends seen waiting, the mean over samples every 20 ms",))
    processes = int(summary["processes"].max()) if len(summary) else 1
    costs = statements(frame, "notify", processes)
    named = [{"statement": r["statement"], "calls": number(r.get("statement_calls")),
              "WAL bytes": number(r.get("statement_wal_bytes")),
              "ms": number(r.get("statement_ms"))} for _, r in costs.iterrows()]
    return [bounds, View("statements", f"A pass's statements, by what each writes ({processes}"
                         " processes)", _frame(named, ["statement"]),
                         ("per pass; ms: execution time in the server",))]


def _lifecycle(frame: Any, summary: Any) -> list[View]:
    from experiments.readers.figures import in_order
    from experiments.readers.summaries.lifecycle import COUNTS, races

    level = f"{LEVEL:.0%}"
    rows = [{"backend": r["backend"], "timing": r["what"], "n": number(r["n"]),
             f"p50 ms ({level})": _with(r["p50"], r["p50_lo"], r["p50_hi"]),
             f"p99 ms ({level})": _with(r["p99"], r["p99_lo"], r["p99_hi"])}
            for _, r in summary.iterrows()]
    counted = in_order(races(frame))
    race = [{"backend": r["backend"], **{c: number(r[c]) for c in COUNTS}}
            for _, r in counted.iterrows()]
    return [View("lifecycle", "A cancel's time to stopped, and ending to result",
                 _frame(rows, ["backend", "timing"]),
                 (f"intervals: bootstrap over the samples, {level}; a p99 of fewer than 100 "
                  "samples is their largest",)),
            View("lifecycle-race", "Cancels raced against a pass's last write",
                 _frame(race, ["backend"]),
                 ("both (cancel said True, the workflow completed) and lost (cancel said "
                  "False, it never completed) must be 0; revived: a cancelled blocked "
                  "workflow that ran a step once given its input (must be 0)",))]


_VIEWS: dict[str, Callable[[Any, Any], list[View]]] = {
    "latency": _latency, "throughput": _throughput, "takeover": _takeover, "idle": _idle,
    "growth": _growth, "scaling": _scaling, "wakeups": _wakeups, "contention": _contention,
    "lifecycle": _lifecycle,
}


def views(name: str, frame: Any, summary: Any = None) -> list[View]:
    """`name`'s tables from its rows (and its `summary` of them, made here unless given);
    an experiment with no view of its own (here, or as `views` beside its summary) shows its
    summary as it is, numbers shown by `number`."""
    import importlib

    from experiments.catalogue import module_name
    from experiments.readers.figures import in_order

    frame = in_order(frame)
    found = importlib.import_module(f"experiments.readers.summaries.{module_name(name)}")
    if summary is None:
        summary = found.summary(frame)
    summary = in_order(summary)
    # An experiment's views live here, or beside its summary (`views(frame, summary)`).
    shown = _VIEWS.get(name) or getattr(found, "views", None)
    if shown is not None:
        return shown(frame, summary)
    return [View(name, name, summary.map(number))]
