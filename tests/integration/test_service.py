"""End to end: a real API process and two real worker processes over a shared store, driven
over HTTP. One worker is SIGKILLed mid-payout; the other finishes it, and no line is captured
twice. A worker sent SIGTERM mid-capture finishes its captures before it exits, and a worker
started before its store waits for it. Effects are counted through the journal file the
workers' fake gateway appends to.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from durability.connect import open_durable
from experiments.harness.servers import free_port
from tests.integration.conftest import POSTGRES_URL, unavailable

ROOT = Path(__file__).resolve().parents[2]
SKUS = ["alpha", "bravo", "charlie"]


class Processes:
    """Starts `python -m <module>` processes and stops whatever is left of them."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, module: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.started.append(process)
        return process

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def wait_for(check: Callable[[], bool], what: str, within: float = 30.0) -> None:
    """Poll `check` until true; fail naming `what` after `within` (a bound on a hang)."""
    give_up = time.monotonic() + within
    while not check():
        if time.monotonic() > give_up:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


def journal(path: Path) -> list[dict[str, str]]:
    """The effects log: one dict per line, `effect` plus its key=value fields."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        effect, *pairs = line.split()
        entries.append({"effect": effect, **dict(pair.split("=", 1) for pair in pairs)})
    return entries


def answering(
    http: httpx.Client, api: subprocess.Popen[bytes], processes: Processes
) -> Callable[[], bool]:
    """Whether the API process answers yet (failing at once, with its log, if it died)."""

    def answers() -> bool:
        assert api.poll() is None, processes.log("api")
        try:
            return http.get("/orders/none").status_code == 404
        except httpx.TransportError:
            return False

    return answers


@pytest.mark.slow
def test_a_worker_killed_mid_payout_is_taken_over_with_no_capture_twice(
    shared_store_url: str, processes: Processes, tmp_path: Path, tag: str
) -> None:
    effects = tmp_path / "effects.log"
    port = free_port()
    api = processes.start(
        "api", "integration.api", "--store", shared_store_url, "--port", str(port), "--lease", "1s"
    )
    worker_args = ["--store", shared_store_url, "--lease", "1s", "--tick", "200ms"]
    worker_args += ["--settlement", "1s", "--capture-delay", "1s", "--effects-log", str(effects)]
    workers = [processes.start(f"worker-{n}", "integration.worker", *worker_args) for n in (1, 2)]
    order = f"{tag}-payout"

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

        def view() -> dict[str, object]:
            got = http.get(f"/orders/{order}")
            assert got.status_code == 200, got.text
            return dict(got.json())

        def recorded(key: str) -> bool:
            history = view()["history"]
            assert isinstance(history, list)
            return key in [entry["key"] for entry in history]

        wait_for(answering(http, api, processes), "the API answers")
        lines = [{"sku": sku, "quantity": 1, "cents": 100} for sku in SKUS]
        submitted = http.post(
            "/orders", json={"customer": "ada", "lines": lines}, headers={"Idempotency-Key": order}
        )
        assert submitted.status_code == 201, submitted.text

        # The first line is captured and recorded; the second capture is now under way.
        wait_for(lambda: recorded("captured:alpha"), "the first line is captured")
        (first,) = [e for e in journal(effects) if e["effect"] == "capture"]
        victim = next(w for w in workers if w.pid == int(first["pid"]))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        survivor = next(w for w in workers if w is not victim)

        wait_for(lambda: view()["stage"] == "awaiting approval", "the payout awaits approval")
        confirmed = http.post(f"/orders/{order}/confirmation", json={"approved_by": "dana"})
        assert confirmed.status_code == 202, confirmed.text
        wait_for(lambda: view()["stage"] == "paid", "the payout is paid")
        final = view()

    done = journal(effects)
    captures = Counter(e["sku"] for e in done if e["effect"] == "capture")
    assert captures == Counter(SKUS), done
    assert [e["effect"] for e in done].count("payout") == 1
    # The survivor really took over: it captured what the victim had not.
    assert any(e["pid"] == str(survivor.pid) for e in done if e["effect"] == "capture")
    assert "captured:alpha" in [entry["key"] for entry in final["history"]]  # type: ignore[union-attr]

    # SIGTERM drains both remaining processes gracefully.
    for process in (survivor, api):
        process.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=20) == 0, processes.log(f"worker-{workers.index(survivor) + 1}")
    assert api.wait(timeout=20) == 0, processes.log("api")
    assert "worker drained" in processes.log(f"worker-{workers.index(survivor) + 1}")


def test_a_declined_payout_fails_is_listed_and_is_retried_through_the_api(
    shared_store_url: str, processes: Processes, tmp_path: Path, tag: str
) -> None:
    """The service page's failed order: the worker declines the first capture (`--declines 1`), the
    order is listed as failed with its error, and `POST /orders/{id}/retry` runs it again from
    its last recorded step, so the one capture that happened happened once."""
    effects = tmp_path / "effects.log"
    port = free_port()
    api = processes.start(
        "api", "integration.api", "--store", shared_store_url, "--port", str(port)
    )
    processes.start(
        "worker", "integration.worker", "--store", shared_store_url, "--settlement", "1h",
        "--declines", "1", "--effects-log", str(effects),
    )
    order = f"{tag}-declined"

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

        def failed() -> list[dict[str, object]]:
            got = http.get("/orders", params={"state": "failed", "prefix": tag})
            assert got.status_code == 200, got.text
            return list(got.json()["orders"])

        def stage() -> object:
            return http.get(f"/orders/{order}").json()["stage"]

        wait_for(answering(http, api, processes), "the API answers")
        submitted = http.post(
            "/orders", json=order_record("piano"), headers={"Idempotency-Key": order}
        )
        assert submitted.status_code == 201, submitted.text
        wait_for(lambda: bool(failed()), "the order is listed as failed", within=60)
        (listed,) = failed()
        assert listed["workflow"] == order
        failure = listed["failure"]
        assert isinstance(failure, dict)
        assert failure["type"] == "CaptureDeclined" and failure["attempt"] == 1
        assert failure["step"] == "captured:piano"
        assert stage() == "failed"

        retried = http.post(f"/orders/{order}/retry")
        assert retried.status_code == 202, retried.text
        assert retried.json() == {"id": order, "retried": True}
        wait_for(lambda: stage() == "settling", "the retried order settles", within=60)
        assert failed() == []
        keys = [entry["key"] for entry in http.get(f"/orders/{order}").json()["history"]]

    assert keys.index("engine:failure:000001") < keys.index("engine:retry:000001")
    assert keys.index("engine:retry:000001") < keys.index("captured:piano")
    # Declined, then captured: two attempts began, one capture happened.
    assert effects_of(effects, "capturing") == Counter({(order, "piano"): 2})
    assert effects_of(effects, "capture") == Counter({(order, "piano"): 1})


# --- stopping and starting a worker process -----------------------------------------------------


def order_record(*skus: str) -> dict[str, object]:
    """A payout's submission as the API records it."""
    lines = [{"sku": sku, "quantity": 1, "cents": 100} for sku in skus]
    return {"kind": "payout", "customer": "ada", "lines": lines}


