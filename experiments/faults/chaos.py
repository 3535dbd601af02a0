"""`python -m experiments chaos [--quick]`: thousands of workflows over several worker
processes and an API process while workers are SIGKILLed, store connections cut and servers
restarted at random moments; then an audit of what came through (`Chaos.audit`).

Each store runs on a private server of its own (`Servers.restartable`: a `redis-server` or a
Postgres from `initdb`, on a spare loopback port), so it can be restarted freely; the shared
servers on 6379 and 5432 are never touched. A Redis restarted without persistence loses what
it held, and that loss must be detected, never silent; any other loss fails the run (exit
status 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import platform
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from experiments.harness.backends import BACKENDS, Backend, Place
from experiments.harness.clusters import Replicated, replicated
from experiments.harness.lab import Agent, AgentFailed, Lab, cpu_calibration
from experiments.harness.servers import Restartable, Servers
from experiments.results import RESULTS, write

__all__ = ["CONFIGURATIONS", "PROFILES", "Profile", "chaos", "main_async", "run_one"]

NAME = "chaos"
TITLE = "chaos: kills, cuts and restarts under load, then an audit"

#: (backend, Redis persistence) pairs, in the order a run takes them, and what each meets
#: (`Chaos.menu`):
#:
#: - `redis-stream`, `redis-set` with `aof`: worker SIGKILLs, `CLIENT KILL`, Redis SIGKILLed or
#:   stopped and started again. AOF runs with `appendfsync always`, so an acknowledged write is
#:   on disk; with `everysec` a SIGKILL loses up to two seconds of acknowledged writes when the
#:   disk is busy, a loss of Redis's, not of this library's;
#: - `redis-stream`, `redis-set` with `none`: the same, and one restart without persistence (a
#:   wipe) instead of the others;
#: - `postgres`: worker SIGKILLs, `pg_terminate_backend`, Postgres restarted (immediate or fast
#:   shutdown);
#: - `sqlite`: worker SIGKILLs only (no server to restart, no connection to cut);
#: - `redis-stream-cluster` on 3 masters with a replica each (`clusters.Replicated`): worker
#:   SIGKILLs, `CLIENT KILL`, and a master SIGKILLed so its replica is promoted (then started
#:   again, as a replica). With `wait` every acknowledged write waits for a replica
#:   (`replicas=1`), so nothing acknowledged may be lost; with `nowait` a loss is allowed if the
#:   audit finds it (the store cannot know).
CONFIGURATIONS: tuple[tuple[str, str], ...] = (
    ("redis-stream", "aof"), ("redis-stream", "none"), ("redis-set", "aof"),
    ("redis-set", "none"), ("postgres", "-"), ("sqlite", "-"),
    ("redis-stream-cluster", "wait"), ("redis-stream-cluster", "nowait"),
)
#: The queue's shards on the cluster: one per master, so a master's death takes a part of it.
SHARDS = 3
#: What the durable arm adds to the store's URL: a write returns once a replica has it.
WAITING = "replicas=1&replicas_timeout_ms=1000"
#: How long a master about to be killed runs cut off from its replica (`Chaos._failover`).
CUT_OFF_S = 0.3
#: Why the audit allows a workflow of the `nowait` arm to be missing.
FAILED_OVER = "acknowledged, then lost in a failover without WAIT (found by the audit)"


@dataclass(frozen=True)
class Profile:
    """How big a run is: workflows submitted (at `rate` a second), worker processes, the mean
    gap between faults, and how long the run may take to finish after the last submission."""

    name: str
    workflows: int
    workers: int
    rate: float
    fault_every_s: float
    finish_s: float
    lease_s: float = 2.0
    seed: int = 15


PROFILES = {
    "ci": Profile("ci", workflows=120, workers=3, rate=12.0, fault_every_s=1.2, finish_s=40),
    "quick": Profile("quick", workflows=400, workers=3, rate=20.0, fault_every_s=1.5,
                     finish_s=60),
    "full": Profile("full", workflows=2500, workers=4, rate=20.0, fault_every_s=2.0,
                    finish_s=120),
}


# -- the plan -----------------------------------------------------------------------------------


#: The most times a workflow's flaky step fails and still completes by the workers' retries
#: alone: their policy allows one more attempt than that.
MOST_FAILS = 2
#: A workflow whose step fails this often runs out of attempts: it fails for good until the
#: lab retries it (`durable.retry`), after which its next attempt succeeds.
DOOMED = MOST_FAILS + 1


@dataclass
class Plan:
    """One workflow's shape (what `bodies.chaos` reads from its order) and its fate."""

    workflow: str
    segments: int
    naps_ms: list[int]
    approval: bool
    messages: int
    fails: int
    hold_ms: int = 0
    submitted_at: int | None = None  # ns: when its order was acknowledged
    sent_at: int | None = None  # ns: when the request that was acknowledged was sent
    completed_at: int | None = None
    lost: str | None = None  # why, when the lab knows it is gone (a detected wipe)
    failures: int = 0
    retries_sent: int = 0
    operator_retries: int = 0  # durable.retry calls that answered True
    watched: bool = False  # a watcher is retrying it while it stands failed
    delivered: list[str] = field(default_factory=list)  # the inbox keys the API was given

    def order(self, log: str, store: str, counters: str) -> dict[str, Any]:
        return {"segments": self.segments, "naps_ms": self.naps_ms, "approval": self.approval,
                "messages": self.messages, "fails": self.fails, "hold_ms": self.hold_ms,
                "log": log, "store": store,
                "counters": counters}

    def expected_keys(self) -> set[str]:
        keys = {"order", "done"}
        for i in range(self.segments):
            keys |= {f"step:{i}", f"count:{i}"}
            if self.naps_ms[i] > 0:
                keys.add(f"nap:{i}")
        if self.approval:
            keys.add("approved")
        if self.fails:
            keys.add("flaky")
        return keys


