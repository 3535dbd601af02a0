"""Each rival's agent speaks the lab's protocol: opened as a worker and as a client on one
isolated place, the worker starts every job the client submits exactly once, says so live
and in `stop`, and can work again after a stop with its bookkeeping reset. And the
experiments that ask the rivals a question of their own (takeover, growth, wakeups) give
their rows, briefly.

The agents run in the rivals' own virtualenv, as the lab runs them; a missing one is built
first (`make_rivals_venv`, what `python -m experiments rivals` does), so a fresh clone tests
them too. Real servers: Redis on 6379 (queues named by a unique tag), Postgres on 5432 (a
throwaway database per test).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from experiments.commands.machine import make_rivals_venv
from experiments.commands.runner import module
from experiments.harness.backends import BACKENDS
from experiments.harness.lab import Agent, Lab, rivals_python
from experiments.harness.servers import Servers

REDIS = "redis://127.0.0.1:6379/0"
POSTGRES = "postgresql://postgres@127.0.0.1:5432"
RIVALS = {"saq": "redis", "arq": "redis", "streaq": "redis", "pgqueuer": "postgres",
          "procrastinate": "postgres"}


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI requires this: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def python() -> str:
    """The rivals' interpreter, their virtualenv made (or brought up to date) first."""
    if make_rivals_venv(timeout=600) != 0:
        unavailable("the rivals' virtualenv could not be made (pip failed)")
    found = rivals_python()
    assert found is not None
    return found


def _admin(statement: str) -> None:
    import psycopg

    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True, connect_timeout=3) as conn:
        conn.execute(statement)  # only our own DDL with a generated name


@pytest.fixture
def base(request: pytest.FixtureRequest) -> Iterator[str]:
    """A server base URL for the rival under test: Redis as it is, Postgres a database of
    the test's own, dropped after."""
    if RIVALS[request.node.callspec.params["rival"]] == "redis":
        import redis

        try:
            redis.Redis.from_url(REDIS, socket_connect_timeout=2).ping()
        except redis.RedisError as error:
            unavailable(f"no Redis on 6379: {error}")
        yield REDIS
        return
    name = f"durability_rivals_{uuid.uuid4().hex[:10]}"
    try:
        _admin(f'CREATE DATABASE "{name}"')
    except Exception as error:
        unavailable(f"no Postgres on 5432: {error}")
    try:
        yield f"{POSTGRES}/{name}"
    finally:
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def agents(python: str, rival: str, count: int) -> AsyncIterator[list[Agent]]:
    started: list[Agent] = []
    try:
        for n in range(count):
            started.append(await Agent.start(python, f"experiments.harness.rivals.{rival}",
                                             f"{rival}/{n}"))
        yield started
    finally:
        for agent in started:
            await agent.close()


async def _done(worker: Agent, count: int) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            marked = await worker.request("mark")
            if marked["outcomes"] >= count:
                return marked
            await asyncio.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("rival", list(RIVALS))