def arrive(url: str, *values: tuple[str, str, object]) -> None:
    """`durable.arrive` each `(workflow, key, value)` from this process, as an API would."""

    async def send() -> None:
        async with open_durable(url, lease=timedelta(seconds=1)) as durable:
            for workflow, key, value in values:
                await durable.arrive(workflow, key, value)

    asyncio.run(send())


def effects_of(path: Path, effect: str) -> Counter[tuple[str, str]]:
    return Counter((e["workflow"], e["sku"]) for e in journal(path) if e["effect"] == effect)


def test_a_worker_sent_sigterm_mid_step_finishes_its_steps_and_exits(
    shared_store_url: str, processes: Processes, tmp_path: Path, tag: str
) -> None:
    effects = tmp_path / "effects.log"
    worker_args = ["--store", shared_store_url, "--lease", "1s", "--tick", "200ms"]
    worker_args += ["--settlement", "1s", "--capture-delay", "700ms", "--grace", "20s"]
    worker_args += ["--effects-log", str(effects)]
    first = processes.start("worker-1", "integration.worker", *worker_args)
    orders = [f"{tag}-{n}" for n in range(2)]
    skus = ["alpha", "bravo"]
    arrive(shared_store_url, *((order, "order", order_record(*skus)) for order in orders))

    # Both orders are inside their first capture when the deploy's SIGTERM arrives.
    wait_for(
        lambda: {w for w, _ in effects_of(effects, "capturing")} == set(orders),
        "each order's first capture began",
    )
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0, processes.log("worker-1")
    # Every capture it began, it finished: nothing was cut mid-step.
    assert effects_of(effects, "capturing") == effects_of(effects, "capture")
    assert "draining" in processes.log("worker-1")
    assert "worker drained" in processes.log("worker-1")

    # The next worker carries on from the records: it captures nothing again, and pays.
    second = processes.start("worker-2", "integration.worker", *worker_args)
    arrive(shared_store_url, *((order, "approved-by", "dana") for order in orders))
    wait_for(
        lambda: len([e for e in journal(effects) if e["effect"] == "payout"]) == len(orders),
        "every order is paid",
    )
    once = Counter({(order, sku): 1 for order in orders for sku in skus})
    assert effects_of(effects, "capturing") == once
    assert effects_of(effects, "capture") == once
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0, processes.log("worker-2")