def plans(profile: Profile, tag: str) -> list[Plan]:
    """The run's workflows, drawn from the profile's seed. The workload is `bodies.chaos`:
    steps whose external effect is a line in a log file, a `transact` that counts in the store
    itself, sleeps, an approval, inbox messages, and a step that fails on purpose its first
    attempts, retried by the workers' own policy (`work(retry=)`: a backoff, then another
    attempt, the count kept in the store). A few (`DOOMED`) fail once more than the policy
    allows, fail for good, and are brought back as an operator would (`Chaos._retry`)."""
    rng = random.Random(profile.seed)
    made = []
    for i in range(profile.workflows):
        segments = rng.choice((1, 2, 2, 3))
        made.append(Plan(
            workflow=f"cx{tag}-{i}",
            segments=segments,
            naps_ms=[rng.choice((0, rng.randint(20, 400))) for _ in range(segments)],
            approval=rng.random() < 0.5,
            messages=rng.choice((0, 0, 1, 2, 3)),
            fails=rng.choice((0, 0, 0, 0, 0, 0, 1, 1, MOST_FAILS, DOOMED)),
            hold_ms=rng.choice((0, 5, 20, 50)),
        ))
    return made


# -- faults -------------------------------------------------------------------------------------


@dataclass
class Fault:
    kind: str  # worker-kill | connections-cut | server-restart | wipe
    at: int  # ns
    until: int  # ns: when the fault was over (the server back, the worker replaced)
    detail: str = ""
    pid: int | None = None