async def test_every_submitted_job_starts_exactly_once(python: str, base: str,
                                                        rival: str) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    prefix = f"job{uuid.uuid4().hex[:6]}"
    async with agents(python, rival, 2) as (worker, client):
        # Both open the same place at once: a Postgres rival installs its schema then.
        opened = await asyncio.gather(*(
            agent.request("open", url="", base=base, tag=tag, lease_ms=30_000, poll_ms=None,
                          housekeeping=role == "worker", variant=variant, role=role,
                          timeout=60)
            for agent, role, variant in ((worker, "worker", "tuned"),
                                         (client, "client", "default"))))
        for reply in opened:
            assert reply["ready"] is True
            assert isinstance(reply["settings"], dict)
        assert opened[0]["settings"] != opened[1]["settings"], "tuned must differ"

        before = await worker.request("mark")
        assert before["outcomes"] == 0 and before["first_started"] is None
        working = await worker.request("work", body="one-step", pool=4, live=True)
        assert working["working"] is True and isinstance(working["at"], int)

        count = 8
        sent = await client.request("submit", prefix=prefix, rate=40.0, count=count, seed=3,
                                    value={"sku": "A-1"})
        assert len(sent["submitted"]) == len(sent["answered"]) == count
        assert all(a >= s > 0 for s, a in zip(sent["submitted"], sent["answered"],
                                              strict=True))
        marked = await _done(worker, count)
        assert set(marked) >= {"at", "cpu", "requests", "round_trips", "kinds", "outcomes",
                               "first_started", "last_outcome"}
        assert marked["last_outcome"] >= marked["first_started"] >= min(sent["submitted"])
        await asyncio.sleep(0.3)  # a second start of any job would land by now
        stopped = await worker.request("stop")
        keys = {f"{prefix}-{i}" for i in range(count)}
        assert set(stopped["started"]) == keys
        assert stopped["kinds"] == {"started": count, "outcome": count}
        for i, submitted in enumerate(sent["submitted"]):
            assert stopped["started"][f"{prefix}-{i}"] >= submitted
        live = set()
        while not worker.events.empty():
            event = worker.events.get_nowait()
            if event["event"] == "started":
                live.add(event["workflow"])
        assert live == keys

        # Again after a stop, from a preloaded queue: a fresh count, the old jobs not rerun.
        loaded = await client.request("preload", prefix=f"{prefix}p", count=3, concurrency=2,
                                      value={})
        assert loaded["seconds"] >= 0
        await worker.request("work", body="one-step")
        await _done(worker, 3)
        await asyncio.sleep(0.3)
        again = await worker.request("stop")
        assert set(again["started"]) == {f"{prefix}p-{i}" for i in range(3)}
        assert again["kinds"] == {"started": 3, "outcome": 3}
        # Every rival keeps something of a finished job by default (a record, a result or
        # a log row): its queue's footprint counts it.
        found = await client.request("footprint")
        assert sum(found["parts"].values()) >= count + 3 and found["bytes"] > 0
        assert (await client.request("close"))["closed"] is True


# -- the rivals in the lab's experiments ----------------------------------------------------------


@pytest.fixture
async def lab(python: str) -> AsyncIterator[Lab]:
    """A quick lab on the servers on 6379 and 5432 (a place of its own per experiment)."""
    servers = Servers(("port",))
    try:
        found = Lab(servers, quick=True)
        for kind in ("redis7", "postgres"):
            if servers.get(kind) is None:
                unavailable(f"no {kind} server: {servers.reasons.get(kind)}")
        async with found.scope():
            yield found
    finally:
        servers.close()


@pytest.mark.slow
async def test_takeover_gives_each_rival_a_row_and_says_never_where_it_does_not_recover(
        lab: Lab) -> None:
    experiment = module("takeover")
    configurations = experiment.configurations(BACKENDS["procrastinate"], True)
    assert {c["recovery"] for c in configurations} == {"retry-stalled", "none"}
    took = await experiment.measure(lab, BACKENDS["streaq"], {
        "lease_s": 1.0, "phase": "mid-job", "recovery": "reclaim", "trials": 1})
    (row,) = took
    # Nothing can take the job over before its idle time has passed.
    assert row["metric"] == "takeover" and row["value"] > 0.5
    never = await experiment.measure(lab, BACKENDS["procrastinate"], {
        "lease_s": 1.0, "phase": "mid-job", "recovery": "none", "trials": 1, "patience_s": 3})
    assert [r["metric"] for r in never] == ["not_taken_over"]
    import pandas

    frame = pandas.DataFrame([{"backend": "streaq", **configurations[0], "recovery": "reclaim",
                               **took[0]},
                              {"backend": "procrastinate", **configurations[1], **never[0]}])
    from experiments.readers.summaries.takeover import summary

    table = summary(frame).set_index("backend")
    assert table.loc["streaq", "taken_over"] == 1 and table.loc["streaq", "note"] == ""
    assert table.loc["procrastinate", "note"].startswith("never: ")
    assert table.loc["procrastinate", "setting"]


