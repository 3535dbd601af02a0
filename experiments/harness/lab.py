"""The harness every experiment shares, written once: agents, places, counters, time.

- `Agent`: a process the lab starts and speaks to (`protocol`), ours or a rival's.
- `Lab.place(backend)`: an isolated corner of the backend's server for one run, dropped after.
- `Lab.agent(...)`: an agent with a store of that place open.
- `Counters`: the server's own counts and CPU, read before and after a window.
- `cpu_calibration()`: this machine's speed right now, recorded in every run's metadata.

An experiment never starts a process, a server or a clock of its own: it asks the lab.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.harness.backends import Backend, Place
from experiments.harness.servers import Server, Servers

__all__ = ["Agent", "AgentFailed", "Counters", "Lab", "Skipped", "cpu_calibration", "percentile"]

ROOT = Path(__file__).resolve().parents[2]
#: The rivals' virtualenv (their queues conflict with ours on driver versions: arq needs
#: redis-py below 6), made by `python3 dev.py lab` or `python -m experiments rivals`.
RIVALS_VENV = ROOT / ".venv-rivals"
#: What the rivals' virtualenv holds: their own queues and the drivers they need, pinned to
#: versions that work together (arq wants redis-py below 6, which is why they live apart).
RIVALS = ["saq==0.26.4", "arq==0.28.0", "streaq==7.2.0", "pgqueuer==1.6.0",
          "procrastinate==3.10.0", "redis==5.3.1", "hiredis==3.5.0", "coredis==6.9.0",
          "asyncpg==0.32.0", "psycopg[binary]==3.3.9", "psycopg-pool==3.3.3"]


class AgentFailed(RuntimeError):
    """An agent answered a request with an error, or died."""


class Skipped(Exception):
    """A configuration the backend cannot answer yet (its store lacks the feature asked
    about): the runner records it beside the run's skipped backends, with its reason, rather
    than as a failure or a row."""


class Agent:
    """One agent process: `request` sends an op and waits for its reply; `events` yields the
    live events it sends meanwhile. Ours (`experiments.harness.agent`) or a rival's
    (`experiments.harness.rivals.<name>`, in the rivals' virtualenv). Every agent is killed when its
    block ends, and dies with the lab if the lab is killed."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process = process
        self.name = name
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, python: str, module: str, name: str) -> Agent:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
            python, "-m", module, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=None, env=env, cwd=str(ROOT),
            limit=1 << 26,
            # A session of its own: the SIGINT a terminal's Ctrl-C or a kernel's interrupt
            # sends the lab's process group is the lab's to handle (it stops its agents as it
            # unwinds); an agent still importing would die of it with a traceback.
            start_new_session=True,
        ))
        try:
            # Shielded: a start cancelled halfway (an interrupt) has asyncio kill and reap the
            # child behind its child watcher's back, which then warns into the notebook.
            process = await asyncio.shield(starting)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                started = await starting
                started.kill()
                await started.wait()
            raise
        return cls(process, name)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            while True:
                line = await self.process.stdout.readline()
                if not line:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue  # a stray print in a rival's code
                if "reply" in message:
                    waiter = self._waiting.pop(int(message.get("id") or 0), None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(message)
                elif "event" in message:
                    self.events.put_nowait(message)
        finally:
            gone = AgentFailed(f"agent {self.name} exited ({self.process.returncode})")
            for waiter in self._waiting.values():
                if not waiter.done():
                    waiter.set_exception(gone)
            self._waiting.clear()

    async def request(self, op: str, timeout: float = 600.0, **fields: Any  # noqa: ASYNC109
                      ) -> dict[str, Any]:
        """Send `op` and return its reply; `AgentFailed` if it answered with an error."""
        if self.process.returncode is not None or self._reader.done():
            raise AgentFailed(f"agent {self.name} is not running")
        ident = next(self._ids)
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = waiter
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, "id": ident, **fields}).encode() + b"\n")
        await self.process.stdin.drain()
        try:
            reply = await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            raise AgentFailed(f"agent {self.name} did not answer {op!r} in {timeout:g} s"
                              ) from None
        if "error" in reply:
            raise AgentFailed(f"agent {self.name}, {op}: {reply['error']}")
        return reply

    async def event(self, kind: str, workflow: str | None = None,
                    timeout: float = 60.0) -> dict[str, Any]:  # noqa: ASYNC109
        """The next live event of `kind` (for `workflow`, if given), dropping others."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentFailed(f"agent {self.name}: no {kind!r} event in {timeout:g} s")
            message = await asyncio.wait_for(self.events.get(), left)
            if message["event"] == kind and (workflow is None or message.get("workflow") ==
                                             workflow):
                return message

    @property
    def gone(self) -> bool:
        """Whether the process has ended (its output closed), reaped or not yet."""
        return self.process.returncode is not None or self._reader.done()

    def kill(self) -> int:
        """SIGKILL it now (no shutdown, nothing sent to the server); the moment, in ns."""
        at = time.time_ns()
        if self.process.returncode is None:
            self.process.kill()
        return at

    async def close(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.request("close", timeout=10), 10)
            if self.process.returncode is None:
                self.process.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.process.wait(), 10)
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


# -- server counters ----------------------------------------------------------------------------


@dataclass
class Reading:
    at: float
    requests: dict[str, int]
    cpu: float | None


class Counters:
    """A server's own counts of what it was asked, and its CPU. Redis: `INFO commandstats`
    (commands run, a script's inner commands included) less our own INFO calls. Postgres: the
    run's database in `pg_stat_statements` if loaded (statements by first words), else
    `pg_stat_database` (transactions)."""

    def __init__(self, server: Server, database: str | None = None) -> None:
        self.server = server
        self.database = database

    async def read(self) -> Reading:
        return await asyncio.to_thread(self._read)

    def _read(self) -> Reading:
        kind = self.server.kind
        if kind == "cluster":  # every node counts its own: not one server's figure
            return Reading(time.time(), {}, self.server.cpu())
        requests = self._redis() if kind.startswith("redis") else self._postgres()
        return Reading(time.time(), requests, self.server.cpu())

    def _redis(self) -> dict[str, int]:
        import redis

        client = redis.Redis.from_url(self.server.url, socket_timeout=5)
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        return {name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()}

    def _postgres(self) -> dict[str, int]:
        import psycopg

        base = self.server.url.rsplit("/", 1)[0]
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            loaded = conn.execute(
                "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
            ).fetchone()
            if loaded is None and self.server.private:  # never changed on a shared server
                with contextlib.suppress(psycopg.Error):
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                    loaded = (1,)
            counts: dict[str, int] = {}
            if loaded is not None:
                try:
                    rows = conn.execute(
                        "SELECT s.query, s.calls FROM pg_stat_statements s JOIN pg_database d"
                        " ON d.oid = s.dbid WHERE d.datname = %s", (self.database,)
                    ).fetchall()
                    for query, calls in rows:
                        words = " ".join(str(query).split()[:3])
                        counts[f"stmt {words}"] = counts.get(f"stmt {words}", 0) + int(calls)
                except psycopg.Error:
                    pass
            row = conn.execute(
                "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = %s",
                (self.database,),
            ).fetchone()
            if row is not None:
                counts["xact_commit"], counts["xact_rollback"] = int(row[0]), int(row[1])
            # The next transaction id, read without taking one: how many transactions wrote
            # since the last reading, exactly and at once (pg_stat_database's counts reach it
            # up to a second late). The whole server's: counted on private servers only.
            if self.server.private:
                (xid,) = conn.execute(
                    "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
                ).fetchone() or (0,)
                counts["writes"] = int(xid)
        return counts

    @staticmethod
    def delta(before: Reading, after: Reading) -> tuple[dict[str, int], float | None]:
        """What the server did between two readings (our own probes left out), and its CPU."""
        ours = ("info", "client|setinfo", "hello", "client", "ping", "select")
        names = set(after.requests) | set(before.requests)
        delta = {n: after.requests.get(n, 0) - before.requests.get(n, 0) for n in names
                 if n not in ours and not n.startswith("stmt SELECT s.query")}
        cpu = None if before.cpu is None or after.cpu is None else after.cpu - before.cpu
        return {n: v for n, v in sorted(delta.items()) if v}, cpu


def server_requests(counts: dict[str, int], kind: str) -> int:
    """One total from a server's counts: Redis commands; Postgres statements if
    pg_stat_statements counted them, else transactions."""
    if kind.startswith("redis") or kind == "cluster":
        return sum(counts.values())
    statements = [v for n, v in counts.items() if n.startswith("stmt ")]
    if statements:
        return sum(statements)
    return counts.get("xact_commit", 0) + counts.get("xact_rollback", 0)


# -- the lab ----------------------------------------------------------------------------------


def cpu_calibration(n: int = 5_000_000, repeat: int = 3) -> float:
    """Seconds this machine takes for a fixed pure-Python loop (best of `repeat`). This kind
    of VM's speed moves by up to 2x between spells; a run's figures are read against it."""
    best = math.inf
    for _ in range(repeat):
        began = time.perf_counter()
        total = 0
        for i in range(n):
            total += i
        best = min(best, time.perf_counter() - began)
    return round(best, 4)


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Lab:
    """What an experiment gets: the servers, whether this is a quick run, and the means to
    start agents in isolated places."""

    servers: Servers
    quick: bool
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lab-files-")))
    _serial: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _scope: contextlib.AsyncExitStack | None = None
    _kept: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def scope(self) -> AsyncIterator[None]:
        """While this is open, places and agents asked for with `keep=True` are made once and
        shared by every configuration (one backend's, say), then closed together; starting a
        process per configuration would cost more than many measurements take."""
        stack = contextlib.AsyncExitStack()
        self._scope, self._kept = stack, {}
        try:
            yield
        finally:
            self._scope, self._kept = None, {}
            await stack.aclose()

    @contextlib.asynccontextmanager
    async def _keep(self, key: tuple[Any, ...], make: Any) -> AsyncIterator[Any]:
        if self._scope is None:
            async with make as made:
                yield made
            return
        if key not in self._kept:
            self._kept[key] = await self._scope.enter_async_context(make)
        yield self._kept[key]

    def branch(self) -> Lab:
        """A lab for work run beside this one's: the same servers and scratch folder, places
        and agents of its own (a tag of its own, a `scope` of its own)."""
        # "x" keeps a branch's tags ("<tag>3x1") apart from this lab's ("<tag>31").
        return Lab(self.servers, self.quick, tag=f"{self.fresh_tag()}x", scratch=self.scratch)

    def server(self, backend: Backend) -> Server | None:
        return None if backend.server is None else self.servers.get(backend.server)

    def fresh_tag(self) -> str:
        return f"{self.tag}{next(self._serial)}"

    @contextlib.asynccontextmanager
    async def place(self, backend: Backend, server: Server | None = None, *, keep: bool = False
                    ) -> AsyncIterator[tuple[Place, Server | None]]:
        """A corner of `backend`'s server (or of `server`) for one run (a fresh namespace,
        queue, database or file), removed after (with `keep`, shared within the `scope` and
        removed when it closes)."""
        if keep:
            key = ("place", backend.name, id(server))
            async with self._keep(key, self._place(backend, server)) as kept:
                yield kept
            return
        async with self._place(backend, server) as made:
            yield made

    @contextlib.asynccontextmanager
    async def _place(self, backend: Backend, server: Server | None
                     ) -> AsyncIterator[tuple[Place, Server | None]]:
        server = server or self.server(backend)
        tag = self.fresh_tag()
        if backend.server is not None and server is None:
            raise AgentFailed(f"{backend.name}: no {backend.server} server")
        if server is None or server.kind != "postgres":
            try:
                yield Place(server.url if server else "", tag, str(self.scratch)), server
            finally:
                if server is not None and not server.private:  # a private one dies with the run
                    await asyncio.to_thread(_redis_forget, server, tag)
            return
        database = f"lab_{tag}"
        base = server.url.rsplit("/", 1)[0]
        await asyncio.to_thread(_postgres_admin, server.url, f'CREATE DATABASE "{database}"')
        try:
            yield Place(f"{base}/{database}", tag, str(self.scratch)), server
        finally:
            await asyncio.to_thread(
                _postgres_admin, server.url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'
            )

    @contextlib.asynccontextmanager
    async def agent(self, backend: Backend, place: Place, *, keep: bool = False,
                    lease_ms: float = 30_000, poll_ms: float | None = None,
                    housekeeping: bool = True, variant: str = "default", role: str = "worker",
                    options: str = "") -> AsyncIterator[Agent]:
        """An agent process with `backend`'s store open in `place` (with `keep`, one per set of
        settings for the whole `scope`); `options` are extra URL options (for a rival, what
        the experiment asks of its settings, in the same `name=value&...` form)."""
        make = self._agent(backend, place, lease_ms=lease_ms, poll_ms=poll_ms,
                           housekeeping=housekeeping, variant=variant, role=role, options=options)
        if keep:
            key = ("agent", backend.name, place.tag, lease_ms, poll_ms, housekeeping, variant,
                   role, options)
            async with self._keep(key, make) as kept:
                yield kept
            return
        async with make as made:
            yield made

    @contextlib.asynccontextmanager
    async def _agent(self, backend: Backend, place: Place, *, lease_ms: float,
                     poll_ms: float | None, housekeeping: bool, variant: str, role: str,
                     options: str) -> AsyncIterator[Agent]:
        if backend.rival is not None:
            python = rivals_python()
            if python is None:
                raise AgentFailed(
                    "the rivals' virtualenv is missing: python -m experiments rivals")
            agent = await Agent.start(python, f"experiments.harness.rivals.{backend.rival}",
                                      f"{backend.name}/{role}")
        else:
            agent = await Agent.start(sys.executable, "experiments.harness.agent",
                                      f"{backend.name}/{role}")
        try:
            # A backend of someone's own names what opens its store; the agent imports it.
            theirs = {"opener": backend.opener, "path": backend.path} if backend.registered \
                else {}
            await agent.request(
                "open", url=backend.url(place, options), base=place.base, tag=place.tag,
                lease_ms=lease_ms, poll_ms=poll_ms, housekeeping=housekeeping,
                variant=variant, role=role, options=options, timeout=120, **theirs,
            )
            yield agent
        finally:
            await agent.close()


def _redis_forget(server: Server, tag: str) -> None:
    """Delete a place's keys from a Redis the lab did not start (the user's own, or the one on
    6379): its namespace `lab-<tag>` as ours and the rivals' key it (`lab-<tag>`,
    `lab-<tag>:...`, `{lab-<tag>}:...`, `saq:job:lab-<tag>:...`), and nothing else. Without
    this each run left thousands of keys behind, the namespace's indexes with no ttl at all."""
    import redis
    import redis.cluster

    client: Any
    if server.kind == "cluster":
        client = redis.cluster.RedisCluster.from_url(server.url, socket_timeout=10)
    else:
        client = redis.Redis.from_url(server.url, socket_timeout=10)
    try:
        # One walk of the keyspace; arq names its queue's key after the queue alone.
        keys = [*client.scan_iter(match=f"*lab-{tag}[:}}]*", count=1000), f"lab-{tag}"]
        pipe = client.pipeline(transaction=False)
        for key in keys:  # a command a key: on a cluster the keys sit in many slots
            pipe.unlink(key)
        pipe.execute()
    finally:
        client.close()


def _postgres_admin(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


def rivals_python() -> str | None:
    """The rivals' interpreter, if their virtualenv was made."""
    python = RIVALS_VENV / "bin" / "python"
    return str(python) if python.exists() else None