class Store:
    """What the chaos run does to one store from outside: cut its connections, restart its
    server, read the counters the `transact` steps kept in it."""

    def __init__(self, backend: Backend, place: Place, server: Restartable | None,
                 counters: str, sqlite_path: Path | None,
                 cluster: Replicated | None = None) -> None:
        self.backend, self.place, self.server = backend, place, server
        self.counters, self.sqlite_path = counters, sqlite_path
        self.cluster = cluster

    @property
    def url(self) -> str:
        return self.place.base

    async def prepare(self) -> None:
        if self.backend.store == "postgres":
            await asyncio.to_thread(self._postgres, f"CREATE TABLE IF NOT EXISTS {self.counters}"
                                    " (workflow text PRIMARY KEY, n integer NOT NULL)")
        elif self.backend.store == "sqlite":
            import sqlite3

            assert self.sqlite_path is not None
            with contextlib.closing(sqlite3.connect(self.sqlite_path)) as db, db:
                db.execute(f"CREATE TABLE IF NOT EXISTS {self.counters} "
                           "(workflow TEXT PRIMARY KEY, n INTEGER NOT NULL)")

    def _postgres(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(statement, params or None)
            return list(cursor.fetchall()) if cursor.description else []

    async def cut(self) -> int:
        """Terminate every client connection but our own; how many went."""
        if self.cluster is not None:
            import redis.asyncio as redis

            cut = 0
            for port in self.cluster.roles():
                client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
                try:
                    cut += int(await client.client_kill_filter(_type="normal", skipme=True))
                finally:
                    await client.aclose()
            return cut
        if self.backend.store == "redis":
            import redis.asyncio as redis

            client = redis.Redis.from_url(self.url.split("?")[0], socket_timeout=5)
            try:
                return int(await client.client_kill_filter(_type="normal", skipme=True))
            finally:
                await client.aclose()
        if self.backend.store == "postgres":
            rows = await asyncio.to_thread(
                self._postgres, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            return int(rows[0][0])
        raise ValueError(f"{self.backend.name} has no connections to cut")

    async def counts(self, workflows: list[str]) -> dict[str, int]:
        """Each workflow's counter as the store holds it (missing: not there)."""
        if self.cluster is not None:
            from redis.asyncio.cluster import RedisCluster

            cluster = RedisCluster.from_url(self.url.split("?")[0], socket_timeout=10)
            try:
                held: dict[str, int] = {}
                for w in workflows:  # each counter in its workflow's own slot
                    value = await cluster.get(f"{self.counters}:{{{w}}}")
                    if value is not None:
                        held[w] = int(value)
                return held
            finally:
                await cluster.aclose()
        if self.backend.store == "redis":
            import redis.asyncio as redis

            client = redis.Redis.from_url(self.url.split("?")[0], socket_timeout=10)
            try:
                found: dict[str, int] = {}
                for start in range(0, len(workflows), 500):
                    part = workflows[start:start + 500]
                    values = await client.mget([f"{self.counters}:{{{w}}}" for w in part])
                    found |= {w: int(v) for w, v in zip(part, values, strict=True)
                              if v is not None}
                return found
            finally:
                await client.aclose()
        if self.backend.store == "postgres":
            rows = await asyncio.to_thread(self._postgres,
                                           f"SELECT workflow, n FROM {self.counters}")
            return {str(w): int(n) for w, n in rows}
        import sqlite3

        assert self.sqlite_path is not None
        with contextlib.closing(sqlite3.connect(self.sqlite_path, timeout=30)) as db:
            return {str(w): int(n) for w, n in
                    db.execute(f"SELECT workflow, n FROM {self.counters}")}


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Worker:
    agent: Agent
    serial: int
    killed: bool = False
    started_at: int = field(default_factory=time.time_ns)


class Chaos:
    """One configuration's run: the processes, the faults, the bookkeeping, the audit."""

    def __init__(self, lab: Lab, backend: Backend, persistence: str, profile: Profile,
                 store: Store, log: Path, progress: Callable[[str, int, int], None],
                 *, watch_wipes: bool = True) -> None:
        self.lab, self.backend, self.persistence = lab, backend, persistence
        #: False only for the audit's own control: a lab that never asks whether the store
        #: was wiped, whose loss the audit must then report as undetected.
        self.watch_wipes = watch_wipes
        self.profile, self.store, self.log = profile, store, log
        self.progress = progress
        self.rng = random.Random(profile.seed + 1)
        self.plans = {p.workflow: p for p in plans(profile, lab.fresh_tag())}
        self.faults: list[Fault] = []
        self.workers: list[Worker] = []
        self.stack = contextlib.AsyncExitStack()
        self.api: Agent | None = None
        self.wipe_at: int | None = None  # ns: when the server holding the data was gone, wiped
        self.wipe_back: int | None = None
        self.detected: list[dict[str, Any]] = []  # verify() answers that said "wiped"
        self.submitting = True
        self.unexpected_failures: Counter[str] = Counter()
        self.dead: set[str] = set()  # workflows a worker found out of attempts
        self.api_retries = 0
        self.api_wipes: int | None = None  # the API scheduler's count of wipes, as last heard
        self.serial = 0
        self.hung: list[str] = []
        self.unanswered = 0  # submissions the API never answered within the run's budget
        self.died: list[str] = []
        self.stopped_working: list[str] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        #: How long a worker may take to answer the health check's `mark` before it is
        #: reported hung (two thirds of it for the final check).
        self.patience_s = 30.0
        self.last_failover: int | None = None  # ns: when the last failover was over
        #: The store's URL options this configuration adds: on the cluster the queue sharded
        #: over its masters (`SHARDS`), and the durable arm's `replicas`.
        options = [f"shards={SHARDS}"] if backend.server == "cluster" else []
        options += [WAITING] if persistence == "wait" else []
        self.options = "&".join(options)

    # -- processes ------------------------------------------------------------------------

    async def _agent(self, role: str) -> Agent:
        for attempt in range(10):
            try:
                return await self.stack.enter_async_context(self.lab.agent(
                    self.backend, self.store.place, lease_ms=self.profile.lease_s * 1000,
                    role=role, housekeeping=role == "worker", options=self.options))
            except AgentFailed:
                if attempt == 9:
                    raise
                await asyncio.sleep(0.5)
        raise AssertionError("unreachable")

    async def start_worker(self) -> Worker:
        agent = await self._agent("worker")
        await agent.request("work", body="chaos", emit=["completed", "failed", "dead"], pool=16,
                            retry_attempts=MOST_FAILS + 1, retry_initial_ms=50,
                            quiet=True, sweep_ms=1000, within_ms=1000)
        self.serial += 1
        worker = Worker(agent, self.serial)
        self.workers.append(worker)
        self._spawn(self._listen(worker))
        return worker

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _listen(self, worker: Worker) -> None:
        while True:
            message = await worker.agent.events.get()
            plan = self.plans.get(str(message.get("workflow")))
            if plan is None:
                continue
            if message["event"] == "completed" and plan.completed_at is None:
                plan.completed_at = int(message["at"])
            elif message["event"] == "failed":
                if message.get("error") != "Flaky":
                    self.unexpected_failures[str(message.get("error"))] += 1
                plan.failures += 1
                plan.retries_sent = plan.failures  # the worker's policy tries it again
            elif message["event"] == "dead":  # out of attempts (or found so by a later pass)
                self.dead.add(plan.workflow)
                if plan.fails < DOOMED:
                    self.unexpected_failures["failed for good within its attempts"] += 1
                self._spawn(self._retry(plan))

    async def _retry(self, plan: Plan) -> None:
        """What an operator does with a failed workflow: a while after it failed, and for as
        long as `status` says it stands failed, `durable.retry` through the API (whose failed
        calls `_call` asks again: a retry cut off after its record must still wake it)."""
        if plan.watched:
            return
        plan.watched = True
        try:
            while plan.completed_at is None and not self._gone(plan):
                await asyncio.sleep(self.rng.uniform(0.05, 0.5))
                standing = await self._call("status", workflow=plan.workflow)
                if standing is None or standing.get("state") != "failed":
                    if plan.operator_retries:
                        return  # retried: it runs to the end by itself (or fails again)
                    continue  # its failing pass has not settled yet
                answer = await self._call("retry", workflow=plan.workflow)
                if answer is not None and answer.get("retried"):
                    plan.operator_retries += 1
        finally:
            plan.watched = False

    # -- talking to the API ---------------------------------------------------------------

    async def _call(self, op: str, **fields: Any) -> dict[str, Any] | None:
        """One API request, tried again while the store is away; None if the run gave up."""
        assert self.api is not None
        pause = 0.1
        for _ in range(200):
            try:
                return await self.api.request(op, timeout=30, **fields)
            except AgentFailed:
                if self.api.process.returncode is not None:
                    raise
                self.api_retries += 1
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
        return None

    def _gone(self, plan: Plan) -> bool:
        """Whether the lab must leave `plan` alone: a wipe took what it had."""
        if plan.lost is None and self.detected and plan.submitted_at is not None and \
                self.wipe_at is not None:
            if plan.submitted_at < self.wipe_at:
                plan.lost = ("completed, then its checkpoint went in the wipe (detected)"
                             if plan.completed_at is not None and
                             plan.completed_at < self.wipe_at
                             else "in flight in the wipe (detected)")
            elif plan.sent_at is not None and plan.sent_at < self.wipe_at:
                # Sent before the kill, its answer read after it: the write may have been the
                # old data set's last, answered just before the server died.
                plan.lost = "answered across the wipe (detected)"
        return plan.lost is not None

    async def _arrive(self, plan: Plan, key: str, value: object) -> None:
        if self._gone(plan):
            return
        await self._call("arrive", workflow=plan.workflow, key=key, value=value)

    async def _submit(self, plan: Plan) -> None:
        order = plan.order(str(self.log), self.backend.store, self.store.counters)
        detected, wipes = len(self.detected), self.api_wipes
        reply = None
        assert self.api is not None
        pause = 0.1
        for attempt in range(200):
            if attempt and await self._wiped_since(detected, wipes):
                # The store was wiped while this order was being sent: it may have landed and
                # gone with the rest, or not landed. Sending it again would run it from
                # nothing, so it is given up and counted in the wipe's loss.
                plan.lost = "submitted across the wipe (detected)"
                return
            try:
                sent = time.time_ns()
                reply = await self.api.request("arrive", timeout=30, workflow=plan.workflow,
                                               key="order", value=order)
                plan.sent_at = sent
                break
            except AgentFailed:
                self.api_retries += 1
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
        if reply is None:
            plan.lost = "the API never got its order in"
            return
        plan.submitted_at = int(reply["at"])
        if plan.approval:
            self._spawn(self._later(self.rng.uniform(0.0, 2.0), functools.partial(
                self._arrive, plan, "approved", f"ok-{plan.workflow}")))
        for n in range(plan.messages):
            self._spawn(self._later(self.rng.uniform(0.0, 3.0),
                                    functools.partial(self._deliver, plan, n)))

    async def _wiped_since(self, detected: int, wipes: int | None) -> bool:
        """Before sending an order again: has the store been wiped since the first try? (An
        API must ask, or a lost answer plus a wipe runs a paid order from nothing.)"""
        if len(self.detected) != detected:
            return True
        if wipes is None or not self.watch_wipes:
            return False
        with contextlib.suppress(AgentFailed):
            assert self.api is not None
            answer = await self.api.request("verify", timeout=10)
            self._verified(answer)
        return len(self.detected) != detected or (self.api_wipes or 0) > wipes

    def _verified(self, answer: dict[str, Any]) -> None:
        if answer.get("wipes") is not None:
            self.api_wipes = max(self.api_wipes or 0, int(answer["wipes"]))
        if answer.get("wiped"):
            self.detected.append({"by": "api verify()", "at": answer["at"]})

    async def _later(self, delay: float, send: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(delay)
        await send()

    async def _deliver(self, plan: Plan, n: int) -> None:
        if self._gone(plan):
            return
        reply = await self._call("deliver", workflow=plan.workflow, value=f"m{n}")
        if reply is not None:
            plan.delivered.append(str(reply["key"]))

    async def _watch_wipes(self) -> None:
        """The API's low-rate wipe watch: `verify()` twice a second (Redis only)."""
        while self.watch_wipes:
            await asyncio.sleep(0.5)
            with contextlib.suppress(AgentFailed):
                assert self.api is not None
                answer = await self.api.request("verify", timeout=10)
                if answer.get("wiped") is None:
                    return
                self._verified(answer)

    # -- faults ---------------------------------------------------------------------------

    def menu(self) -> list[tuple[str, float]]:
        """The faults this configuration meets, with their weights. Without persistence a
        restart is a wipe, which comes once (`_monkey`)."""
        if self.backend.store == "sqlite":
            return [("worker-kill", 1.0)]
        if self.store.cluster is not None:
            return [("worker-kill", 0.4), ("connections-cut", 0.2), ("failover", 0.4)]
        if self.persistence == "none":
            return [("worker-kill", 0.6), ("connections-cut", 0.4)]
        return [("worker-kill", 0.5), ("connections-cut", 0.3), ("server-restart", 0.2)]

    async def _monkey(self) -> None:
        kinds, weights = zip(*self.menu(), strict=True)
        # Each kind once first, in a random order, so even a short run meets every one.
        first = list(kinds)
        self.rng.shuffle(first)
        if "failover" in first:  # the fault this configuration is about comes first (popped)
            first.remove("failover")
            first.append("failover")
        wipe_after = int(self.profile.workflows * 0.4) if self.persistence == "none" else None
        while self.submitting:
            pause = self.rng.expovariate(1 / self.profile.fault_every_s)
            while pause > 0 and self.submitting and not self._wipe_due(wipe_after):
                await asyncio.sleep(min(pause, 0.1))
                pause -= 0.1
            if not self.submitting:
                break
            if wipe_after is not None and self.wipe_at is None and \
                    sum(p.submitted_at is not None for p in self.plans.values()) >= wipe_after:
                await self._restart(wipe=True)
                continue
            kind = first.pop() if first else self.rng.choices(kinds, weights)[0]
            if kind == "worker-kill":
                await self.kill_worker()
            elif kind == "failover":
                await self._failover()
            elif kind == "connections-cut":
                at = time.time_ns()
                cut = await self.store.cut()
                self.faults.append(Fault(kind, at, time.time_ns(), f"{cut} connections"))
            else:
                await self._restart(wipe=False)
            self._report()

    def _wipe_due(self, after: int | None) -> bool:
        return after is not None and self.wipe_at is None and \
            sum(p.submitted_at is not None for p in self.plans.values()) >= after

    async def kill_worker(self) -> None:
        """SIGKILL a live worker chosen at random, and start another in its place."""
        live = [w for w in self.workers if not w.killed]
        victim = self.rng.choice(live)
        name = f"worker {victim.serial}"
        if victim.agent.gone and name not in self.died:
            self.died.append(name)  # it ended before the run came to kill it: a death of its own
        victim.killed = True
        pid = victim.agent.process.pid
        at = victim.agent.kill()
        await asyncio.sleep(self.rng.uniform(0.1, 1.0))
        await self.start_worker()
        self.faults.append(Fault("worker-kill", at, time.time_ns(),
                                 f"worker {victim.serial}", pid))

    async def _failover(self) -> None:
        """SIGKILL a master; wait for the cluster to promote its replica; start it again (it
        comes back as the replica of the node that replaced it) and wait until it is in step."""
        cluster = self.store.cluster
        assert cluster is not None
        roles = await asyncio.to_thread(cluster.roles)
        victim = self.rng.choice(sorted(p for p, role in roles.items() if role == "master"))
        # Its replica cut off first, for a moment: held still (SIGSTOP) and its link dropped,
        # so what the master acknowledges meanwhile reaches no replica, the window a failover
        # loses. (A dropped link alone is back with the backlog's writes within milliseconds:
        # on loopback the window would be a fraction of a millisecond.)
        replica = await asyncio.to_thread(cluster.replica_of, victim)
        if replica is not None:
            cluster.pause(replica, paused=True)
        try:
            await self._unlink(victim)
            await asyncio.sleep(CUT_OFF_S)
            at = cluster.kill(victim)
        finally:
            if replica is not None:
                cluster.pause(replica, paused=False)

        def promoted() -> float:
            while True:
                masters = [p for p, role in cluster.roles().items() if role == "master"]
                if len(masters) == len(cluster.ports) // 2:
                    return (time.time_ns() - at) / 1e9
                time.sleep(0.05)

        took = await asyncio.wait_for(asyncio.to_thread(promoted), 60)
        await asyncio.to_thread(cluster.start, victim)
        await asyncio.to_thread(cluster.settled)
        self.last_failover = time.time_ns()
        self.faults.append(Fault("failover", at, self.last_failover,
                                 f"master {victim} cut from its replica for {CUT_OFF_S:g} s,"
                                 f" SIGKILLed, replica promoted in {took:.1f} s"))

    @staticmethod
    async def _unlink(port: int) -> None:
        """Drop the replication link of the master on `port` (its replica reconnects)."""
        import redis.asyncio as redis

        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        try:
            await client.client_kill_filter(_type="replica")
        finally:
            await client.aclose()

    async def _restart(self, *, wipe: bool) -> None:
        server = self.store.server
        assert server is not None
        hard = wipe or self.rng.random() < 0.6
        at = time.time_ns()
        await asyncio.to_thread(server.stop, hard=hard)
        # Gone only now: a write sent after `at` but before the process died (a loaded machine
        # runs the stopping thread late) may have landed in the data the wipe took.
        down = time.time_ns()
        await asyncio.sleep(self.rng.uniform(0.2, 1.5))
        await asyncio.to_thread(server.start)
        kind = "wipe" if wipe else "server-restart"
        if wipe:
            self.wipe_at, self.wipe_back = down, time.time_ns()
        how = ("SIGKILL" if hard else "SIGTERM") if server.kind == "redis7" else (
            "immediate shutdown" if hard else "fast shutdown")
        persisted = "WAL" if server.kind == "postgres" else (
            "AOF" if server.persistence == "aof" else "no persistence")
        self.faults.append(Fault(kind, at, time.time_ns(), f"{how}, {persisted}"))

    def _report(self) -> None:
        done = sum(p.completed_at is not None for p in self.plans.values())
        tally = Counter(f.kind for f in self.faults)
        self.progress(", ".join(f"{k} {v}" for k, v in sorted(tally.items())) or "no faults yet",
                      done, len(self.plans))

    async def _health(self) -> None:
        while True:
            await asyncio.sleep(2.0)
            await self.check_workers(final=False)
            self._report()

    async def check_workers(self, *, final: bool) -> None:
        """Every worker not killed by the run still runs, still works, and answers."""
        for worker in [w for w in self.workers if not w.killed]:
            name = f"worker {worker.serial}"
            if worker.killed:
                # The run killed it while an earlier worker was being asked: gone, not dead.
                continue
            if worker.agent.process.returncode is not None:
                if name not in self.died:
                    self.died.append(name)
                continue
            try:
                mark = await worker.agent.request(
                    "mark", timeout=self.patience_s * (2 / 3 if final else 1))
            except AgentFailed:
                if worker.killed:
                    # The run killed it while it was being asked (a race, not a hang: its
                    # reply could never come).
                    continue
                if worker.agent.gone:
                    if name not in self.died:
                        self.died.append(name)
                    continue
                if name not in self.hung:
                    self.hung.append(name)
                    # Where it is stuck: the agent prints its threads' stacks to stderr.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(worker.agent.process.pid, signal.SIGUSR1)
                    print(f"{name} did not answer mark: its stacks follow on stderr",
                          file=sys.stderr, flush=True)
                continue
            if not mark.get("working") and not any(s.startswith(f"{name}:") for s in
                                                   self.stopped_working):
                self.stopped_working.append(f"{name}: {mark.get('worker_error')}")
            if final and mark.get("wipes") and self.watch_wipes:
                self.detected.append({"by": f"{name} wipes={mark['wipes']}", "at": mark["at"]})

    # -- the whole ------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        began = time.time_ns()
        await self.store.prepare()
        try:
            self.api = await self._agent("client")
            if self.watch_wipes:  # learn the marker (and the API's count of wipes) first
                self._verified(await self.api.request("verify", timeout=30))
            for _ in range(self.profile.workers):
                await self.start_worker()
            await asyncio.sleep(0.5)
            background = [self._spawn(self._monkey()), self._spawn(self._health()),
                          self._spawn(self._watch_wipes())]
            gaps = random.Random(self.profile.seed + 2)
            submissions = []
            for plan in self.plans.values():
                submissions.append(self._spawn(self._submit(plan)))
                await asyncio.sleep(gaps.expovariate(self.profile.rate))
            # Bounded: an API that stopped answering is a finding, not a run that never ends.
            budget = self.profile.workflows / self.profile.rate * 2 + 60
            _, unanswered = await asyncio.wait(submissions, timeout=budget)
            self.unanswered = len(unanswered)
            self.submitting = False
            submitted_end = time.time_ns()
            with contextlib.suppress(BaseException):
                await background[0]  # the fault under way ends first
            deadline = time.monotonic() + self.profile.finish_s
            while time.monotonic() < deadline:
                if all(p.completed_at is not None or self._gone(p)
                       for p in self.plans.values()):
                    break
                self._report()
                await asyncio.sleep(0.5)
            finished = time.time_ns()
            await asyncio.sleep(0.5)  # inputs and retries still in flight land
            for task in background[1:]:
                task.cancel()
            await self.check_workers(final=True)
            with contextlib.suppress(AgentFailed):
                assert self.api is not None
                if self.watch_wipes:
                    self._verified(await self.api.request("verify", timeout=10))
            for plan in self.plans.values():
                self._gone(plan)
            audit = await self.audit()
            audit["timing"] = {"began": began, "submitted": submitted_end,
                               "finished": finished,
                               "seconds": round((finished - began) / 1e9, 1)}
            return audit
        finally:
            for task in list(self._tasks):
                task.cancel()
            for task in list(self._tasks):
                with contextlib.suppress(BaseException):
                    await task
            if self.store.server is not None:  # the place is dropped through it
                await asyncio.to_thread(self.store.server.start)
            await self.stack.aclose()

    # -- the audit ------------------------------------------------------------------------

    def effects(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        found: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for path in self.log.glob("effects-*.log"):
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    found[(entry["workflow"], entry["step"])].append(entry)
        for entries in found.values():
            entries.sort(key=lambda e: int(e["at"]))
        return found

    def why_again(self, before: dict[str, Any], again: dict[str, Any]) -> str:
        """The fault between two executions of one effect that explains the second."""
        lo, hi = int(before["at"]), int(again["at"])
        window = [f for f in self.faults if lo <= f.at <= hi]
        if any(f.kind == "worker-kill" and f.pid == before["pid"] for f in window):
            return "the worker that performed it was SIGKILLed before its record landed"
        for kind, reason in (("wipe", "the store was wiped (its record went with it)"),
                             ("failover", "a master died, its replica promoted, before the "
                                          "record landed or was replicated"),
                             ("server-restart", "the server restarted before its record landed"),
                             ("connections-cut", "its connection was cut before its record "
                                                 "landed")):
            if any(f.kind == kind for f in window):
                return reason
        if any(f.kind == "worker-kill" for f in window):
            return "another worker was killed meanwhile (the pass lost its claim)"
        return "no fault in between: the claim lapsed under load and another pass took over"

    async def audit(self) -> dict[str, Any]:
        """What came through, as the configuration's summary; `problems` lists what must not
        happen. Every workflow completed; every step recorded, and its record the result of
        an execution that really happened; every `transact` applied exactly once (the store's
        counter equals the number of `transact` steps, and each recorded count is its
        position); every external effect performed at least once, and each repeat with its
        reason (`why_again`: the worker that performed it was killed, a connection was cut, a
        server restarted, or no fault in between: a lease that lapsed under load); the last
        step's value equal to what every pass saw (replay consistency); no wakeup left in the
        queue once everything is done; no worker that died on its own, stopped working or
        stopped answering. What a wipe took is allowed only if it was detected (the API's
        `verify()`, the workers' `wipes`), and no workflow may run again from nothing after it."""
        assert self.api is not None
        names = list(self.plans)
        checkpoints: dict[str, dict[str, Any]] = {}
        for start in range(0, len(names), 200):
            for attempt in range(5):
                try:
                    reply = await self.api.request("load", timeout=60,
                                                   workflows=names[start:start + 200])
                    break
                except AgentFailed:
                    if attempt == 4:
                        raise
                    await asyncio.sleep(1)
            checkpoints |= reply["checkpoints"]
        counts = await self.store.counts(names)
        effects = self.effects()
        problems: dict[str, list[str]] = defaultdict(list)
        duplicates: Counter[str] = Counter()
        duplicated_effects = 0
        flaky_runs = 0
        rerun_from_nothing = 0
        lost: Counter[str] = Counter()
        completed = 0
        for name, plan in self.plans.items():
            records = checkpoints.get(name, {})
            if self.wipe_at is not None and self.wipe_back is not None:
                firsts = [int(e["at"]) for e in effects.get((name, "step:0"), [])]
                settled = self.wipe_back + 1e9 * self.profile.lease_s * 2
                if any(at < self.wipe_at for at in firsts) and any(at > settled
                                                                   for at in firsts):
                    rerun_from_nothing += 1
            if plan.lost is not None:
                lost[plan.lost] += 1
                continue
            if "done" not in records:
                if self.persistence == "nowait" and self.last_failover is not None and \
                        (plan.sent_at or 0) < self.last_failover:
                    lost[FAILED_OVER] += 1  # its acknowledged writes went with the master
                    continue
                problems["not completed"].append(f"{name}: has {sorted(records)}")
                continue
            completed += 1
            missing = plan.expected_keys() - set(records)
            if missing:
                problems["steps missing"].append(f"{name}: {sorted(missing)}")
            seen: list[str] = []
            for i in range(plan.segments):
                step = f"step:{i}"
                done = effects.get((name, step), [])
                if not done:
                    problems["effect never performed"].append(f"{name} {step}")
                elif records.get(step) not in {e["nonce"] for e in done}:
                    problems["record not from an execution"].append(f"{name} {step}")
                for before, again in itertools.pairwise(done):
                    duplicates[self.why_again(before, again)] += 1
                if len(done) > 1:
                    duplicated_effects += 1
                if records.get(f"count:{i}") != i + 1:
                    problems["transact count off"].append(
                        f"{name} count:{i} = {records.get(f'count:{i}')!r}")
                seen += [str(records.get(step)), str(records.get(f"count:{i}"))]
            if counts.get(name) != plan.segments:
                problems["transact applied other than once"].append(
                    f"{name}: counter {counts.get(name)} for {plan.segments} transact steps")
            if plan.approval:
                seen.append(str(records.get("approved")))
            seen += [str(v) for k, v in sorted(records.items()) if k.startswith("inbox:")][
                :_read(records)]
            if plan.fails:
                runs = effects.get((name, "flaky"), [])
                flaky_runs += len(runs)
                if len(runs) < plan.fails + 1:
                    problems["retries not run"].append(f"{name}: {len(runs)} runs")
                seen.append(str(records.get("flaky")))
            if records.get("done") != "|".join(seen):
                problems["replay mismatch"].append(
                    f"{name}: done={records.get('done')!r}, records say {'|'.join(seen)!r}")
        orphans = await self._orphans()
        if orphans:
            problems["orphaned wakeups"].append(json.dumps(orphans))
        if rerun_from_nothing:
            problems["ran again from nothing after the wipe"].append(str(rerun_from_nothing))
        wipes = [f for f in self.faults if f.kind == "wipe"]
        if lost[FAILED_OVER]:
            self.detected.append({"by": "the audit (acknowledged, missing after a failover)",
                                  "at": time.time_ns()})
        if sum(lost.values()) and not self.detected:
            problems["lost without detection"].append(f"{sum(lost.values())} workflows")
        if wipes and not self.detected:
            problems["wipe not detected"].append(str(len(wipes)))
        for label, found in (("workers died", self.died), ("workers hung", self.hung),
                             ("workers stopped working", self.stopped_working)):
            if found:
                problems[label] += found
        if self.unanswered:
            problems["API stopped answering"].append(f"{self.unanswered} submissions")
        if self.unexpected_failures:
            problems["unexpected failures"].append(json.dumps(dict(self.unexpected_failures)))
        tally = Counter(f.kind for f in self.faults)
        kept = [p for p in self.plans.values() if p.lost is None]
        delivered = sum(len(p.delivered) for p in kept)
        wanted = sum(p.messages for p in kept)
        return {
            "workflows": len(self.plans),
            "completed": completed,
            "lost": dict(lost),
            "lost_total": sum(lost.values()),
            "wipes_detected_by": sorted({d["by"] for d in self.detected}),
            "workers": self.profile.workers,
            "workers_killed": tally["worker-kill"],
            "connections_cut": tally["connections-cut"],
            "server_restarts": tally["server-restart"] + tally["wipe"],
            "failovers": tally["failover"],
            "wipes": tally["wipe"],
            "effects_duplicated": duplicated_effects,
            "duplicate_reasons": dict(duplicates),
            "flaky_runs": flaky_runs,
            "retries": sum(p.retries_sent for p in kept),
            "operator_retries": sum(p.operator_retries for p in kept),
            "messages_delivered": delivered,
            "messages_wanted": wanted,
            # A deliver whose answer was lost is sent again (an inbox append is not keyed):
            # the workflow then has the message twice, and reads on past it.
            "messages_delivered_twice": delivered - wanted,
            "api_retries": self.api_retries,
            "orphans": orphans,
            "problems": {k: v[:20] for k, v in problems.items()},
            "problem_counts": {k: len(v) for k, v in problems.items()},
            "faults": [{"kind": f.kind, "at": f.at, "seconds": round((f.until - f.at) / 1e9, 3),
                        "detail": f.detail} for f in self.faults],
        }

    async def _orphans(self) -> dict[str, int]:
        """What the queue still holds once every workflow is done (after a settle): the
        stream's entries are history until trimmed, not wakeups, so they are left out."""
        parts: dict[str, int] = {}
        for _ in range(20):
            worker = next((w for w in self.workers if not w.killed), None)
            if worker is None:
                return {}
            with contextlib.suppress(AgentFailed):
                found = await worker.agent.request("footprint", timeout=20)
                parts = {k: int(v) for k, v in found.get("parts", {}).items()
                         if k != "stream" and int(v)}
                if not parts:
                    return {}
            await asyncio.sleep(0.5)
        return parts


def _read(records: dict[str, Any]) -> int:
    """How many inbox entries the body read (the last `read:*` cursor's position)."""
    last = [v for k, v in records.items() if k.startswith("read:") and v]
    if not last:
        return 0
    cursor = max(str(v) for v in last)
    return sum(1 for k in records if k.startswith("inbox:") and k <= cursor)


# -- one configuration, and the command ---------------------------------------------------------


async def run_one(lab: Lab, backend: Backend, persistence: str, profile: Profile,
                  progress: Callable[[str, int, int], None] | None = None, *,
                  watch_wipes: bool = True) -> dict[str, Any]:
    """Run one configuration on a restartable private server (SQLite: a file) and audit it.
    `watch_wipes=False` is the audit's control (see `Chaos.watch_wipes`)."""
    report = progress or (lambda _text, _done, _total: None)
    log = lab.scratch / f"chaos-{lab.fresh_tag()}"
    log.mkdir(parents=True)
    kind = {"redis": "redis7", "postgres": "postgres"}.get(backend.store)
    with contextlib.ExitStack() as servers:
        cluster = None
        if backend.server == "cluster":
            cluster = await asyncio.to_thread(servers.enter_context, replicated(log))
            kind = None
        server = (servers.enter_context(lab.servers.restartable(
            kind, persistence="none" if persistence == "none" else "aof"))
            if kind is not None else None)
        known = await asyncio.to_thread(lambda: server.server) if server else None
        if cluster is not None:
            known = await asyncio.to_thread(lambda: cluster.server)
        async with lab.place(backend, known) as (place, _):
            counters = ("public.chaos_counts" if backend.store != "redis"
                        else f"chaos-{place.tag}:count")
            if backend.store == "sqlite":
                counters = "chaos_counts"
            sqlite_path = (Path(place.directory) / f"{place.tag}.db"
                           if backend.store == "sqlite" else None)
            store = Store(backend, place, server, counters, sqlite_path, cluster)
            chaos = Chaos(lab, backend, persistence, profile, store, log, report,
                          watch_wipes=watch_wipes)
            return await chaos.run()


def failed(summary: dict[str, Any]) -> bool:
    """Whether a configuration lost anything it must not (a detected wipe's loss is allowed)."""
    return bool(summary["problem_counts"])


def rows(backend: Backend, persistence: str, summary: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"experiment": NAME, "backend": backend.name, "scheduler": backend.scheduler,
            "store": backend.store, "persistence": persistence}
    out = []
    for metric, unit in (("workflows", "workflows"), ("completed", "workflows"),
                         ("lost_total", "workflows"), ("workers", "processes"),
                         ("workers_killed", "kills"), ("connections_cut", "cuts"),
                         ("server_restarts", "restarts"), ("wipes", "restarts"),
                         ("failovers", "failovers"),
                         ("effects_duplicated", "effects"), ("flaky_runs", "runs"),
                         ("retries", "retries"), ("operator_retries", "retries"),
                         ("messages_delivered", "messages"),
                         ("messages_wanted", "messages"),
                         ("messages_delivered_twice", "messages"),
                         ("api_retries", "requests")):
        out.append({**base, "metric": metric, "value": summary[metric], "unit": unit})
    out.append({**base, "metric": "wipes_detected", "value": int(bool(
        summary["wipes_detected_by"])), "unit": "bool"})
    out.append({**base, "metric": "seconds", "value": summary["timing"]["seconds"],
                "unit": "s"})
    for reason, count in summary["duplicate_reasons"].items():
        out.append({**base, "metric": "effect_repeated", "reason": reason, "value": count,
                    "unit": "executions"})
    for problem, count in summary["problem_counts"].items():
        out.append({**base, "metric": "problem", "reason": problem, "value": count,
                    "unit": "cases"})
    return out


async def chaos(profile: Profile, backends: list[str] | None = None, *,
                where: Path = RESULTS, command: str = "", merge: bool = False) -> int:
    """Every configuration (or those of `backends`), written to `where` as each ends (so an
    interrupted run keeps what it finished); the number that failed their audit. With
    `merge`, the configurations this run does not give keep their earlier rows and summary.
    It writes `chaos.csv` (one row per configuration and metric) and `chaos.json` (metadata,
    and each configuration's summary with the faults it met)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from experiments.harness.provenance import git, versions

    console = Console(stderr=True, width=None if os.isatty(2) else 120)
    chosen = [(b, p) for b, p in CONFIGURATIONS
              if backends is None or b in backends or _label(b, p) in backends]
    began, clock = datetime.now(UTC), time.perf_counter()
    calibration = await asyncio.to_thread(cpu_calibration)
    all_rows: list[dict[str, Any]] = []
    summaries: dict[str, Any] = {}
    labels = {_label(b, p) for b, p in chosen}
    if merge:
        all_rows, summaries = _earlier(where, labels)
    failures = 0

    def save() -> None:
        meta = {
            "experiment": NAME, "title": TITLE, "about": (__doc__ or "").strip(),
            "command": command or f"python -m experiments chaos --profile {profile.name}",
            "mode": profile.name, "profile": profile.__dict__,
            "started": began.isoformat(timespec="seconds"),
            "elapsed_seconds": round(time.perf_counter() - clock, 1),
            "git_revision": git("rev-parse", "HEAD"),
            "git_dirty": bool(git("status", "--porcelain", "--", "durability",
                                   "experiments")),
            "cores": os.cpu_count(), "machine": platform.platform(),
            "cpu_calibration_seconds": {"at_start": calibration},
            "versions": versions(),
            "configurations": summaries,
            "failed": failures,
        }
        write(NAME, all_rows, meta, where)

    servers = Servers(("binary",))
    lab = Lab(servers, quick=profile.name != "full")
    columns = (TextColumn("[bold]{task.fields[name]:<18}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.description}"))
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            for name, persistence in chosen:
                backend = BACKENDS[name]
                label = _label(name, persistence)
                task = progress.add_task("", total=profile.workflows, name=label)

                def show(text: str, done: int, total: int, task: Any = task) -> None:
                    progress.update(task, completed=done, total=total, description=text)

                try:
                    summary = await run_one(lab, backend, persistence, profile, show)
                except Exception as error:
                    failures += 1
                    summaries[label] = {"error": f"{type(error).__name__}: {error}"}
                    console.print(f"[red]chaos {label} failed:[/red] {error}")
                    save()
                    continue
                summaries[label] = summary
                all_rows += rows(backend, persistence, summary)
                bad = failed(summary)
                failures += bad
                save()
                console.print(("[red]LOSS[/red] " if bad else "[green]ok[/green] ")
                              + f"{label}: " + describe(summary))
    finally:
        await asyncio.to_thread(servers.close)
        import shutil

        shutil.rmtree(lab.scratch, ignore_errors=True)
    return failures


def _label(backend: str, persistence: str) -> str:
    return backend if persistence == "-" else f"{backend}/{persistence}"


def _earlier(where: Path, labels: set[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and summaries already in `where` of configurations other than `labels`."""
    import csv

    table, info = where / f"{NAME}.csv", where / f"{NAME}.json"
    if not table.exists() or not info.exists():
        return [], {}
    with table.open(newline="") as opened:
        kept = [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(opened)
                if _label(row["backend"], row.get("persistence") or "-") not in labels]
    summaries = {k: v for k, v in json.loads(info.read_text()).get("configurations", {}).items()
                 if k not in labels}
    return kept, summaries



def describe(summary: dict[str, Any]) -> str:
    """One line: what ran, what was done to it, what was lost."""
    lost = summary["lost_total"]
    line = (f"{summary['completed']}/{summary['workflows']} completed, "
            f"{summary['workers_killed']} workers killed, {summary['connections_cut']} cuts, "
            f"{summary['server_restarts']} restarts ({summary['wipes']} wipes), "
            f"{summary.get('failovers', 0)} failovers; "
            f"{summary['effects_duplicated']} effects repeated; lost {lost}")
    if lost:
        line += (" (detected by " + ", ".join(summary["wipes_detected_by"]) + ")"
                 if summary["wipes_detected_by"] else " (NOT detected)")
    if summary["problem_counts"]:
        line += "; problems: " + json.dumps(summary["problem_counts"])
    return line


async def main_async(profile: Profile, backends: list[str] | None, where: Path,
                     command: str, merge: bool = False) -> int:
    return await chaos(profile, backends, where=where, command=command, merge=merge)
