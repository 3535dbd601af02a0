"""The design documents' comparison tables, each cell backed by a number from `results/`.

`comparison()` is the Redis document's "Choosing between them" (six rows: waiting for work,
growth, Redis version, moving parts, losing a wakeup, taking over a dead worker, and two
of this project's, scaling past one node and cancel and result) for the
stream scheduler, the sorted set as published (polling), the sorted set with this project's
doorbell, and Postgres with notifications; with a verdict per row, computed from the same
numbers: does the measurement confirm the document, refute it, or change the answer?
`claims()` does the same for the core document's claims the lab can measure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from experiments.readers.reading import frame, ms, summary, table
from experiments.readers.summaries.latency import samples
from experiments.readers.summaries.scaling import FLAT
from experiments.readers.summaries.takeover import TYPICAL, typical
from experiments.readers.tables import span
from experiments.readers.uncertainty import Interval, nested_ratio
from experiments.results import RESULTS

__all__ = ["COLUMNS", "claims", "comparison"]

#: The table's columns: the document's two schedulers, then this project's two answers.
COLUMNS = {
    "redis-stream": "RedisStreamScheduler",
    "redis-set-polled": "RedisSetScheduler (published: polls)",
    "redis-set": "RedisSetScheduler + doorbell",
    "postgres": "PostgresScheduler + NOTIFY",
}


class _Numbers:
    """The figures the verdicts are made of, read once from results/."""

    def __init__(self, where: Path | None) -> None:
        import pandas

        self.latency = table("latency", where)
        self.latency_rows = frame("latency", where)
        self.idle = table("idle", where)
        self.growth = table("growth", where)
        self.takeover = table("takeover", where)
        self.takeover_rows = frame("takeover", where)
        self.wakeups = table("wakeups", where)
        self.scaling = table("scaling", where)
        self.scaling_rows = frame("scaling", where)
        self.throughput = frame("throughput", where)
        self.growth_rows = frame("growth", where)
        self.idle_rows = frame("idle", where)
        # Newer than the rest: a run from before it (or without it) reads as not measured.
        try:
            self.scale_out: Any = table("scale-out", where)
        except FileNotFoundError:
            self.scale_out = None
        # Newer than the rest: a folder from before it has none, and its row says so.
        measured = (Path(where or RESULTS) / "lifecycle.csv").exists()
        self.lifecycle = summary("lifecycle", where) if measured else pandas.DataFrame(
            columns=["backend", "case", "metric", "p50"])
        self.lifecycle_rows = frame("lifecycle", where) if measured else pandas.DataFrame()

    def latency_at(self, backend: str, column: str = "p50", poll: float | None = None) -> float:
        t = self.latency
        rows = t[(t["backend"] == backend) & (t["rate"] == 20.0) & (t["variant"] == "default")]
        rows = rows[rows["poll_ms"].isna()] if poll is None else rows[rows["poll_ms"] == poll]
        return float(rows[column].iloc[0]) if len(rows) else math.nan

    def idle_at(self, backend: str, column: str = "worker_requests") -> float:
        t = self.idle
        rows = t[(t["backend"] == backend) & (t["variant"] == "default")]
        return float(rows[column].iloc[0]) if len(rows) and column in rows else math.nan

    def grown(self, backend: str, trimming: Any, column: str = "peak_entries") -> float:
        t = self.growth
        rows = t[(t["backend"] == backend) & (t["trimming"].astype(str) == str(trimming))]
        return float(rows[column].iloc[0]) if len(rows) else math.nan

    def wakeups_of(self, backend: str) -> tuple[float, float]:
        t = self.wakeups
        rows = t[t["backend"] == backend]
        if not len(rows):
            return math.nan, math.nan
        return float(rows["races"].iloc[0]), float(rows["lost"].iloc[0])

    def lifecycle_of(self, backend: str, case: str, metric: str) -> float:
        """The median of one `lifecycle` timing, in ms (NaN where it was not measured)."""
        t = self.lifecycle
        rows = t[(t["backend"] == backend) & (t["case"] == case) & (t["metric"] == metric)]
        return float(rows["p50"].iloc[0]) if len(rows) else math.nan

    def raced(self, backend: str) -> dict[str, float]:
        """The `lifecycle` race's counts for `backend` (empty where it was not run)."""
        from experiments.readers.summaries.lifecycle import races

        rows = self.lifecycle_rows
        if not len(rows):
            return {}
        t = races(rows).set_index("backend")
        return {k: float(v) for k, v in t.loc[backend].items()} if backend in t.index else {}

    def took_over(self, backend: str, lease: float) -> tuple[Interval, float]:
        """(`takeover.TYPICAL` with its interval, lease + tick) at `lease`."""
        t = self.takeover
        rows = t[(t["backend"] == backend) & (t["lease_s"] == lease)]
        bound = float(rows["lease_plus_tick"].iloc[0]) if len(rows) else math.nan
        return typical(self.takeover_rows, backend, lease), bound

    def keys(self, backend: str) -> int:
        rows = self.growth_rows
        parts = rows[(rows["backend"] == backend) & (rows["metric"] == "part")]
        return int(parts["part"].nunique())

    def per_pass(self, backend: str) -> tuple[int, float, float]:
        """(distinct requests a pass sends, requests per pass, round trips per pass), one
        worker process at saturation."""
        rows = self.throughput
        mine = rows[(rows["backend"] == backend) & (rows["processes"] == 1)
                    & (rows["variant"] == "default")]
        named = mine[mine["metric"] == "request_per_pass"]
        distinct = int((named["value"] >= 0.01).sum())

        def one(metric: str) -> float:
            found = mine[mine["metric"] == metric]["value"]
            return float(found.median()) if len(found) else math.nan

        return distinct, one("requests_per_pass"), one("round_trips_per_pass")

    def idle_parts(self, backend: str) -> int:
        rows = self.idle_rows
        mine = rows[(rows["backend"] == backend) & (rows["metric"] == "worker_request")]
        return int(mine["request"].nunique())