@contextlib.contextmanager
def database_later(name: str) -> Iterator[Callable[[], None]]:
    """`create()` makes the Postgres database `name` (not there before); dropped after."""
    import psycopg

    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as error:
        unavailable(f"PostgreSQL at {POSTGRES_URL} does not answer: {error}")

    def create() -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')

    try:
        yield create
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("store", ["redis", "postgres", "sqlite"])
def test_a_worker_process_started_before_its_store_waits_for_it(
    store: str, processes: Processes, tmp_path: Path, tag: str
) -> None:
    from tests.stores.redis.conftest import redis_server_on, spare_port

    effects = tmp_path / "effects.log"
    port = spare_port()
    later = tmp_path / "mounted-later"  # the SQLite file's directory, not there yet
    database = f"durability_it_{tag}"  # the Postgres database, not created yet
    if store == "redis":
        url = f"redis://127.0.0.1:{port}/0?scheduler=stream&namespace={tag}"
    elif store == "postgres":
        url = urlunsplit(urlsplit(POSTGRES_URL)._replace(path=f"/{database}"))
    else:
        url = f"sqlite:///{later / 'store.db'}"
    with contextlib.ExitStack() as up:
        create = up.enter_context(database_later(database)) if store == "postgres" else None
        worker = processes.start(
            "worker", "integration.worker", "--store", url, "--effects-log", str(effects)
        )
        wait_for(lambda: processes.log("worker").count("store not ready") >= 2, "two tries")
        assert worker.poll() is None, processes.log("worker")

        if store == "redis":
            up.enter_context(redis_server_on(port, tmp_path))
        elif create is not None:
            create()
        else:
            later.mkdir()
        wait_for(lambda: "worker ready" in processes.log("worker"), "the worker opens its store")
        order = f"{tag}-late"
        arrive(url, (order, "order", order_record("alpha")))
        wait_for(lambda: effects_of(effects, "capture")[(order, "alpha")] == 1, "it is captured")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, processes.log("worker")


def test_the_api_s_own_worker_on_memory_drains_its_steps_on_sigterm(
    processes: Processes, tmp_path: Path, tag: str
) -> None:
    effects = tmp_path / "effects.log"
    port = free_port()
    api = processes.start(
        "api", "integration.api", "--store", "memory://", "--port", str(port),
        "--capture-delay", "700ms", "--grace", "20s", "--effects-log", str(effects),
    )  # fmt: skip
    order = f"{tag}-memory"
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

        wait_for(answering(http, api, processes), "the API answers")
        lines = [{"sku": sku, "quantity": 1, "cents": 100} for sku in ("alpha", "bravo")]
        submitted = http.post(
            "/orders", json={"customer": "ada", "lines": lines}, headers={"Idempotency-Key": order}
        )
        assert submitted.status_code == 201, submitted.text
    wait_for(lambda: bool(effects_of(effects, "capturing")), "the first capture began")
    api.send_signal(signal.SIGTERM)
    assert api.wait(timeout=30) == 0, processes.log("api")
    # The capture under way when the signal came was finished, not cut.
    assert effects_of(effects, "capture")[(order, "alpha")] == 1
    assert effects_of(effects, "capturing") == effects_of(effects, "capture")
