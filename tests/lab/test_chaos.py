"""The chaos run at CI size: each store's workflows come through worker SIGKILLs, cut
connections and server restarts with nothing lost, except what a Redis restarted without
persistence held, and that loss is detected, never silent.

Each configuration runs on private servers started from local binaries (`redis-server`,
Postgres' `initdb`), never the shared ones; a machine without them skips, CI has them. No
timing is asserted: the profile's deadline only bounds how long the run may take to finish.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from durability.connect import open_durable
from experiments.faults.chaos import (
    CONFIGURATIONS,
    FAILED_OVER,
    PROFILES,
    Chaos,
    Store,
    Worker,
    failed,
    run_one,
)
from experiments.harness.backends import BACKENDS
from experiments.harness.lab import AgentFailed, Lab
from experiments.harness.servers import Servers

ROOT = Path(__file__).resolve().parents[2]
CI = PROFILES["ci"]


def _binaries(store: str) -> str | None:
    """Why this store's chaos run cannot be had here, or None."""
    if store == "redis" and shutil.which("redis-server") is None:
        return "no redis-server on PATH"
    if store == "postgres" and shutil.which("initdb") is None and not list(
            Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        return "no initdb on PATH or under /usr/lib/postgresql"
    return None


@pytest.fixture
async def lab() -> AsyncIterator[Lab]:
    servers = Servers(("binary",))
    lab = Lab(servers, quick=True)
    try:
        yield lab
    finally:
        servers.close()
        shutil.rmtree(lab.scratch, ignore_errors=True)


async def _run(lab: Lab, name: str, persistence: str, **options: Any) -> dict[str, Any]:
    backend = BACKENDS[name]
    reason = _binaries(backend.store)
    if reason is not None:
        pytest.skip(reason)
    return await run_one(lab, backend, persistence, options.pop("profile", CI), **options)


@pytest.mark.parametrize(("name", "persistence"), CONFIGURATIONS,
                         ids=[f"{b}-{p}" if p != "-" else b for b, p in CONFIGURATIONS])
@pytest.mark.slow
async def test_chaos_loses_nothing_it_must_not(lab: Lab, name: str, persistence: str) -> None:
    summary = await _run(lab, name, persistence)
    assert summary["problems"] == {}, json.dumps(summary["problems"], indent=1)
    assert not failed(summary)
    # The faults really happened: every kind this store can meet, at least once.
    assert summary["workers_killed"] >= 1
    if name != "sqlite":
        assert summary["connections_cut"] >= 1
        # A cluster's fault is a master SIGKILLed and its replica promoted, not a restart.
        assert summary["failovers" if "cluster" in name else "server_restarts"] >= 1
    # Everything not lost in a detected wipe completed, each effect performed.
    assert summary["completed"] + summary["lost_total"] == summary["workflows"]
    assert summary["flaky_runs"] >= summary["retries"] > 0
    assert summary["operator_retries"] > 0  # some failed for good, and durable.retry woke them
    if persistence == "none":
        assert summary["wipes"] == 1
        assert summary["wipes_detected_by"], "the wipe went unnoticed"
        assert summary["completed"] > 0  # what came after the wipe came through
    elif persistence == "nowait":  # no WAIT: what a failover took is found and named
        assert set(summary["lost"]) <= {FAILED_OVER}
        assert summary["completed"] + summary["lost"].get(FAILED_OVER, 0) == summary["workflows"]
    else:
        assert summary["lost_total"] == 0
        assert summary["completed"] == summary["workflows"]


@pytest.mark.slow
async def test_an_undetected_wipe_fails_the_audit(lab: Lab) -> None:
    """The control: a lab that never asks whether Redis was wiped meets the same wipe, and
    the audit reports the loss as a loss instead of passing it."""
    # What the wipe took never completes, so the run waits out `finish_s` whatever it is; the
    # verdict below does not depend on how much completed by then.
    small = dataclasses.replace(CI, workflows=60, rate=10.0, finish_s=5)
    summary = await _run(lab, "redis-set", "none", profile=small, watch_wipes=False)
    assert summary["wipes"] == 1
    assert failed(summary)
    assert "wipe not detected" in summary["problems"]


@pytest.mark.parametrize("ending", ["killed by the run", "died", "hung"])
async def test_the_health_check_tells_a_kill_mid_question_from_a_death_and_a_hang(
        lab: Lab, tmp_path: Path, ending: str) -> None:
    """A worker that stops answering `mark` is hung; one that exits while asked died; one the
    run itself SIGKILLs while it is being asked (the monkey and the health check race) is
    neither. Each agent is stopped (SIGSTOP) first, so its reply cannot come before the end."""
    backend = BACKENDS["sqlite"]
    async with lab.place(backend) as (place, _):
        store = Store(backend, place, None, "chaos_counts", tmp_path / "chaos.db")
        chaos = Chaos(lab, backend, "-", CI, store, tmp_path, lambda *_: None)
        chaos.patience_s = 3.0
        async with chaos.stack:
            agent = await chaos.stack.enter_async_context(
                lab.agent(backend, place, role="client", housekeeping=False))
            worker = Worker(agent, 1)
            chaos.workers.append(worker)
            os.kill(agent.process.pid, signal.SIGSTOP)
            try:
                asking = asyncio.create_task(chaos.check_workers(final=False))
                await asyncio.sleep(0.5)  # the question is on its way, unanswered
                if ending == "killed by the run":
                    worker.killed = True
                    agent.kill()
                elif ending == "died":
                    os.kill(agent.process.pid, signal.SIGKILL)
                await asyncio.wait_for(asking, 30)
            finally:
                agent.kill()
    assert chaos.hung == (["worker 1"] if ending == "hung" else [])
    assert chaos.died == (["worker 1"] if ending == "died" else [])


async def test_a_worker_the_run_kills_while_another_is_asked_is_not_counted_dead(
        lab: Lab, tmp_path: Path) -> None:
    """The health check asks the live workers one after another: one the run SIGKILLs while an
    earlier one is being asked is gone by the run's own hand when its turn comes, not dead. The
    first is stopped (SIGSTOP) until the second is reaped, so the kill lands mid-check."""
    backend = BACKENDS["sqlite"]
    async with lab.place(backend) as (place, _):
        store = Store(backend, place, None, "chaos_counts", tmp_path / "chaos.db")
        chaos = Chaos(lab, backend, "-", CI, store, tmp_path, lambda *_: None)
        chaos.patience_s = 120.0  # the first is resumed long before: it is not hung
        async with chaos.stack:
            first, second = [
                Worker(await chaos.stack.enter_async_context(
                    lab.agent(backend, place, role="client", housekeeping=False)), serial)
                for serial in (1, 2)]
            chaos.workers += [first, second]
            os.kill(first.agent.process.pid, signal.SIGSTOP)
            try:
                asking = asyncio.create_task(chaos.check_workers(final=False))
                await asyncio.sleep(0.5)  # the check has begun: the first is being asked
                second.killed = True
                second.agent.kill()
                await second.agent.process.wait()
            finally:
                os.kill(first.agent.process.pid, signal.SIGCONT)
            await asyncio.wait_for(asking, 120)
            first.agent.kill()
    assert chaos.died == []
    assert chaos.hung == []


async def test_a_worker_dead_before_the_run_kills_it_is_still_counted_dead(
        lab: Lab, tmp_path: Path) -> None:
    """The run's own kills are not deaths, but a worker that had died by itself before the
    run chose it to kill is one: the kill must not hide it."""
    backend = BACKENDS["sqlite"]
    async with lab.place(backend) as (place, _):
        store = Store(backend, place, None, "chaos_counts", tmp_path / "chaos.db")
        chaos = Chaos(lab, backend, "-", CI, store, tmp_path, lambda *_: None)
        async with chaos.stack:
            await store.prepare()
            worker = await chaos.start_worker()
            os.kill(worker.agent.process.pid, signal.SIGKILL)  # not the run's doing
            await worker.agent.process.wait()
            await chaos.kill_worker()
            await chaos.check_workers(final=True)
    assert chaos.died == ["worker 1"]


async def test_the_api_answers_a_retry_that_a_live_claim_holds_off_as_an_error(lab: Lab) -> None:
    """`durable.retry` of a workflow a live claim holds raises `Contended`, which is no
    `Exception`: the API agent answers it as the error it is (the caller asks again: the claim
    may be its own retry, cut off halfway), instead of leaving the request unanswered until
    its timeout."""
    backend = BACKENDS["sqlite"]
    async with lab.place(backend) as (place, _), open_durable(backend.url(place)) as durable, \
            lab.agent(backend, place, role="client", housekeeping=False) as api:
        holder = await durable.checkpointer.claim(
            "held-1", timedelta(minutes=5), timedelta(minutes=5))
        assert holder is not None
        with pytest.raises(AgentFailed, match="Contended"):
            await api.request("retry", timeout=120, workflow="held-1")


@pytest.mark.slow
def test_the_command_writes_its_results_and_exits_zero(tmp_path: Path) -> None:
    if _binaries("redis") is not None:
        pytest.skip("no redis-server")
    done = subprocess.run(
        [sys.executable, "-m", "experiments", "chaos", "--profile", "ci", "--workflows", "40",
         "--backends", "sqlite", "--results", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "chaos.csv").read_text().splitlines()
    assert table[0].startswith("experiment,backend,")
    assert any(",completed," in line and ",40," in line for line in table), table
    meta = json.loads((tmp_path / "chaos.json").read_text())
    assert meta["mode"] == "ci" and meta["failed"] == 0
    assert set(meta["configurations"]) == {"sqlite"}


def test_an_unknown_backend_is_refused_by_name() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "experiments", "chaos", "--backends", "memory"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert "memory" in done.stderr and "redis-stream" in done.stderr

