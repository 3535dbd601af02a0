"""`python -m experiments soak`: one worker process per store, a steady open-loop arrival of
small workflows for an hour, a fault every minute, and the worker's footprint sampled every few
seconds: does anything grow that should stay flat?

Each store gets a private server (`Servers.restartable`; SQLite a file), ONE worker agent and
one API agent that submits. The lab reads the worker from outside (`Soak.sample`): its memory,
descriptors and sockets, the server's clients, the queue's length and what has completed. The
faults cycle (`FAULTS`); none kills the worker, since its RSS is the point. Each metric's slope
over the second half (`summarise`) is what says flat or growing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import platform
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.harness.backends import BACKENDS, Backend, Place
from experiments.harness.lab import Agent, AgentFailed, Lab, cpu_calibration
from experiments.harness.servers import Restartable, Servers
from experiments.results import RESULTS, write

__all__ = ["FAULTS", "STORES", "Settings", "soak", "summarise"]

NAME = "soak"
TITLE = "soak: one worker per store for an hour, a fault a minute; does anything grow?"
STORES = ("redis-stream", "redis-set", "postgres", "sqlite")

#: The faults each store meets in turn, one every `fault_every` seconds. SQLite has no server
#: and no connection to cut: its fault is another process holding the file's write lock past
#: the worker's busy timeout (5 s), so the worker's writes fail as locked and it must come
#: back from that on its own, the error path a long run would otherwise never walk. The lock
#: is held `Settings.lock_hold_s` (8 s by default).
FAULTS: dict[str, tuple[str, ...]] = {
    "redis": ("connections-cut", "server-restart", "connections-cut", "server-restart-hard"),
    "postgres": ("connections-cut", "server-restart", "connections-cut", "server-restart-hard"),
    "sqlite": ("write-lock",),
}

#: (metric, unit) sampled for every store; `stream_length` and `redis_lag` only for the stream
#: scheduler, `connections` and `server_*` only where there is a server.
METRICS = (("rss", "MiB"), ("vm_data", "MiB"), ("fds", "descriptors"), ("connections", "sockets"),
           ("server_clients", "clients"), ("queue", "workflows"), ("submitted", "workflows"),
           ("completed", "workflows"), ("in_flight", "workflows"), ("stream_length", "entries"),
           ("redis_lag", "entries"), ("server_memory", "MiB"))


@dataclass(frozen=True)
class Settings:
    minutes: float = 60.0
    rate: float = 50.0
    fault_every_s: float = 60.0
    sample_s: float = 5.0
    nap_ms: int = 100
    lease_s: float = 5.0
    drain_s: float = 180.0
    lock_hold_s: float = 8.0
    seed: int = 24


# -- reading a process from outside -------------------------------------------------------------


def rss_mib(pid: int, field: str = "VmRSS") -> float | None:
    """The resident set of `pid` (or another `field` of its status, in kB), in MiB, or None if
    it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def sockets_to(pid: int, port: int) -> list[tuple[int, str]]:
    """The TCP sockets `pid` holds whose far end is `port`: (local port, state), any state."""
    inodes: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                parts = line.split()
                if len(parts) > 9 and parts[9] in inodes and \
                        int(parts[2].rsplit(":", 1)[1], 16) == port:
                    found.append((int(parts[1].rsplit(":", 1)[1], 16), parts[3]))
    return found


# -- one store's soak ---------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str
    at_s: float
    seconds: float
    detail: str


