"""The retry policy, the failure records and their counting, and the worker's report of a
failure (on memory; the conformance suite holds every store to the rest)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durability.codec import as_int
from durability.failures import (
    FAILURE,
    MESSAGE_CHARS,
    RETRY,
    TRACEBACK_CHARS,
    Failure,
    Retry,
    attempt,
    describe,
    failed,
)
from durability.interfaces import ENGINE, check_key, claimed
from durability.memory import MemoryCheckpointer, MemoryScheduler
from durability.split import SplitDurable
from durability.stepwise import Run, StepTimeout
from durability.testing import Observed, passing
from durability.worker import work

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"attempts": 0}, ValueError),
        ({"attempts": True}, TypeError),
        ({"attempts": 2.0}, TypeError),
        ({"initial": timedelta(0)}, ValueError),
        ({"cap": timedelta(seconds=-1)}, ValueError),
        ({"initial": 1.0}, TypeError),
        ({"factor": 0.5}, ValueError),
        ({"factor": "2"}, TypeError),
        ({"jitter": 1.0}, ValueError),
        ({"jitter": -0.1}, ValueError),
        ({"on": (int,)}, TypeError),
        ({"on": ValueError}, TypeError),
    ],
)
def test_a_bad_retry_policy_is_refused_by_name(settings: dict[str, Any], error: type) -> None:
    with pytest.raises(error, match=next(iter(settings))):
        Retry(**settings)


def test_the_pause_grows_by_the_factor_up_to_the_cap_spread_by_the_jitter() -> None:
    policy = Retry(initial=timedelta(seconds=1), factor=3.0, cap=timedelta(seconds=20), jitter=0)
    assert [policy.pause(n).total_seconds() for n in (1, 2, 3, 4, 99)] == [1, 3, 9, 20, 20]
    spread = Retry(initial=timedelta(seconds=10), jitter=0.1)
    assert spread.pause(1, draw=0.0) == timedelta(seconds=9)
    assert spread.pause(1, draw=0.5) == timedelta(seconds=10)
    assert timedelta(seconds=10.99) < spread.pause(1, draw=0.9999) <= timedelta(seconds=11)
    assert all(timedelta(seconds=9) <= spread.pause(1) <= timedelta(seconds=11) for _ in range(50))


def test_a_group_is_retried_only_if_every_failure_in_it_is() -> None:
    policy = Retry(on=(LookupError,))
    assert policy.retries(KeyError("k"))
    assert not policy.retries(ValueError("v"))
    assert policy.retries(ExceptionGroup("g", [KeyError("a"), IndexError("b")]))
    assert not policy.retries(ExceptionGroup("g", [KeyError("a"), ValueError("b")]))


def test_a_failure_is_described_within_bounds() -> None:
    try:
        raise RuntimeError("x" * 10_000)
    except RuntimeError as error:
        kind, message, trace = describe(error)
    assert kind == "RuntimeError"
    assert len(message) == MESSAGE_CHARS
    assert len(trace) <= TRACEBACK_CHARS and trace.rstrip().endswith("x")
    group = ExceptionGroup("g", [KeyError("first"), ValueError("second")])
    assert describe(group)[0] == "KeyError"
    assert "1 more" in describe(group)[1]


def _failure(step: str | None, attempt: int, retry_at: datetime | None = None) -> object:
    return Failure(step, "KeyError", "k", "", attempt, NOW, retry_at).to_record()


def test_attempts_are_counted_per_step_from_the_records_and_a_retry_starts_them_again() -> None:
    later = NOW + timedelta(seconds=1)
    records: dict[str, object] = {"go": True}
    assert attempt(records, "charge") == 1 and failed(records) is None
    records[f"{FAILURE}000001"] = _failure("charge", 1, later)
    records[f"{FAILURE}000002"] = _failure(None, 1, later)
    assert attempt(records, "charge") == 2 and attempt(records, None) == 2
    assert attempt(records, "ship") == 1
    assert failed(records) is None  # every failure so far is to be retried
    records[f"{FAILURE}000003"] = _failure("charge", 2)
    dead = failed(records)
    assert dead is not None and dead.attempt == 2 and dead.step == "charge"
    records[f"{RETRY}000001"] = {"at": NOW.isoformat()}
    assert failed(records) is None and attempt(records, "charge") == 1


def test_a_failure_record_comes_back_as_it_was_written() -> None:
    written = Failure("charge", "KeyError", "no sku", "Traceback", 3, NOW, NOW)
    assert Failure.from_record(written.to_record()) == written
    with pytest.raises(TypeError):
        Failure.from_record(["not", "a", "mapping"])


async def test_nothing_outside_a_pass_may_write_the_engine_s_keys() -> None:
    checkpointer = MemoryCheckpointer()
    with pytest.raises(ValueError, match="engine"):
        check_key(f"{ENGINE}failure:000001")
    with pytest.raises(ValueError, match="engine"):
        await checkpointer.supply("wf", f"{FAILURE}000001", {"forged": True})
    holder = await claimed(checkpointer, "wf")
    run = passing(holder, checkpointer)
    with pytest.raises(ValueError, match="engine"):
        await run.step(f"{ENGINE}mine", lambda: 1, as_int)
    # The worker records its own under the claim, through `record`.
    assert (await checkpointer.record(holder, f"{FAILURE}000001", {"a": 1})).first


async def test_a_step_refuses_a_bad_timeout_or_retry_before_running_anything() -> None:
    checkpointer = MemoryCheckpointer()
    run = passing(await claimed(checkpointer, "wf"), checkpointer)
    ran: list[int] = []

    def effect() -> int:
        ran.append(1)
        return 1

    with pytest.raises(ValueError, match="timeout"):
        await run.step("s", effect, as_int, timeout=timedelta(0))
    with pytest.raises(TypeError, match="timeout"):
        await run.step("s", effect, as_int, timeout=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retry"):
        await run.step("s", effect, as_int, retry=3)  # type: ignore[arg-type]
    assert ran == []
    with pytest.raises(TypeError, match="retry"):
        await work(SplitDurable(checkpointer, MemoryScheduler()), _body, retry=3)  # type: ignore[arg-type]


async def _body(run: Run) -> None:
    return None


async def test_a_failure_is_logged_once_per_attempt_with_the_workflow_and_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    durable = SplitDurable(MemoryCheckpointer(), MemoryScheduler(lease=timedelta(seconds=2)))
    observed = Observed(10)
    policy = Retry(attempts=2, initial=timedelta(milliseconds=20), jitter=0)

    def broken() -> int:
        raise LookupError("no such sku")

    async def body(run: Run) -> int:
        return await run.step("charge", broken, as_int)

    caplog.set_level(logging.INFO, logger="durability.worker")
    task = asyncio.create_task(
        work(durable, body, observer=observed, tick=timedelta(milliseconds=50), retry=policy)
    )
    try:
        await durable.arrive("logged", "go", True)
        await observed.until(lambda: bool(observed.of("logged", "dead")))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert "logged" in errors[0] and "attempt 1" in errors[0] and "trying again" in errors[0]
    assert "logged" in errors[1] and "attempt 2" in errors[1] and "for good" in errors[1]
    kinds = observed.kinds("logged")
    assert kinds == [
        "delivered", "started", "failed", "retrying", "delivered", "started", "failed", "dead"
    ]
    (retrying,) = observed.of("logged", "retrying")
    assert retrying.attempt == 1 and retrying.due is not None


class _CutTwice(MemoryCheckpointer):
    """A memory checkpointer whose connection is cut under the first two finishing writes."""

    cuts = 2

    async def settle_release(self, holder: Any, state: str, detail: Any) -> bool:
        if self.cuts:
            self.cuts -= 1
            raise ConnectionError("the connection was cut under the finish")
        return await super().settle_release(holder, state, detail)

    async def end_settle_release(
        self, holder: Any, key: str, value: object, state: str, detail: Any
    ) -> bool:
        # A pass that fails for good finishes with its ending: the same finishing write.
        if self.cuts:
            self.cuts -= 1
            raise ConnectionError("the connection was cut under the finish")
        return await super().end_settle_release(holder, key, value, state, detail)


async def test_a_finish_cut_off_is_asked_again_so_the_failed_standing_is_not_lost() -> None:
    # Before: the worker logged the cut and finished without the standing, so `status` went on
    # saying the workflow was queued while its records said it had failed for good.
    checkpointer = _CutTwice()
    durable = SplitDurable(checkpointer, MemoryScheduler(lease=timedelta(seconds=2)))
    observed = Observed(10)

    def broken() -> int:
        raise LookupError("no such sku")

    async def body(run: Run) -> int:
        return await run.step("charge", broken, as_int)

    task = asyncio.create_task(
        work(durable, body, observer=observed, tick=timedelta(milliseconds=50))
    )
    try:
        await durable.arrive("cut", "go", True)
        await observed.until(lambda: bool(observed.of("cut", "dead")))
        async with asyncio.timeout(10):
            while True:
                status = await durable.status("cut")
                if status.state == "failed":
                    break
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert checkpointer.cuts == 0
    assert status.failure is not None and status.failure.message == "no such sku"
    assert await checkpointer.load("cut") and await durable.scheduler.next_ready(
        timedelta(milliseconds=10)
    ) is None


async def test_a_synchronous_step_is_bounded_by_its_timeout_too() -> None:
    # It runs in a thread of its own: the pass stops waiting at the timeout, the thread (which
    # nothing can stop) is left to end, and what it returns is dropped.
    checkpointer = MemoryCheckpointer()
    run = passing(await claimed(checkpointer, "sync-timed"), checkpointer)
    release = threading.Event()
    finished = threading.Event()

    def stuck() -> int:
        release.wait(60)
        finished.set()
        return 1

    with pytest.raises(StepTimeout):
        await run.step("stuck", stuck, as_int, timeout=timedelta(milliseconds=50))
    assert not finished.is_set()  # the step ended while its effect was still blocked
    release.set()
    await asyncio.to_thread(finished.wait, 60)
    assert "stuck" not in await checkpointer.load("sync-timed")

    def own_timeout() -> int:
        raise TimeoutError("the gateway's socket timed out")

    with pytest.raises(TimeoutError, match="gateway") as raised:
        await run.step("own", own_timeout, as_int, timeout=timedelta(seconds=30))
    assert not isinstance(raised.value, StepTimeout)  # the effect's failure, not the step's
    assert await run.step("quick", lambda: 7, as_int, timeout=timedelta(seconds=30)) == 7