def comparison(where: Path | None = None) -> tuple[Any, dict[str, str]]:
    """The seven rows and cancel and result, with a measured cell per column, and a verdict
    per row."""
    import pandas

    n = _Numbers(where)
    table_rows: dict[str, dict[str, str]] = {}
    verdicts: dict[str, str] = {}

    # 1. Waiting for work
    cells = {}
    for backend in COLUMNS:
        within = span(n.latency_at(backend, "p50_lo"), n.latency_at(backend, "p50_hi"))
        cells[backend] = (f"p50 {ms(n.latency_at(backend))}"
                          + (f" ({within} ms)" if within else "") + ", p99 "
                          f"{ms(n.latency_at(backend, 'p99'))}; idle "
                          f"{n.idle_at(backend):.1f} req/s")
    table_rows["Waiting for work"] = cells
    stream_p50, polled_p50 = n.latency_at("redis-stream"), n.latency_at("redis-set-polled")
    bell_p50 = n.latency_at("redis-set")
    sooner = nested_ratio(samples(n.latency_rows, "redis-set-polled"),
                          samples(n.latency_rows, "redis-set"))
    verdicts["Waiting for work"] = (
        f"Confirms the document for the two it compares: the stream is picked up in "
        f"{ms(stream_p50)} while the polled set waits {ms(polled_p50)}, about half its 50 ms "
        f"poll. \"An idle worker costs nothing\" is nearly so: "
        f"{n.idle_at('redis-stream'):.1f} requests a second (the reclaimer and the timer, not "
        f"the read). The doorbell changes the answer: the same sorted set starts work in "
        f"{ms(bell_p50)}, {sooner.estimate:.0f} times sooner than polling "
        f"({span(sooner.lo, sooner.hi)} at 95%), so waiting for "
        f"work no longer separates the two designs."
    )

    # 2. Growth
    table_rows["Growth"] = {
        "redis-stream": (f"untrimmed {n.grown('redis-stream', False, 'final_entries'):,.0f} "
                         f"entries left; trimmed peak {n.grown('redis-stream', True):,.0f}, "
                         f"final {n.grown('redis-stream', True, 'final_entries'):,.0f}"),
        "redis-set-polled": f"peak {n.grown('redis-set', ''):,.0f} members (same set)",
        "redis-set": f"peak {n.grown('redis-set', ''):,.0f} members, final "
                     f"{n.grown('redis-set', '', 'final_entries'):,.0f}",
        "postgres": f"peak {n.grown('postgres', ''):,.0f} rows; "
                    f"{n.grown('postgres', '', 'final_kib'):,.0f} KiB on disk at the end",
    }
    wakeups = float(n.growth["wakeups"].max())
    verdicts["Growth"] = (
        f"Confirms: untrimmed, the stream keeps one entry per wakeup "
        f"({n.grown('redis-stream', False, 'final_entries'):,.0f} for {wakeups:,.0f} wakeups), "
        f"and trimming bounds it; the set holds one member per workflow "
        f"(peak {n.grown('redis-set', ''):,.0f}) with nothing to bound. Postgres holds one row "
        f"per workflow too, but its table keeps its size until vacuum."
    )

    # 3. Redis version
    seven = n.grown("redis-stream", True, "final_entries")
    eight = n.grown("redis-stream-8.2", True, "final_entries")
    table_rows["Redis version"] = {
        "redis-stream": ("trimmed to empty on 7.0 (MINID) as on 8.2 (ACKED)"
                         if seven == eight == 0 else
                         f"trimmed on 7.0 (MINID) to {seven:,.0f} entries; on 8.2 (ACKED) to "
                         f"{eight:,.0f}"),
        "redis-set-polled": "any",
        "redis-set": "any",
        "postgres": "n/a (PostgreSQL 15)",
    }
    verdicts["Redis version"] = (
        "Changes the answer: the stream's trimming no longer needs 8.2. Below 8.2 this project "
        "trims with a safe `MINID` below the oldest entry any group still owes, and "
        + ("the trimmed stream ends empty on Redis 7 as on 8.2."
           if seven == eight == 0 else
           f"the trimmed stream ends at {seven:,.0f} entries on Redis 7 as on 8.2."
           if seven == eight else
           f"the trimmed stream ends at {seven:,.0f} entries on Redis 7 against {eight:,.0f} "
           "on 8.2.")
    )

    # 4. Moving parts
    cells = {}
    for backend in COLUMNS:
        keys = n.keys(backend) if backend != "redis-set-polled" else n.keys("redis-set")
        distinct, requests, trips = n.per_pass(backend)
        parts = n.idle_parts(backend)
        unit = "statements" if backend == "postgres" else "scripts/commands"
        held = (f"{keys} table{'s' if keys != 1 else ''}" if backend == "postgres"
                else f"{keys} queue key{'s' if keys != 1 else ''}")
        cells[backend] = (f"{held}; a pass: {distinct} distinct {unit}, "
                          f"{requests:.1f} requests in {trips:.2f} round trips; idle: {parts} "
                          f"kind{'s' if parts != 1 else ''} of request")
    table_rows["Moving parts"] = cells
    s_distinct, s_requests, _ = n.per_pass("redis-stream")
    b_distinct, b_requests, _ = n.per_pass("redis-set")
    verdicts["Moving parts"] = (
        f"Confirms the structure and shows its price is small at run time: the stream's queue "
        f"is {n.keys('redis-stream')} keys beside its group and pending list, the set's "
        f"{n.keys('redis-set')}; yet a pass costs about the same on both "
        f"({s_requests:.1f} and {b_requests:.1f} requests, {s_distinct} and {b_distinct} kinds), "
        f"because this project joins each pass's moves into one script each "
        f"(take + claim, record, the workflow's standing, release + done). The stream's extra "
        f"parts show while idle: "
        f"{n.idle_parts('redis-stream')} kinds of request against {n.idle_parts('redis-set')}."
    )

    # 5. Losing a wakeup
    cells = {}
    for backend in COLUMNS:
        races, lost = n.wakeups_of(backend)
        cells[backend] = f"{lost:,.0f} lost of {races:,.0f} raced against a running pass"
    table_rows["Losing a wakeup"] = cells
    lost_all = sum(n.wakeups_of(b)[1] for b in COLUMNS if n.wakeups_of(b)[1] == n.wakeups_of(b)[1])
    verdicts["Losing a wakeup"] = (
        ("Confirms: " if lost_all == 0 else "Refutes: ")
        + f"{lost_all:,.0f} wakeups lost in all, whether a new entry per wakeup (the stream) or "
        "a receipt compared by `done` (the set, the Postgres row) is what keeps them."
    )

    # 6. Taking over a dead worker
    leases = sorted(set(n.takeover["lease_s"])) if len(n.takeover) else []
    lease = 1.0 if 1.0 in leases else (leases[0] if leases else math.nan)
    cells = {}
    shares = {}
    for backend in COLUMNS:
        found, bound = n.took_over(backend, lease)
        shares[backend] = found.estimate / bound if bound == bound and bound else math.nan
        within = span(found.lo, found.hi)
        cells[backend] = (f"{found.estimate:.2f} s" + (f" ({within})" if within else "")
                          + f" at a {lease:g} s lease"
                          + f", {shares[backend]:.0%} of lease + tick")
    table_rows[f"Taking over a dead worker ({TYPICAL})"] = cells
    slow = [b for b, r in shares.items() if r == r and r > 1.2]
    verdicts[f"Taking over a dead worker ({TYPICAL})"] = (
        "Confirms that both designs take over within about lease + tick"
        if not slow else
        f"Changes the answer for {', '.join(slow)}: a row that becomes visible because a lease "
        f"ran out rings no doorbell and sends no notification, so an idle reader only finds it "
        f"at its next look ({', '.join(f'{b} {shares[b]:.1f} times' for b in slow)} lease + "
        f"tick); the polled set, which looks every poll, and the stream, whose reclaimer looks "
        f"every tick, do not wait"
    ) + "."

    # 7. Scaling past one node
    row = "Scaling past one node"
    t = n.scale_out
    if t is None or not len(t):
        table_rows[row] = {b: "not in this run (no scale-out.csv)" for b in COLUMNS}
        verdicts[row] = "Not measured in this run: `python -m experiments run scale-out`."
    else:
        most, top = int(t["masters"].max()), int(t["shards"].max())

        def at(backend: str, masters: int, shards: int, column: str = "ceiling") -> float:
            rows = t[(t["backend"] == backend) & (t["masters"] == masters)
                     & (t["shards"] == shards)]
            return float(rows[column].iloc[0]) if len(rows) else math.nan

        def redis(cluster: str) -> str:
            one = at(cluster, 1, 1)
            cell = (f"a cluster with `shards` ≥ masters; projected ceiling, one master per "
                    f"machine: 1 master {one:,.0f}/s, {most} masters {at(cluster, most, 1):,.0f}/s"
                    f" on one slot")
            return cell + (f", {at(cluster, most, top):,.0f}/s at {top} shards" if top > 1
                           else " (shards not measured in this run)")

        table_rows[row] = {
            "redis-stream": redis("redis-stream-cluster"),
            "redis-set-polled": "as the set with its doorbell: the same keys and shards",
            "redis-set": redis("redis-set-cluster"),
            "postgres": "a bigger primary: the queue is one table on one server (not measured "
                        "in scale-out)",
        }
        stream = "redis-stream-cluster"
        x, slot = at(stream, 1, 1), at(stream, most, 1)
        verdicts[row] = (
            f"Adds a row the documents do not have. On one hash tag a Redis queue's own work "
            f"stays on one master: at {most} masters the stream's ceiling is {slot / x:.2f} "
            f"times one master's. The checkpoints leave that master (their keys carry each "
            f"workflow's own tag), yet it spends "
            f"{at(stream, most, 1, 'busiest_cpu_per_pass'):.3f} ms a pass against one "
            f"master's {at(stream, 1, 1, 'busiest_cpu_per_pass'):.3f}. "
            + (f"Split over {top} shards it is {at(stream, most, top) / x:.2f} times, short of "
               f"the {most} an even split at no extra cost would give, because the masters' "
               f"CPU per pass summed grows from {at(stream, 1, 1, 'nodes_cpu_per_pass'):.3f} ms "
               f"on one to {at(stream, most, top, 'nodes_cpu_per_pass'):.3f} ms."
               if top > 1 else "The sharded layout was not measured in this run.")
        )

    _cancel_and_result(n, table_rows, verdicts)
    frame_ = pandas.DataFrame(table_rows).T[list(COLUMNS)]
    frame_.columns = [COLUMNS[c] for c in frame_.columns]
    return frame_, verdicts