@dataclass
class Soak:
    """One store's hour: its agents, its arrivals, its faults and its samples."""

    lab: Lab
    backend: Backend
    settings: Settings
    place: Place
    server: Restartable | None
    report: Callable[[str], None]
    worker: Agent | None = None
    api: Agent | None = None
    began: float = field(default_factory=time.monotonic)
    submitted: int = 0
    completed: set[str] = field(default_factory=set)
    rows: list[dict[str, Any]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    submit_retries: int = 0
    gave_up: int = 0
    stopped_working: str | None = None
    server_version: str = ""

    @property
    def sqlite_path(self) -> Path:
        return Path(self.place.directory) / f"{self.place.tag}.db"

    def now_s(self) -> float:
        return time.monotonic() - self.began

    def base(self) -> dict[str, Any]:
        return {"experiment": NAME, "backend": self.backend.name,
                "scheduler": self.backend.scheduler, "store": self.backend.store,
                "server": "restartable" if self.server else "file",
                "server_version": self.server_version}

    # -- arrivals -----------------------------------------------------------------------------

    async def _submit(self, workflow: str) -> None:
        assert self.api is not None
        pause = 0.1
        for _ in range(120):
            try:
                await self.api.request("arrive", timeout=30, workflow=workflow, key="order",
                                       value={"nap_ms": self.settings.nap_ms})
                return
            except AgentFailed:
                if self.api.gone:
                    raise
                self.submit_retries += 1
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
        self.gave_up += 1

    async def arrivals(self, until_s: float) -> None:
        """Open loop: Poisson arrivals at `rate`, each sent in a task of its own, so a slow
        answer (a server restarting) delays no later arrival."""
        gaps = random.Random(self.settings.seed)
        tasks: set[asyncio.Task[None]] = set()
        next_at = self.now_s()
        for i in itertools.count():
            if next_at >= until_s:
                break
            delay = next_at - self.now_s()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self._submit(f"soak{self.place.tag}-{i}"))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            self.submitted += 1
            next_at += gaps.expovariate(self.settings.rate)
        if tasks:
            await asyncio.gather(*tasks)

    async def listen(self) -> None:
        assert self.worker is not None
        while True:
            message = await self.worker.events.get()
            if message.get("event") == "completed":
                self.completed.add(str(message["workflow"]))

    # -- faults -------------------------------------------------------------------------------

    async def faulting(self, until_s: float) -> None:
        kinds = itertools.cycle(FAULTS[self.backend.store])
        for n in itertools.count(1):
            at = n * self.settings.fault_every_s
            if at >= until_s:
                return
            await asyncio.sleep(max(0.0, at - self.now_s()))
            kind = next(kinds)
            began = self.now_s()
            try:
                detail = await self.fault(kind)
            except Exception as error:  # a fault that could not be done is noted, not fatal
                detail = f"failed: {type(error).__name__}: {error}"
            self.faults.append(Fault(kind, round(began, 2), round(self.now_s() - began, 3),
                                     detail))
            self.report(f"fault {kind}: {detail}")

    async def fault(self, kind: str) -> str:
        assert self.worker is not None
        if kind == "write-lock":
            return await asyncio.to_thread(_hold_write_lock, self.sqlite_path,
                                           self.settings.lock_hold_s)
        assert self.server is not None
        if kind == "connections-cut":
            ports = [p for p, _ in sockets_to(self.worker.process.pid, self.server.port)]
            return await asyncio.to_thread(_cut, self.server, ports)
        hard = kind.endswith("-hard")
        await asyncio.to_thread(self.server.stop, hard=hard)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(self.server.start)
        how = ("SIGKILL" if hard else "SIGTERM") if self.server.kind == "redis7" else (
            "immediate shutdown" if hard else "fast shutdown")
        return f"{how}, {'AOF' if self.server.kind == 'redis7' else 'WAL'}"

    # -- samples ------------------------------------------------------------------------------

    async def sampling(self, until_s: float) -> None:
        while self.now_s() < until_s:
            await self.sample()
            await asyncio.sleep(self.settings.sample_s - self.now_s() % self.settings.sample_s)

    async def sample(self) -> dict[str, float | None]:
        """One sample, read from outside the worker (every `sample_s` while the soak runs,
        and once after the drain): its RSS and its data mapping (`VmRSS`, `VmData` of
        `/proc/<pid>/status`: RSS grows into the mapping without the allocator asking the
        system for more), its open descriptors (`/proc/<pid>/fd`), its sockets to the
        server's port (its descriptors matched against `/proc/<pid>/net/tcp`, whatever their
        state, so a socket left half-closed counts), the server's own count of clients, the
        queue's length and what has completed."""
        assert self.worker is not None
        pid = self.worker.process.pid
        at = round(self.now_s(), 2)
        seen: dict[str, float | None] = {
            "rss": rss_mib(pid), "vm_data": rss_mib(pid, "VmData"), "fds": fds(pid),
            "submitted": self.submitted, "completed": len(self.completed),
            "in_flight": self.submitted - len(self.completed),
        }
        if self.server is not None:
            seen["connections"] = len(sockets_to(pid, self.server.port))
        seen |= await self._queue()
        if self.server is not None:
            with contextlib.suppress(Exception):
                seen |= await asyncio.to_thread(_server_side, self.server, self.place)
        with contextlib.suppress(AgentFailed):
            mark = await self.worker.request("mark", timeout=20)
            if not mark.get("working") and self.stopped_working is None:
                self.stopped_working = str(mark.get("worker_error"))
        units = dict(METRICS)
        for metric, value in seen.items():
            if value is not None:
                self.rows.append({**self.base(), "t_s": at, "metric": metric,
                                  "value": value, "unit": units[metric]})
        return seen

    async def _queue(self) -> dict[str, float | None]:
        """The queue's length, asked of the API process (not the worker being measured):
        what waits to be run or woken. A stream's entries are history until trimmed, so the
        stream scheduler's queue is what its group still owes (pending and not yet read) plus
        its sleepers; the stream's own length and Redis's `lag` are metrics of their own."""
        assert self.api is not None
        try:
            found = await self.api.request("footprint", timeout=20)
        except AgentFailed:
            return {}
        parts = {k: int(v) for k, v in found.get("parts", {}).items()}
        if self.backend.scheduler == "RedisStreamScheduler" and self.server is not None:
            owed = await asyncio.to_thread(_stream_owed, self.server,
                                           f"{{lab-{self.place.tag}}}:ready")
            if owed is None:
                return {"stream_length": parts.get("stream")}
            return {"queue": owed[0] + parts.get("sleeping", 0), "redis_lag": owed[1],
                    "stream_length": parts.get("stream")}
        return {"queue": sum(parts.values())}

    async def _trim(self) -> dict[str, Any] | None:
        """The worker's RSS (MiB) before and after it hands its allocator's free memory back
        (`malloc_trim`), asked after the drain: how much of the growth was memory the
        allocator kept free."""
        assert self.worker is not None
        try:
            said = await self.worker.request("trim", timeout=20)
        except AgentFailed:
            return None
        if not said.get("trimmed"):
            return None
        return {"rss_before": said["rss_kib_before"] / 1024,
                "rss_after": said["rss_kib_after"] / 1024}

    # -- the hour -----------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        settings = self.settings
        lease_ms = settings.lease_s * 1000
        async with contextlib.AsyncExitStack() as stack:
            self.api = await stack.enter_async_context(self.lab.agent(
                self.backend, self.place, lease_ms=lease_ms, role="client",
                housekeeping=False))
            self.worker = await stack.enter_async_context(self.lab.agent(
                self.backend, self.place, lease_ms=lease_ms, role="worker",
                housekeeping=True))
            await self.worker.request("work", body="soak", emit=["completed"], quiet=True,
                                      remember=False)
            listener = asyncio.create_task(self.listen())
            self.began = time.monotonic()
            until = settings.minutes * 60
            sampler = asyncio.create_task(self.sampling(until))
            faults = asyncio.create_task(self.faulting(until))
            try:
                await self.arrivals(until)
                await faults
                await sampler
                ended = self.now_s()
                deadline = time.monotonic() + settings.drain_s
                while time.monotonic() < deadline:
                    if len(self.completed) >= self.submitted - self.gave_up:
                        break
                    await asyncio.sleep(0.5)
                # Then the queue itself: a wakeup that came after its workflow ended (a fault's
                # retry) is answered a moment after the last completion, not left behind.
                while time.monotonic() < deadline:
                    if not (await self._queue()).get("queue"):
                        break
                    await asyncio.sleep(0.5)
                drained = self.now_s()
                last = await self.sample()  # after the drain: what is left behind
                trimmed = await self._trim()
            finally:
                for task in (listener, sampler, faults):
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
        return {"submitted": self.submitted, "completed": len(self.completed),
                "gave_up": self.gave_up, "submit_retries": self.submit_retries,
                "stopped_working": self.stopped_working,
                "arrivals_ended_s": round(ended, 1), "drained_s": round(drained, 1),
                "after_drain": last, "trim": trimmed,
                "faults": [f.__dict__ for f in self.faults]}


