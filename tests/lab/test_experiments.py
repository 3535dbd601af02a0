"""The lab: every experiment produces well-formed rows, a backend that cannot be had is skipped
with its reason, results and figures are written, and an interrupted run leaves nothing behind.

Timings are never asserted: these check the shape of what an experiment returns, not how fast
anything was.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from experiments import EXPERIMENTS
from experiments.commands.runner import module, run, skip_reason
from experiments.harness.backends import BACKENDS, select
from experiments.harness.lab import Lab
from experiments.harness.servers import Servers
from experiments.results import load, metadata

ROOT = Path(__file__).resolve().parents[2]

#: The metrics each experiment must produce for any backend it applies to.
EXPECTED = {
    "latency": {"submit_to_first_pass", "arrive_call", "never_started", "submissions"},
    "idle": {"window", "worker_cpu", "worker_requests", "worker_round_trips"},
    "growth": {"entries", "workflows", "wakeups", "completed"},
    "takeover": {"takeover", "lease_plus_tick"},
    "throughput": {"passes_per_s", "passes", "span", "worker_cpu_per_pass"},
    "scaling": {"cost"},
    "wakeups": {"races", "lost"},
    "contention": {"rate", "operations", "wal_bytes_per_op", "writes_per_op",
                   "statements_per_op", "statement_calls", "waiting"},
    "scale-out": {"passes_per_s", "node_cpu_per_pass", "node_commands_per_pass",
                  "busiest_share", "busiest_cpu_per_pass"},
    "lifecycle": {"cancel", "to_stopped", "after_effect", "to_result", "races", "both", "lost",
                  "revived"},
    "policies": {"firing_delay", "firings", "duplicates", "missing"},
}
#: The experiments that ask their question of one store alone (none of memory's or SQLite's).
ONE_STORE = ("contention",)
#: What needs a cluster's nodes, so runs on nothing else (tests/lab/test_scale_out.py).
CLUSTER_ONLY = ("scale-out",)


@pytest.fixture
async def lab() -> AsyncIterator[Lab]:
    servers = Servers(("url",))  # memory and SQLite need none
    try:
        yield Lab(servers, quick=True)
    finally:
        servers.close()


def _small(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """A configuration small enough for a test: the first one, shrunk where it has a size."""
    if name == "latency":
        return {**params, "rate": 40.0}
    if name == "scaling":
        return {**params, "size": 50}
    if name == "wakeups":
        return {**params, "races": 10}
    if name == "lifecycle":
        return {**params, "samples": 4, "races": 10}
    if name == "policies":
        return {**params, "firings": 8}
    return params


def _check(name: str, rows: list[dict[str, Any]]) -> None:
    assert rows, f"{name} returned no rows"
    for row in rows:
        assert {"metric", "value", "unit"} <= set(row), row
        assert isinstance(row["value"], int | float) and math.isfinite(row["value"]), row
        assert isinstance(row["unit"], str) and row["unit"], row
    assert EXPECTED[name] <= {row["metric"] for row in rows}


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("name", [n for n in EXPERIMENTS
                                  if n != "takeover" and n not in ONE_STORE
                                  and n not in CLUSTER_ONLY])
async def test_every_experiment_gives_well_formed_rows(lab: Lab, name: str, backend: str
                                                       ) -> None:
    chosen = BACKENDS[backend]
    experiment = module(name)
    params = _small(name, experiment.configurations(chosen, True)[0])
    async with lab.scope():
        rows = await experiment.measure(lab, chosen, params)
    _check(name, rows)
    if name == "latency":
        started = [r for r in rows if r["metric"] == "submit_to_first_pass"]
        never = next(r["value"] for r in rows if r["metric"] == "never_started")
        assert len(started) + never == next(r["value"] for r in rows
                                            if r["metric"] == "submissions")
        assert never == 0
        assert all(r["value"] > 0 for r in started)  # a pass starts after its submission
    if name == "throughput":
        passes = next(r["value"] for r in rows if r["metric"] == "passes")
        assert passes >= 400  # every preloaded workflow completed
    if name == "growth":
        completed = next(r["value"] for r in rows if r["metric"] == "completed")
        wakeups = next(r["value"] for r in rows if r["metric"] == "wakeups")
        assert completed >= wakeups  # every wakeup was a pass
        assert [r for r in rows if r["metric"] == "entries"][-1]["value"] == 0  # drained
    if name == "lifecycle":
        counted = {r["metric"]: r["value"] for r in rows if r["unit"] == "count"}
        assert counted["races"] == 10
        # One ending wins, every time: never both, never neither; a cancelled one stays so.
        assert counted["both"] == counted["lost"] == counted["revived"] == 0
        assert counted["cancel_won"] + counted["pass_won"] == 10
        timed = [r for r in rows if r["unit"] == "ms"]
        assert len([r for r in timed if r["metric"] == "to_stopped"]) == 3 * 4
        assert len([r for r in timed if r["metric"] == "to_result"]) == 4
        assert all(r["value"] >= 0 for r in timed if r["metric"] != "after_effect")


async def test_a_wakeup_given_without_a_wakeup_is_counted_lost(lab: Lab) -> None:
    experiment = module("wakeups")
    async with lab.scope():
        rows = await experiment.measure(lab, BACKENDS["memory"], {"races": 6, "wake": False})
    assert {r["metric"]: r["value"] for r in rows} == {"races": 6, "lost": 6}


async def test_takeover_measures_a_kill_on_sqlite(lab: Lab) -> None:
    experiment = module("takeover")
    chosen = BACKENDS["sqlite"]
    async with lab.scope():
        rows = await experiment.measure(lab, chosen, {"lease_s": 0.5, "phase": "after-write"})
    _check("takeover", rows)
    (took,) = [r["value"] for r in rows if r["metric"] == "takeover"]
    # Nothing can take the workflow over before the dead worker's claim lapses.
    assert took > 0.25


@pytest.mark.slow
async def test_a_backend_whose_server_cannot_be_had_is_skipped_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POSTGRES_URL", raising=False)
    servers = Servers(("url",))
    try:
        reason = skip_reason(Lab(servers, quick=True), BACKENDS["postgres"])
    finally:
        servers.close()
    assert reason is not None and "POSTGRES_URL" in reason
    failures = await run(["idle"], select(["memory", "postgres"]), quick=True,
                         sources=("url",), where=tmp_path, figures=True)
    assert failures == 0
    meta = metadata("idle", tmp_path)
    assert "postgres" in meta["skipped"] and "POSTGRES_URL" in meta["skipped"]["postgres"]
    frame = load("idle", tmp_path)
    assert set(frame["backend"]) == {"memory"}
    assert (tmp_path / "figures" / "idle.png").stat().st_size > 10_000
    for field in ("git_revision", "versions", "cores", "cpu_calibration_seconds", "started"):
        assert meta[field]


async def test_a_place_on_a_redis_the_lab_did_not_start_is_emptied_after() -> None:
    """On the user's own Redis (here the one on 6379) a place's keys go with the place: ours
    and a rival's; a key of another place whose tag starts the same stays."""
    import redis.asyncio as aioredis

    from durability.connect import open_durable

    servers = Servers(("port",))
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        lab = Lab(servers, quick=True)
        backend = BACKENDS["redis-set"]
        reason = skip_reason(lab, backend)
        if reason is not None:
            if os.environ.get("CI"):
                pytest.fail(f"CI has Redis on 6379: {reason}")
            pytest.skip(reason)
        async with lab.place(backend) as (place, server):
            assert server is not None and not server.private
            neighbour = f"lab-{place.tag}0:kept"  # the next-but-nine place's tag
            await client.set(neighbour, "1")
            await client.set(f"saq:job:lab-{place.tag}:job-1", "1")
            await client.zadd(f"lab-{place.tag}", {"arq-job": 1.0})  # arq's queue
            async with open_durable(backend.url(place)) as durable:
                for n in range(5):
                    await durable.arrive(f"placed-{n}", "go", n)
            during = [k async for k in client.scan_iter(match=f"*lab-{place.tag}[:}}]*")]
            assert len(during) >= 6
        after = [k async for k in client.scan_iter(match=f"*lab-{place.tag}[:}}]*")]
        assert after == []
        assert not await client.exists(f"lab-{place.tag}")
        assert await client.get(neighbour) == b"1"
        await client.delete(neighbour)
    finally:
        await client.aclose()
        servers.close()


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(
                int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def redis_binary() -> Iterator[None]:
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("needs a redis-server binary")
    yield


def test_an_interrupted_run_leaves_no_process_behind(tmp_path: Path, redis_binary: None
                                                     ) -> None:
    run_ = subprocess.Popen(
        [sys.executable, "-m", "experiments", "run", "latency", "--quick", "--backends",
         "redis-stream", "--sources", "binary", "--results", str(tmp_path), "--no-figures"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        # Wait until it has a server and agents of its own running: three processes or more.
        while time.monotonic() < deadline and len(seen) < 3:
            seen |= _descendants(run_.pid)
            time.sleep(0.1)
        assert len(seen) >= 3, "the run never started its server and agents"
        run_.send_signal(signal.SIGINT)
        assert run_.wait(60) == 130
    finally:
        if run_.poll() is None:
            run_.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in seen):
        time.sleep(0.1)
    assert not [pid for pid in seen if _alive(pid)], "processes outlived the interrupted run"


def _docker_answers() -> str | None:
    from experiments.harness import containers

    engine = containers.engine()
    if isinstance(engine, str):
        return engine
    for kind in ("redis7", "postgres"):
        if containers.image_for(kind) is None:
            return f"no {kind} image: python -m experiments images"
    return None


@pytest.mark.slow
async def test_an_experiment_runs_end_to_end_on_servers_in_containers(tmp_path: Path) -> None:
    reason = _docker_answers()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the lab on containers: {reason}")
        pytest.skip(reason)
    failures = await asyncio.wait_for(
        run(["idle"], select(["redis-stream", "postgres"]), quick=True,
            sources=("container",), where=tmp_path),
        240,
    )
    assert failures == 0
    meta = metadata("idle", tmp_path)
    assert not meta["skipped"], meta["skipped"]
    for backend in ("redis-stream", "postgres"):
        assert meta["servers"][backend]["source"].startswith("container ")
    frame = load("idle", tmp_path)
    assert set(frame["backend"]) == {"redis-stream", "postgres"}
    server = frame[frame["metric"] == "server_requests"]
    assert set(server["backend"]) == {"redis-stream", "postgres"}  # counted by the server


async def test_repeats_go_round_every_backend_and_rows_come_out_in_backend_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--repeat N` measures every backend once per round, so a slow spell of the machine
    falls on one repeat of each backend rather than on every repeat of a few."""
    import types

    from experiments.commands import runner

    measured: list[tuple[str, int]] = []
    fake = types.ModuleType("experiments.fake")
    fake.NAME, fake.TITLE = "fake", "a fake experiment"  # type: ignore[attr-defined]
    fake.configurations = lambda backend, quick: [{"size": 1}, {"size": 2}]  # type: ignore[attr-defined]

    async def measure(lab: Lab, backend: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        measured.append((backend.name, int(params["size"])))
        return [{"metric": "calls", "value": len(measured), "unit": "count"}]

    fake.measure = measure  # type: ignore[attr-defined]
    monkeypatch.setattr(runner, "module", lambda name: fake)
    failures = await run(["fake"], [BACKENDS["memory"], BACKENDS["sqlite"]], quick=False,
                         repeat=2, sources=("url",), where=tmp_path, figures=False)
    assert failures == 0
    assert measured == [("memory", 1), ("memory", 2), ("sqlite", 1), ("sqlite", 2)] * 2
    written = load("fake", tmp_path)
    assert list(written["backend"]) == ["memory"] * 4 + ["sqlite"] * 4
    assert sorted(written["repeat"].tolist()) == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.fixture
def postgres_binary() -> Iterator[None]:
    import shutil

    found = list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if shutil.which("initdb") is None and not found:
        pytest.skip("needs Postgres's initdb")
    yield


@pytest.mark.slow
async def test_throughput_on_a_private_postgres_counts_the_transactions_each_pass_commits(
    postgres_binary: None,
) -> None:
    """The server's own count of the transactions that wrote, read at once (not the
    statistics a backend reports up to a second late): a pass takes, records and finishes, at
    most three commits, fewer where the passes of a turn share them."""
    servers = Servers(("binary",))
    lab = Lab(servers, quick=True)
    try:
        async with lab.scope():
            rows = await module("throughput").measure(
                lab, BACKENDS["postgres"], {"processes": 1, "variant": "default", "workflows": 400}
            )
    finally:
        servers.close()
    _check("throughput", rows)
    metrics = {row["metric"]: row["value"] for row in rows}
    assert metrics["passes"] >= 400
    assert 0 < metrics["server_commits_per_pass"] <= 3


def _postgres_binaries() -> str | None:
    if shutil.which("initdb") is None and not list(
            Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        return "no initdb on PATH or under /usr/lib/postgresql"
    return None


@pytest.mark.parametrize("arm", ["notify", "silent"])
async def test_contention_accounts_for_a_tiny_run_on_a_private_postgres(arm: str) -> None:
    """Both phases are accounted for from the server's own counts; the silenced arm's
    statements are the store's own and send nothing, where the store as it is sends a
    notification for every arrival."""
    reason = _postgres_binaries()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI has the Postgres binaries: {reason}")
        pytest.skip(reason)
    servers = Servers(("binary",))
    try:
        lab = Lab(servers, quick=True)
        experiment = module("contention")
        assert experiment.configurations(BACKENDS["sqlite"], True) == []
        rows = await experiment.measure(lab, BACKENDS["postgres"], {
            "arm": arm, "partitions": 1, "processes": 1, "workflows": 30})
    finally:
        servers.close()
        shutil.rmtree(lab.scratch, ignore_errors=True)
    _check("contention", rows)
    by = {(r["phase"], r["metric"]): r["value"] for r in rows if "statement" not in r
          and "wait" not in r and "lock" not in r}
    assert by[("arrive", "operations")] == 30
    assert by[("work", "operations")] >= 30  # every workflow passed, some twice
    assert by[("arrive", "wal_bytes_per_op")] > 0 and by[("arrive", "writes_per_op")] >= 1
    arrivals = [r for r in rows if r["phase"] == "arrive" and r["metric"] == "statement_calls"
                and r["statement"].startswith("INSERT records + INSERT queue")]
    assert [r["value"] for r in arrivals] == [1.0]  # one statement an arrival
    heard = by[("arrive", "notifications_per_op")]
    assert heard == (1.0 if arm == "notify" else 0.0)


def test_a_contention_run_of_one_arm_without_statements_reads_as_no_statements() -> None:
    """`--set arm=partitioned` makes no `notify` rows, so no statement costs: the reader says
    there are none instead of failing on the missing column."""
    import pandas as pd

    from experiments.readers.summaries.contention import statements

    frame = pd.DataFrame([{"arm": "partitioned", "processes": 4, "phase": "work",
                           "metric": "deadlocks", "value": 0.0, "statement": None}])
    found = statements(frame, "notify", 4)
    assert found.empty
    assert "statement_calls" in found