def _cancel_and_result(n: _Numbers, table_rows: dict[str, dict[str, str]],
                       verdicts: dict[str, str]) -> None:
    """7. Cancel and result (`lifecycle`): what a cancel costs and how soon it stops a pass,
    how soon a waiter hears an ending, and the cancel/finish race. The polled set is the set's
    code: its cancel and `result` never poll, so it reads the set's numbers."""
    cells = {}
    bad = 0.0
    for backend in COLUMNS:
        mine = "redis-set" if backend == "redis-set-polled" else backend
        race = n.raced(mine)
        if not race:
            cells[backend] = "not measured"
            continue
        bad += race["both"] + race["lost"]
        cells[backend] = (
            f"cancel {ms(n.lifecycle_of(mine, 'sleeper', 'cancel'))} (a sleeper), "
            f"{ms(n.lifecycle_of(mine, 'mid-step', 'cancel'))} (mid-step); a pass stops "
            f"{ms(n.lifecycle_of(mine, 'mid-step', 'after_effect'))} after its effect; "
            f"result {ms(n.lifecycle_of(mine, 'result', 'to_result'))} after the ending; "
            f"{race['both'] + race['lost']:,.0f} both or lost of {race['races']:,.0f} raced"
            + (" (the set's)" if mine != backend else ""))
    table_rows["Cancel and result (p50)"] = cells
    verdicts["Cancel and result (p50)"] = (
        "Not in the document (this project's): every design fences a running pass at its next "
        "write and wakes a waiter from the ending itself (Redis PUBLISH, Postgres NOTIFY), so "
        "no design waits on a poll; "
        + ("the race between a cancel and a pass's last write had one winner every time."
           if bad == 0 else f"{bad:,.0f} races had both or neither winning.")
        if any(c != "not measured" for c in cells.values()) else
        "Not in the document, and not measured in this run.")