def _hold_write_lock(path: Path, hold_s: float) -> str:
    """Take the SQLite file's write lock in another connection and keep it `hold_s`."""
    with contextlib.closing(sqlite3.connect(path, timeout=30, isolation_level=None)) as db:
        db.execute("BEGIN IMMEDIATE")
        time.sleep(hold_s)
        db.execute("COMMIT")
    return f"write lock held {hold_s:g} s"


def _cut(server: Restartable, ports: list[int]) -> str:
    """Cut the worker's connections (by its local ports) on the server's side."""
    if not ports:
        return "no connections to cut"
    if server.kind == "redis7":
        import redis

        client = redis.Redis.from_url(server.url, socket_timeout=5)
        try:
            cut = sum(int(client.client_kill_filter(_id=None, addr=f"127.0.0.1:{port}"))
                      for port in ports)
        finally:
            client.close()
        return f"CLIENT KILL of {cut} of {len(ports)} connections"
    import psycopg

    with psycopg.connect(server.url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE client_port = ANY(%s)", (ports,)).fetchone()
    return f"pg_terminate_backend of {row[0] if row else 0} of {len(ports)} connections"


def _server_side(server: Restartable, place: Place) -> dict[str, float | None]:
    """The server's own count of client connections (all of this store's: the worker's and
    the API's, less this probe's own), and for Redis its memory."""
    if server.kind == "redis7":
        import redis

        client = redis.Redis.from_url(server.url, socket_timeout=5)
        try:
            info = client.info()
        finally:
            client.close()
        return {"server_clients": int(info["connected_clients"]) - 1,
                "server_memory": int(info["used_memory"]) / 2**20}
    import psycopg

    database = place.base.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(server.url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                           (database,)).fetchone()
    return {"server_clients": int(row[0]) if row else None}


def _stream_owed(server: Restartable, stream: str) -> tuple[int, int] | None:
    """What the stream's groups still owe (entries pending, plus entries after the group's
    last delivered one), and the `lag` Redis reports for them. The owed count is read from
    the entries themselves: Redis 7.0's `lag` (entries added less entries read) drifts up at
    each restart from the AOF, by thousands, though nothing is left unread."""
    import redis

    client = redis.Redis.from_url(server.url, socket_timeout=5)
    try:
        owed = lag = 0
        for group in client.xinfo_groups(stream):
            last = group["last-delivered-id"]
            last = last.decode() if isinstance(last, bytes) else str(last)
            unread = client.xrange(stream, f"({last}", "+", count=100_000) or []
            owed += int(group.get("pending") or 0) + len(unread)
            lag += int(group.get("lag") or 0)
        return owed, lag
    except redis.RedisError:
        return None
    finally:
        client.close()


# -- the summary and the run ----------------------------------------------------------------------


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    if sxx == 0:
        return None
    return sum((t - mx) * (v - my) for t, v in points) / sxx * 3600


def summarise(rows: list[dict[str, Any]], until_s: float) -> dict[str, dict[str, Any]]:
    """Per metric: the first and last sample of the soak proper (arrivals running), the
    least, the most, and the slope per hour over its second half (a least-squares line),
    which is what says flat or growing."""
    series: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        if row["metric"] != "fault" and float(row["t_s"]) <= until_s + 1:
            series.setdefault(row["metric"], []).append((float(row["t_s"]),
                                                         float(row["value"])))
    out = {}
    for metric, points in series.items():
        points.sort()
        second = [p for p in points if p[0] >= points[-1][0] / 2]
        slope = slope_per_hour(second)
        out[metric] = {"start": points[0][1], "end": points[-1][1],
                       "min": min(v for _, v in points), "max": max(v for _, v in points),
                       "slope_per_hour_second_half": None if slope is None else round(slope, 3),
                       "samples": len(points)}
    return out


async def one_store(lab: Lab, backend: Backend, settings: Settings,
                    report: Callable[[str], None], running: dict[str, Soak]) -> dict[str, Any]:
    kind = {"redis": "redis7", "postgres": "postgres"}.get(backend.store)
    with contextlib.ExitStack() as servers:
        server = (servers.enter_context(lab.servers.restartable(kind, persistence="aof"))
                  if kind is not None else None)
        known = await asyncio.to_thread(lambda: server.server) if server else None
        async with lab.place(backend, known) as (place, _):
            soak = Soak(lab, backend, settings, place, server, report,
                        server_version=known.version if known else sqlite3.sqlite_version)
            running[backend.name] = soak
            try:
                outcome = await soak.run()
            finally:
                if server is not None:  # the place is dropped through it
                    await asyncio.to_thread(server.start)
            return outcome


async def soak(settings: Settings, names: list[str], *, where: Path = RESULTS,
               command: str = "") -> int:
    """Soak every store of `names` side by side; write `soak.csv`/`soak.json` to `where` as it
    goes (every minute) and at the end; the number of stores that lost or left something."""
    from experiments.harness.provenance import git, versions

    began = datetime.now(UTC)
    # The revision the run starts from: a commit made while it runs is not what it measured.
    revision = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--", "durability", "experiments"))
    calibration = await asyncio.to_thread(cpu_calibration)
    servers = Servers(("binary",))
    lab = Lab(servers, quick=settings.minutes < 60)
    running: dict[str, Soak] = {}
    outcomes: dict[str, dict[str, Any]] = {}
    until = settings.minutes * 60

    def say(name: str) -> Callable[[str], None]:
        return lambda text: print(f"{datetime.now(UTC):%H:%M:%S} {name}: {text}", flush=True)

    def save(final: bool) -> None:
        rows = [r for s in running.values() for r in s.rows]
        for s in running.values():
            rows += [{**s.base(), "t_s": f.at_s, "metric": "fault", "fault": f.kind,
                      "value": f.seconds, "unit": "s"} for f in s.faults]
        stores = {}
        for name, s in running.items():
            stores[name] = {"summary": summarise(s.rows, until),
                            **(outcomes.get(name) or {"running": not final})}
        meta = {
            "experiment": NAME, "title": TITLE, "about": (__doc__ or "").strip(),
            "command": command or "python -m experiments soak",
            "mode": "quick" if settings.minutes < 60 else "full",
            "settings": settings.__dict__,
            "faults_cycle": {k: list(v) for k, v in FAULTS.items()},
            "started": began.isoformat(timespec="seconds"),
            "elapsed_seconds": round((datetime.now(UTC) - began).total_seconds(), 1),
            "finished": final,
            "git_revision": revision, "git_dirty": dirty,
            "cores": os.cpu_count(), "machine": platform.platform(),
            "cpu_calibration_seconds": {"at_start": calibration},
            "versions": versions(), "stores": stores,
        }
        write(NAME, rows, meta, where)

    async def saving() -> None:
        while True:
            await asyncio.sleep(60)
            save(final=False)
            for name, s in running.items():
                say(name)(f"t={s.now_s():.0f}s submitted {s.submitted} completed "
                          f"{len(s.completed)} faults {len(s.faults)}")

    async def one(name: str) -> None:
        try:
            outcomes[name] = await one_store(lab, BACKENDS[name], settings, say(name), running)
        except Exception as error:
            outcomes[name] = {"error": f"{type(error).__name__}: {error}"}
            say(name)(f"failed: {outcomes[name]['error']}")

    saver = asyncio.create_task(saving())
    try:
        await asyncio.gather(*(one(name) for name in names))
    finally:
        saver.cancel()
        with contextlib.suppress(BaseException):
            await saver
        save(final=True)
        await asyncio.to_thread(servers.close)
        import shutil

        shutil.rmtree(lab.scratch, ignore_errors=True)
    bad = 0
    for name in names:
        outcome = outcomes.get(name, {})
        ok = "error" not in outcome and outcome.get("completed") == outcome.get("submitted") \
            and not outcome.get("gave_up") and outcome.get("stopped_working") is None
        bad += not ok
        say(name)(("ok " if ok else "PROBLEM ") + str({k: outcome.get(k) for k in (
            "submitted", "completed", "gave_up", "stopped_working", "error")}))
    return bad
