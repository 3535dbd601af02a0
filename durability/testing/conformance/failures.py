"""Failures and retries: what every `Durable` owes a workflow that fails (`FailuresContract`
gathers them with what it answers about any workflow, `standings.StandingsContract`).

Mixed into `DurableContract`, so every store's suite (and a third party's) runs it over the
same `durable` fixture, the retries and timeouts through the real `work` loop. Backoffs here
are tens of milliseconds and checked from below only: a loaded machine makes them longer,
never shorter.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from durability.codec import as_int, as_text
from durability.endings import ENDING
from durability.failures import FAILURE, RETRY, Retry
from durability.interfaces import Durable, Scheduler
from durability.status import retry
from durability.stepwise import Run, StepTimeout
from durability.testing import Observed
from durability.testing.conformance.claims import LONG, fresh
from durability.testing.conformance.standings import (
    StandingsContract,
    failure_record,
    inspected,
    ledger,
    reaches,
)
from durability.testing.conformance.working import PATIENCE, working

#: Three tries, 50 ms then 100 ms apart, exactly (no jitter).
FAST = Retry(attempts=3, initial=timedelta(milliseconds=50), factor=2.0, jitter=0.0)


class RetriesContract:
    """A failing step is tried again after its backoff, its attempts counted in the store, and
    a step past its timeout is a failed attempt like any other. Needs `durable`."""

    async def test_a_failing_step_is_retried_after_its_backoff_until_it_succeeds(
        self, durable: Durable
    ) -> None:
        workflow = fresh("retried")
        observed = Observed(PATIENCE)
        tries: list[float] = []
        before: Counter[str] = Counter()

        def flaky() -> int:
            tries.append(time.monotonic())
            if len(tries) < 3:
                raise LookupError(f"try {len(tries)}")
            return 7

        def first() -> int:
            before["first"] += 1
            return 1

        async def body(run: Run) -> int:
            one = await run.step("first", first, as_int)
            return one + await run.step("flaky", flaky, as_int)

        async with working(durable, body, observed, pool=2, retry=FAST):
            await durable.arrive(workflow, "go", True)
            await observed.until(lambda: observed.completed(workflow))
            await reaches(durable, workflow, "completed")

        assert [event.attempt for event in observed.of(workflow, "failed")] == [1, 2]
        assert len(observed.of(workflow, "retrying")) == 2
        assert observed.of(workflow, "dead") == []
        # After its backoff, never at once: 50 ms, then 100 ms (from below only).
        assert tries[1] - tries[0] >= 0.045
        assert tries[2] - tries[1] >= 0.095
        assert before == Counter(first=1)  # a recorded step is not run again by a retry
        keys = [written.key for written in await durable.checkpointer.history(workflow)]
        assert keys == ["go", "first", f"{FAILURE}000001", f"{FAILURE}000002", "flaky",
                        f"{ENDING}000000"]
        await durable.delete(workflow)

    async def test_the_attempt_count_lives_in_the_store_so_another_worker_continues_it(
        self, durable: Durable
    ) -> None:
        workflow = fresh("counted")
        policy = Retry(attempts=2, initial=timedelta(minutes=5), jitter=0.0)
        first, second = Observed(PATIENCE), Observed(PATIENCE)

        def doomed() -> int:
            raise LookupError("the gateway is down")

        async def body(run: Run) -> int:
            return await run.step("charge", doomed, as_int)

        async with working(durable, body, first, pool=1, retry=policy):
            await durable.arrive(workflow, "go", True)
            await first.until(lambda: bool(first.of(workflow, "retrying")))
            waiting = await reaches(durable, workflow, "sleeping")
        assert waiting.state == "sleeping" and waiting.failure is not None
        assert waiting.failure.attempt == 1 and waiting.failure.type == "LookupError"
        assert waiting.until is not None and waiting.until > datetime.now(UTC)

        # Another worker (a new `work`, as after a crash) takes the next attempt: the last one.
        async with working(durable, body, second, pool=1, retry=policy):
            await durable.arrive(workflow, "nudge", True)
            await second.until(lambda: bool(second.of(workflow, "dead")))
            failed = await reaches(durable, workflow, "failed")
        assert [event.attempt for event in second.of(workflow, "failed")] == [2]
        assert failed.state == "failed" and failed.failure is not None
        assert failed.failure.attempt == 2 and failed.failure.step == "charge"
        assert "the gateway is down" in failed.failure.message
        await durable.delete(workflow)

    async def test_a_step_whose_result_cannot_be_recorded_is_the_step_that_failed(
        self, durable: Durable
    ) -> None:
        workflow = fresh("unencodable")
        observed = Observed(PATIENCE)

        async def body(run: Run) -> object:
            return await run.step("receipt", lambda: {"at": {1, 2}}, lambda value: value)

        async with working(durable, body, observed, pool=1):
            await durable.arrive(workflow, "go", True)
            status = await reaches(durable, workflow, "failed")
        assert status.failure is not None
        assert status.failure.type == "Unencodable" and status.failure.step == "receipt"
        assert "receipt" not in await durable.checkpointer.load(workflow)
        await durable.delete(workflow)

    async def test_a_step_timeout_cancels_the_effect_and_counts_as_a_failed_attempt(
        self, durable: Durable
    ) -> None:
        workflow = fresh("timed")
        observed = Observed(PATIENCE)
        cancelled: list[int] = []
        twice = Retry(attempts=2, initial=timedelta(milliseconds=20), jitter=0.0)

        async def slow() -> int:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(1)
                raise
            return 1

        async def body(run: Run) -> int:
            return await run.step(
                "slow", slow, as_int, timeout=timedelta(milliseconds=100), retry=twice
            )

        async with working(durable, body, observed, pool=1):
            await durable.arrive(workflow, "go", True)
            await observed.until(lambda: bool(observed.of(workflow, "dead")))
            status = await reaches(durable, workflow, "failed")

        failed = observed.of(workflow, "failed")
        assert [event.attempt for event in failed] == [1, 2]
        assert all(isinstance(event.error, StepTimeout) for event in failed)
        assert cancelled == [1, 1]  # the effect itself was cancelled, each time
        assert status.failure is not None and status.failure.type == "StepTimeout"
        await durable.delete(workflow)


class FailedStateContract:
    """A workflow whose failures the policy does not retry has failed: a state of its own that
    nothing reruns until `retry` asks. Needs `durable`."""

    async def test_a_failure_the_policy_does_not_retry_fails_the_workflow_and_nothing_reruns_it(
        self, durable: Durable
    ) -> None:
        workflow = fresh("refused")
        observed = Observed(PATIENCE)
        ran: Counter[str] = Counter()
        policy = Retry(attempts=5, initial=timedelta(milliseconds=20), on=(LookupError,))

        def refuse() -> int:
            ran["charge"] += 1
            raise ValueError("card number is malformed")

        async def body(run: Run) -> int:
            return await run.step("charge", refuse, as_int)

        async with working(durable, body, observed, pool=1, retry=policy):
            await durable.arrive(workflow, "go", True)
            await observed.until(lambda: bool(observed.of(workflow, "dead")))
            await reaches(durable, workflow, "failed")
            # Input that arrives for a failed workflow wakes a pass that runs nothing.
            await durable.arrive(workflow, "poke", True)
            await observed.until(lambda: len(observed.of(workflow, "dead")) == 2)

        assert ran == Counter(charge=1)
        assert [event.attempt for event in observed.of(workflow, "failed")] == [1]
        assert observed.of(workflow, "retrying") == []
        status = await inspected(durable).status(workflow)
        assert status.state == "failed" and status.failure is not None
        assert status.failure.type == "ValueError" and status.failure.step == "charge"
        assert "card number is malformed" in status.failure.message
        assert "ValueError" in status.failure.traceback
        page = await inspected(durable).list(state="failed", prefix=workflow)
        assert [found.workflow for found in page.statuses] == [workflow]
        assert page.statuses[0].failure == status.failure
        await durable.delete(workflow)

    async def test_retry_runs_a_failed_workflow_again_from_its_last_recorded_step(
        self, durable: Durable
    ) -> None:
        workflow = fresh("again")
        observed = Observed(PATIENCE)
        ran: Counter[str] = Counter()
        broken = [True]

        def before() -> str:
            ran["before"] += 1
            return "done"

        def flaky() -> str:
            ran["flaky"] += 1
            if broken[0]:
                raise LookupError("not yet")
            return "fixed"

        async def body(run: Run) -> str:
            await run.step("before", before, as_text)
            return await run.step("flaky", flaky, as_text)

        durable_ = inspected(durable)
        assert await durable_.retry(fresh("never-ran")) is False
        async with working(durable, body, observed, pool=1):  # the default: one attempt
            await durable.arrive(workflow, "go", True)
            await observed.until(lambda: bool(observed.of(workflow, "dead")))
            await reaches(durable, workflow, "failed")
            broken[0] = False
            assert await durable_.retry(workflow) is True
            await observed.until(lambda: observed.completed(workflow))
            await reaches(durable, workflow, "completed")

        assert ran == Counter(before=1, flaky=2)
        assert await durable_.retry(workflow) is False  # it has not failed (any more)
        keys = [written.key for written in await durable.checkpointer.history(workflow)]
        # Each epoch's ending after its last record: the failure's, then (after the retry) the
        # completion's.
        assert keys == ["go", "before", f"{FAILURE}000001", f"{ENDING}000000", f"{RETRY}000001",
                        "flaky", f"{ENDING}000001"]
        await durable.delete(workflow)

    async def test_a_retry_cut_off_before_its_wakeup_is_made_ready_when_asked_again(
        self, durable: Durable
    ) -> None:
        """The store answered the retry's record, then the caller lost it before the wakeup
        (its connection cut, its process killed): asking again must not say "not failed" and
        leave the workflow queued with nothing to run it."""
        workflow = fresh("cut-retry")
        holder = await durable.checkpointer.claim(workflow, LONG, LONG)
        assert holder is not None
        await durable.checkpointer.record(holder, f"{FAILURE}000001", failure_record("gone"))
        assert await ledger(durable).settle(holder, "failed", {"failure": failure_record("gone")})
        await durable.checkpointer.release(holder)

        class Unreachable:
            lease = durable.scheduler.lease

            async def make_ready(self, workflow: str) -> None:
                raise ConnectionError("the store went away before the wakeup was sent")

        with pytest.raises(ConnectionError):
            await retry(durable.checkpointer, cast(Scheduler, Unreachable()), workflow)
        assert (await inspected(durable).status(workflow)).state == "queued"

        observed = Observed(PATIENCE)

        async def body(run: Run) -> str:
            return "ran"

        async with working(durable, body, observed, pool=1):
            assert await inspected(durable).retry(workflow) is True
            await observed.until(lambda: observed.completed(workflow))
            await reaches(durable, workflow, "completed")
        keys = [written.key for written in await durable.checkpointer.history(workflow)]
        # one retry, not two; then the new epoch's ending
        assert keys == [f"{FAILURE}000001", f"{RETRY}000001", f"{ENDING}000001"]
        assert await inspected(durable).retry(workflow) is False
        await durable.delete(workflow)

        # Cut off earlier still: the retry's record landed, its "queued" did not, so the
        # workflow still stands failed though its records say it was retried.
        earlier = fresh("cut-retry-early")
        holder = await durable.checkpointer.claim(earlier, LONG, LONG)
        assert holder is not None
        await durable.checkpointer.record(holder, f"{FAILURE}000001", failure_record("gone"))
        assert await ledger(durable).settle(holder, "failed", {"failure": failure_record("gone")})
        await durable.checkpointer.record(holder, f"{RETRY}000001", {"at": "2026-01-01"})
        await durable.checkpointer.release(holder)
        assert (await inspected(durable).status(earlier)).state == "failed"
        async with working(durable, body, observed, pool=1):
            assert await inspected(durable).retry(earlier) is True
            await observed.until(lambda: observed.completed(earlier))
            await reaches(durable, earlier, "completed")
        keys = [written.key for written in await durable.checkpointer.history(earlier)]
        assert keys == [f"{FAILURE}000001", f"{RETRY}000001", f"{ENDING}000001"]
        await durable.delete(earlier)

    async def test_a_pass_that_finds_its_workflow_failed_writes_the_failed_standing_again(
        self, durable: Durable
    ) -> None:
        """The pass that failed it died after the failure's record, before its standing: the
        next pass to find it (a takeover, a late message) states it failed, so `status` and a
        listing agree with the records."""
        workflow = fresh("restated")
        holder = await durable.checkpointer.claim(workflow, LONG, LONG)
        assert holder is not None
        await durable.checkpointer.record(holder, f"{FAILURE}000001", failure_record("lost"))
        await durable.checkpointer.release(holder)
        assert (await inspected(durable).status(workflow)).state == "queued"

        observed = Observed(PATIENCE)
        ran: list[str] = []

        async def body(run: Run) -> str:
            ran.append(run.workflow)
            return "ran"

        async with working(durable, body, observed, pool=1):
            await durable.arrive(workflow, "late", True)
            await observed.until(lambda: bool(observed.of(workflow, "dead")))
            status = await reaches(durable, workflow, "failed")
        assert ran == []
        assert status.failure is not None and status.failure.message == "lost"
        listed = await inspected(durable).list(state="failed", prefix=workflow)
        assert [found.workflow for found in listed.statuses] == [workflow]
        await durable.delete(workflow)


class FailuresContract(RetriesContract, FailedStateContract, StandingsContract):
    """Retries, the failed state, step timeouts, status and listing. Needs `durable`."""