def claims(where: Path | None = None) -> Any:
    """The core document's measurable claims: what it says, what was measured, the verdict."""
    import pandas

    n = _Numbers(where)
    rows = []

    idle = n.idle_at("redis-stream")
    cpu = n.idle_at("redis-stream", "worker_cpu") * 1000
    rows.append(("an idle worker costs nothing (stream)",
                 f"{idle:.1f} requests/s, {cpu:.1f} ms CPU/s",
                 f"nearly: not zero, {idle:.1f} requests a second (the reclaimer and the "
                 "timer; the read itself blocks)"))
    t = n.latency
    polled = t[(t["backend"] == "redis-set-polled") & t["poll_ms"].notna()]
    if len(polled):
        ratio = float((polled["p50"] / (polled["poll_ms"] / 2)).median())
        rows.append(("the poll interval is a floor under how fast anything starts (set)",
                     f"p50 / (poll / 2) = {ratio:.2f} across {len(polled)} polls",
                     "confirms: the median is half a poll" if 0.7 <= ratio <= 1.5
                     else "refutes: the median is not tied to the poll"))
    final = n.grown("redis-stream", False, "final_entries")
    wakeups = float(n.growth["wakeups"].max())
    rows.append(("XACK leaves the entry in the stream: it grows until trimmed",
                 f"{final:,.0f} entries left for {wakeups:,.0f} wakeups, untrimmed",
                 "confirms" if final >= 0.9 * wakeups else "refutes"))
    s = n.scaling

    def slope(backend: str, dimension: str) -> float:
        found = s[(s["backend"] == backend) & (s["dimension"] == dimension)]["slope"]
        return float(found.iloc[0]) if len(found) else math.nan

    rows.append(("a checkpoint is read whole, so an inbox has no bound",
                 f"claim + load slope against inbox entries: redis "
                 f"{slope('redis-stream', 'inbox'):.2f}, postgres {slope('postgres', 'inbox'):.2f}",
                 "confirms: the read grows with the inbox"
                 if slope("redis-stream", "inbox") > 0.3 else "refutes: the read stays flat"))
    def largest(backend: str, dimension: str) -> tuple[float, float]:
        """(the largest size measured, its median cost in ms)."""
        found = n.scaling_rows
        found = found[(found["backend"] == backend) & (found["dimension"] == dimension)
                      & (found["metric"] == "cost")]
        if not len(found):
            return math.nan, math.nan
        top = float(found["size"].max())
        return top, float(found[found["size"] == top]["value"].median())

    depth, stream_cancel = largest("redis-stream", "cancel")
    _, set_cancel = largest("redis-set", "cancel")
    rows.append(("cancelling a queued wakeup costs a scan on the stream",
                 f"cancel against queued workflows: slope stream "
                 f"{slope('redis-stream', 'cancel'):.2f}, set {slope('redis-set', 'cancel'):.2f}, "
                 f"postgres {slope('postgres', 'cancel'):.2f} (under {FLAT} either way reads "
                 f"as flat); at {depth:,.0f} queued the stream "
                 f"takes {ms(stream_cancel)}, the set {ms(set_cancel)}",
                 "confirms: the stream's cancel grows with the stream"
                 if slope("redis-stream", "cancel") > 0.5 else "refutes: the stream's cancel "
                 "does not grow with the stream"))
    races, lost = n.wakeups_of("redis-set")
    rows.append(("the set's receipt means no wakeup is lost",
                 f"{lost:,.0f} lost of {races:,.0f}", "confirms" if lost == 0 else "refutes"))
    return pandas.DataFrame(rows, columns=["claim", "measured", "verdict"])