@pytest.mark.slow
@pytest.mark.parametrize("rival", ["saq", "procrastinate"])
async def test_growth_counts_what_a_rival_keeps_of_finished_jobs(lab: Lab, rival: str) -> None:
    """At its defaults a rival keeps a record of every finished job; its own cleanup setting
    leaves none (only its bookkeeping: a worker's row, its stats keys)."""
    experiment = module("growth")
    assert [c["trimming"] for c in experiment.configurations(BACKENDS[rival], True)] == [
        False, True]
    small = {"rate": 10.0, "seconds": 0.5, "wakes": 2}
    final: dict[bool, dict[str, float]] = {}
    for cleanup in (False, True):
        rows = await experiment.measure(lab, BACKENDS[rival], {**small, "trimming": cleanup})
        jobs = next(r["value"] for r in rows if r["metric"] == "jobs")
        assert jobs == 10
        assert next(r["value"] for r in rows if r["metric"] == "completed") == jobs
        last = max(r["t_s"] for r in rows if r["metric"] == "part")
        final[cleanup] = {r["part"]: r["value"] for r in rows
                          if r["metric"] == "part" and r["t_s"] == last}
    record = {"saq": "saq:job", "procrastinate": "procrastinate_jobs"}[rival]
    assert final[False][record] == 10
    assert final[True].get(record, 0) == 0


@pytest.mark.slow
async def test_wakeups_race_a_rival_s_key_for_one_job_per_workflow(lab: Lab) -> None:
    """arq refuses a job id while that job runs: the wakeup is lost, and said refused;
    procrastinate's lock runs the second job after the first: nothing lost."""
    experiment = module("wakeups")
    arq = {r["metric"]: r["value"] for r in
           await experiment.measure(lab, BACKENDS["arq"], {"races": 4})}
    assert arq == {"races": 4, "lost": 4, "refused": 4}
    locked = {r["metric"]: r["value"] for r in
              await experiment.measure(lab, BACKENDS["procrastinate"], {"races": 4})}
    assert locked == {"races": 4, "lost": 0, "refused": 0}


@pytest.mark.slow
async def test_policies_asks_streaq_and_procrastinate_what_each_has(lab: Lab) -> None:
    """streaq's cron and priorities, procrastinate's cron, priorities and lock (a limit of
    one), each asked as ours are: no firing run twice or missed, urgent work ahead of the
    backlog, no limit overshot; and what each lacks is skipped with its reason."""
    from experiments.harness.lab import Skipped

    experiment = module("policies")

    def counted(rows: list[dict[str, Any]]) -> dict[str, float]:
        return {r["metric"]: r["value"] for r in rows if r["unit"] == "count"}

    for rival in ("streaq", "procrastinate"):
        fired = counted(await experiment.measure(lab, BACKENDS[rival], {
            "arm": "schedule", "processes": 2, "firings": 16}))
        assert fired["firings"] >= 3, rival  # a cron every second, for four seconds
        assert fired["duplicates"] == 0 and fired["missing"] == 0, rival
        urgent = counted(await experiment.measure(lab, BACKENDS[rival], {
            "arm": "priority", "ordering": "priority", "backlog": 300}))
        assert urgent["never_started"] == 0, rival
        assert urgent["backlog_after_last_urgent"] > 0, rival  # urgent work went first
        with pytest.raises(Skipped, match="rate limit"):
            await experiment.measure(lab, BACKENDS[rival], {"arm": "rate"})
    held = counted(await experiment.measure(lab, BACKENDS["procrastinate"], {
        "arm": "limit", "at_most": 1, "processes": 2, "workflows": 20}))
    # A job whose lock was held waits for the next poll (5 s): some ran, one at a time.
    assert held["passes"] >= 2 and held["passes"] + held["never_started"] == 20
    assert held["max_holders"] == 1 and held["overshoot"] == 0
