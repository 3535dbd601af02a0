"""Failures, retries, status and listing: what every `Durable` owes a workflow that fails, and
what it answers about any workflow.

Mixed into `DurableContract`, so every store's suite (and a third party's) runs it over the
same `durable` fixture: the retries and timeouts through the real `work` loop, the standings
and listings through the `Ledger` directly (a listing test needs many workflows in known
states, not many passes). Backoffs here are tens of milliseconds and checked from below only:
a loaded machine makes them longer, never shorter.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from durability.codec import as_int, as_text
from durability.failures import FAILURE, RETRY, Failure, Retry
from durability.interfaces import Durable, Ledger, Scheduler, Settling
from durability.status import Inspectable, Status, retry
from durability.stepwise import Run, StepTimeout
from durability.testing import Observed
from durability.testing.conformance.claims import LONG, fresh
from durability.testing.conformance.scheduler import ARRIVES, QUIET
from durability.testing.conformance.working import PATIENCE, working

#: Three tries, 50 ms then 100 ms apart, exactly (no jitter).
FAST = Retry(attempts=3, initial=timedelta(milliseconds=50), factor=2.0, jitter=0.0)


def inspected(durable: Durable) -> Inspectable:
    assert isinstance(durable, Inspectable), f"{type(durable).__name__} has no status/list/retry"
    return durable


def ledger(durable: Durable) -> Ledger:
    checkpointer = durable.checkpointer
    assert isinstance(checkpointer, Ledger), f"{type(checkpointer).__name__} is not a Ledger"
    return checkpointer


async def _settled(durable: Durable, workflow: str, state: str, **detail: object) -> None:
    holder = await durable.checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    assert await ledger(durable).settle(holder, state, detail)
    await durable.checkpointer.release(holder)


async def _reaches(durable: Durable, workflow: str, state: str) -> Status:
    """The workflow's status once it is `state`: the worker writes a standing just after it
    reports the outcome, so a test that saw the event polls the store (bounded, not timed)."""
    async with asyncio.timeout(PATIENCE):
        while True:
            status = await inspected(durable).status(workflow)
            if status.state == state:
                return status
            await asyncio.sleep(0.01)


def _failure(message: str) -> dict[str, object]:
    at = datetime.now(UTC)
    return Failure("charge", "LookupError", message, "Traceback ...", 1, at).to_record()


class FailuresContract:
    """Retries, the failed state, step timeouts, status and listing. Needs `durable`."""

    # --- retries ----------------------------------------------------------------------------

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
            await _reaches(durable, workflow, "completed")

        assert [event.attempt for event in observed.of(workflow, "failed")] == [1, 2]
        assert len(observed.of(workflow, "retrying")) == 2
        assert observed.of(workflow, "dead") == []
        # After its backoff, never at once: 50 ms, then 100 ms (from below only).
        assert tries[1] - tries[0] >= 0.045
        assert tries[2] - tries[1] >= 0.095
        assert before == Counter(first=1)  # a recorded step is not run again by a retry
        keys = [written.key for written in await durable.checkpointer.history(workflow)]
        assert keys == ["go", "first", f"{FAILURE}000001", f"{FAILURE}000002", "flaky"]
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
            waiting = await _reaches(durable, workflow, "sleeping")
        assert waiting.state == "sleeping" and waiting.failure is not None
        assert waiting.failure.attempt == 1 and waiting.failure.type == "LookupError"
        assert waiting.until is not None and waiting.until > datetime.now(UTC)

        # Another worker (a new `work`, as after a crash) takes the next attempt: the last one.
        async with working(durable, body, second, pool=1, retry=policy):
            await durable.arrive(workflow, "nudge", True)
            await second.until(lambda: bool(second.of(workflow, "dead")))
            failed = await _reaches(durable, workflow, "failed")
        assert [event.attempt for event in second.of(workflow, "failed")] == [2]
        assert failed.state == "failed" and failed.failure is not None
        assert failed.failure.attempt == 2 and failed.failure.step == "charge"
        assert "the gateway is down" in failed.failure.message
        await durable.delete(workflow)

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
            await _reaches(durable, workflow, "failed")
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

    async def test_a_step_whose_result_cannot_be_recorded_is_the_step_that_failed(
        self, durable: Durable
    ) -> None:
        workflow = fresh("unencodable")
        observed = Observed(PATIENCE)

        async def body(run: Run) -> object:
            return await run.step("receipt", lambda: {"at": {1, 2}}, lambda value: value)

        async with working(durable, body, observed, pool=1):
            await durable.arrive(workflow, "go", True)
            status = await _reaches(durable, workflow, "failed")
        assert status.failure is not None
        assert status.failure.type == "Unencodable" and status.failure.step == "receipt"
        assert "receipt" not in await durable.checkpointer.load(workflow)
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
            await _reaches(durable, workflow, "failed")
            broken[0] = False
            assert await durable_.retry(workflow) is True
            await observed.until(lambda: observed.completed(workflow))
            await _reaches(durable, workflow, "completed")

        assert ran == Counter(before=1, flaky=2)
        assert await durable_.retry(workflow) is False  # it has not failed (any more)
        keys = [written.key for written in await durable.checkpointer.history(workflow)]
        assert keys == ["go", "before", f"{FAILURE}000001", f"{RETRY}000001", "flaky"]
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
        await durable.checkpointer.record(holder, f"{FAILURE}000001", _failure("gone"))
        assert await ledger(durable).settle(holder, "failed", {"failure": _failure("gone")})
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
            await _reaches(durable, workflow, "completed")
        keys = [written.key for written in await durable.checkpointer.history(workflow)]
        assert keys == [f"{FAILURE}000001", f"{RETRY}000001"]  # one retry, not two
        assert await inspected(durable).retry(workflow) is False
        await durable.delete(workflow)

        # Cut off earlier still: the retry's record landed, its "queued" did not, so the
        # workflow still stands failed though its records say it was retried.
        earlier = fresh("cut-retry-early")
        holder = await durable.checkpointer.claim(earlier, LONG, LONG)
        assert holder is not None
        await durable.checkpointer.record(holder, f"{FAILURE}000001", _failure("gone"))
        assert await ledger(durable).settle(holder, "failed", {"failure": _failure("gone")})
        await durable.checkpointer.record(holder, f"{RETRY}000001", {"at": "2026-01-01"})
        await durable.checkpointer.release(holder)
        assert (await inspected(durable).status(earlier)).state == "failed"
        async with working(durable, body, observed, pool=1):
            assert await inspected(durable).retry(earlier) is True
            await observed.until(lambda: observed.completed(earlier))
            await _reaches(durable, earlier, "completed")
        keys = [written.key for written in await durable.checkpointer.history(earlier)]
        assert keys == [f"{FAILURE}000001", f"{RETRY}000001"]
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
        await durable.checkpointer.record(holder, f"{FAILURE}000001", _failure("lost"))
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
            status = await _reaches(durable, workflow, "failed")
        assert ran == []
        assert status.failure is not None and status.failure.message == "lost"
        listed = await inspected(durable).list(state="failed", prefix=workflow)
        assert [found.workflow for found in listed.statuses] == [workflow]
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
            status = await _reaches(durable, workflow, "failed")

        failed = observed.of(workflow, "failed")
        assert [event.attempt for event in failed] == [1, 2]
        assert all(isinstance(event.error, StepTimeout) for event in failed)
        assert cancelled == [1, 1]  # the effect itself was cancelled, each time
        assert status.failure is not None and status.failure.type == "StepTimeout"
        await durable.delete(workflow)

    # --- status -----------------------------------------------------------------------------

    async def test_status_says_what_each_workflow_is_doing(self, durable: Durable) -> None:
        observed = Observed(PATIENCE)
        names = {kind: fresh(kind) for kind in ("sleeps", "waits", "listens", "ends", "holds")}
        release = asyncio.Event()
        entered = asyncio.Event()

        async def hold() -> str:
            entered.set()
            await release.wait()
            return "let go"

        async def body(run: Run) -> object:
            kind = next(kind for kind, name in names.items() if name == run.workflow)
            if kind == "sleeps":
                await run.sleep("nap", timedelta(hours=1))
            elif kind == "waits":
                await run.awaiting("approved-by", as_text)
            elif kind == "listens":
                await run.receive("mail")
            elif kind == "holds":
                await run.step("held", hold, as_text)
            return "done"

        look = inspected(durable).status
        nobody = fresh("nobody")
        assert await look(nobody) == Status(nobody, "unknown")
        await durable.checkpointer.supply(names["ends"], "go", True)
        assert (await look(names["ends"])).state == "queued"  # supplied, never run yet
        async with working(durable, body, observed, pool=len(names)):
            for name in names.values():
                await durable.arrive(name, "go", True)
            await asyncio.wait_for(entered.wait(), PATIENCE)
            assert (await look(names["holds"])).state == "running"
            await observed.until(
                lambda: all(
                    observed.outcomes(name) for kind, name in names.items() if kind != "holds"
                )
            )
            release.set()
            await observed.until(lambda: observed.completed(names["holds"]))
            await _reaches(durable, names["holds"], "completed")
            await _reaches(durable, names["ends"], "completed")
            await _reaches(durable, names["listens"], "blocked")
            await _reaches(durable, names["waits"], "blocked")
            await _reaches(durable, names["sleeps"], "sleeping")

        sleeping = await look(names["sleeps"])
        assert sleeping.state == "sleeping" and sleeping.failure is None
        assert sleeping.until is not None
        assert sleeping.until - datetime.now(UTC) > timedelta(minutes=50)
        waiting = await look(names["waits"])
        assert (waiting.state, waiting.waiting) == ("blocked", frozenset({"approved-by"}))
        listening = await look(names["listens"])
        assert (listening.state, listening.listening) == ("blocked", frozenset({"mail"}))
        assert (await look(names["ends"])).state == "completed"
        assert (await look(names["holds"])).state == "completed"
        for name in names.values():
            await durable.delete(name)
            assert (await look(name)).state == "unknown"

    async def test_a_standing_is_never_overwritten_by_an_older_pass_or_after_a_delete(
        self, durable: Durable
    ) -> None:
        workflow = fresh("stood")
        older = await durable.checkpointer.claim(workflow, LONG, timedelta(milliseconds=50))
        assert older is not None
        await durable.checkpointer.release(older)
        newer = await durable.checkpointer.claim(workflow, LONG, LONG)
        assert newer is not None
        assert await ledger(durable).settle(newer, "completed", {})
        assert not await ledger(durable).settle(older, "failed", {"failure": _failure("late")})
        assert (await inspected(durable).status(workflow)).state == "running"
        await durable.checkpointer.release(newer)
        assert (await inspected(durable).status(workflow)).state == "completed"

        await durable.delete(workflow)
        assert not await ledger(durable).settle(newer, "completed", {})
        assert (await inspected(durable).status(workflow)).state == "unknown"
        assert (await inspected(durable).list(prefix=workflow)).statuses == []

    async def test_a_pass_finished_with_its_standing_ends_in_one_move_and_older_passes_lose(
        self, durable: Durable
    ) -> None:
        # `Settling.finish_settled`, how the worker ends every pass: the standing, the release
        # and the done, atomically where the store can. Whatever the standing's fate, the pass
        # is finished: the claim free, the delivery answered for.
        assert isinstance(durable, Settling), f"{type(durable).__name__} is not Settling"
        workflow = fresh("finished")
        await durable.arrive(workflow, "order", 1)
        taken = await durable.take(ARRIVES, LONG, timedelta(milliseconds=50))
        assert taken is not None and taken.holder is not None
        assert taken.delivery.workflow == workflow
        older = taken.holder
        until = datetime.now(UTC) + timedelta(hours=1)
        detail = {"until": until.isoformat(), "failure": _failure("slept")}
        assert await durable.finish_settled(older, taken.delivery, "sleeping", detail)
        status = await inspected(durable).status(workflow)  # not running: the claim is free
        assert (status.state, status.until) == ("sleeping", until)
        assert status.failure is not None and status.failure.message == "slept"
        assert await durable.scheduler.next_ready(QUIET) is None  # the delivery answered for
        listed = await inspected(durable).list(state="sleeping", prefix=workflow)
        assert [found.workflow for found in listed.statuses] == [workflow]

        # A newer claim's pass settles; the older pass, finishing late, writes nothing.
        await durable.arrive(workflow, "more", 2)
        again = await durable.take(ARRIVES, LONG, LONG)
        assert again is not None and again.holder is not None
        assert again.holder.token > older.token
        assert await durable.finish_settled(again.holder, again.delivery, "completed", {})
        assert not await durable.finish_settled(older, again.delivery, "failed", {})
        assert (await inspected(durable).status(workflow)).state == "completed"
        assert (await inspected(durable).list(state="sleeping", prefix=workflow)).statuses == []

        # After a delete nothing a pass of before can finish with brings a standing back.
        await durable.delete(workflow)
        assert not await durable.finish_settled(again.holder, again.delivery, "completed", {})
        assert (await inspected(durable).status(workflow)).state == "unknown"
        assert (await inspected(durable).list(prefix=workflow)).statuses == []
        assert await durable.scheduler.next_ready(QUIET) is None

        # The id used again after the delete: its new passes stand, and list, as any other.
        await durable.arrive(workflow, "order", 3)
        anew = await durable.take(ARRIVES, LONG, LONG)
        assert anew is not None and anew.holder is not None
        assert await durable.finish_settled(anew.holder, anew.delivery, "blocked",
                                            {"waiting": ["approval"], "listening": []})
        listed = await inspected(durable).list(prefix=workflow)
        assert [(s.workflow, s.state) for s in listed.statuses] == [(workflow, "blocked")]
        await durable.arrive(workflow, "approval", True)
        last = await durable.take(ARRIVES, LONG, LONG)
        assert last is not None and last.holder is not None
        assert await durable.finish_settled(last.holder, last.delivery, "completed", {})
        for state, expected in (("blocked", []), ("completed", [workflow])):
            listed = await inspected(durable).list(state=state, prefix=workflow)
            assert [s.workflow for s in listed.statuses] == expected
        await durable.delete(workflow)

    async def test_a_bad_standing_at_the_finish_is_refused_before_any_write(
        self, durable: Durable
    ) -> None:
        assert isinstance(durable, Settling)
        workflow = fresh("misfinished")
        await durable.arrive(workflow, "order", 1)
        taken = await durable.take(ARRIVES, LONG, LONG)
        assert taken is not None and taken.holder is not None
        with pytest.raises(ValueError, match="state must be one of"):
            await durable.finish_settled(taken.holder, taken.delivery, "running", {})
        with pytest.raises(TypeError):
            await durable.finish_settled(taken.holder, taken.delivery, "completed", {"x": {1}})
        # Nothing was written: the claim still holds, so the status says running.
        assert (await inspected(durable).status(workflow)).state == "running"
        assert await durable.finish_settled(taken.holder, taken.delivery, "completed", {})
        assert (await inspected(durable).status(workflow)).state == "completed"

    # --- listing ----------------------------------------------------------------------------

    async def test_a_listing_pages_by_state_and_prefix_in_id_order_while_others_write(
        self, durable: Durable
    ) -> None:
        prefix = fresh("listed") + "-"
        names = [f"{prefix}{i:02d}" for i in range(10)]
        for name in names[:7]:
            await _settled(durable, name, "completed")
        for name in names[7:]:
            await _settled(durable, name, "failed", failure=_failure(name))
        await _settled(durable, fresh("elsewhere"), "completed")  # outside the prefix
        listing = inspected(durable).list

        first = await listing(state="completed", prefix=prefix, limit=3)
        assert [s.workflow for s in first.statuses] == names[:3]
        assert first.after == names[2]
        # Writes between pages: one moves out of the state, one arrives after the cursor, one
        # before it. No page repeats a workflow, and none that stayed is skipped.
        await _settled(durable, names[4], "failed", failure=_failure("moved"))
        await _settled(durable, f"{prefix}99", "completed")
        await _settled(durable, f"{prefix}00a", "completed")
        seen = [s.workflow for s in first.statuses]
        after: str | None = first.after
        while after is not None:
            page = await listing(state="completed", prefix=prefix, limit=3, after=after)
            seen += [s.workflow for s in page.statuses]
            after = page.after
        assert len(seen) == len(set(seen))
        assert seen == sorted(seen)
        assert {names[i] for i in (0, 1, 2, 3, 5, 6)} <= set(seen)
        assert names[4] not in seen and f"{prefix}99" in seen

        failed = await listing(state="failed", prefix=prefix)
        assert [s.workflow for s in failed.statuses] == [names[4], *names[7:]]
        assert failed.after is None
        assert all(s.state == "failed" and s.failure is not None for s in failed.statuses)
        assert failed.statuses[-1].failure is not None
        assert failed.statuses[-1].failure.message == names[9]
        everything = await listing(prefix=prefix, limit=100)
        assert len(everything.statuses) == 12
        assert [s.workflow for s in everything.statuses] == sorted(
            [*names, f"{prefix}99", f"{prefix}00a"]
        )
        assert (await listing(prefix=prefix + "zz")).statuses == []
        # Code point order on every store, whatever a database's collation would say: 'z'
        # (U+007A) before 'é' (U+00E9) before the emoji (U+1F600, four bytes of UTF-8).
        odd = [f"{prefix}~\U0001f600", f"{prefix}~z", f"{prefix}~\u00e9"]
        for name in odd:
            await _settled(durable, name, "blocked", waiting=["approved-by"])
        ordered = await listing(state="blocked", prefix=f"{prefix}~")
        assert [s.workflow for s in ordered.statuses] == sorted(odd)
        assert ordered.statuses[0].workflow.endswith("z")
        assert ordered.statuses[0].waiting == frozenset({"approved-by"})
        tail = await listing(state="blocked", prefix=f"{prefix}~", after=f"{prefix}~z")
        assert [s.workflow for s in tail.statuses] == sorted(odd)[1:]
        for name in odd:
            await durable.delete(name)
        for status in everything.statuses:
            await durable.delete(status.workflow)

    @pytest.mark.parametrize(
        ("arguments", "error"),
        [
            ({"state": "bogus"}, ValueError),
            ({"state": "running"}, ValueError),  # a status, never a stored state
            ({"limit": 0}, ValueError),
            ({"limit": 1001}, ValueError),
            ({"limit": True}, TypeError),
            ({"after": "{braced}"}, ValueError),
            ({"prefix": 7}, TypeError),
        ],
    )
    async def test_a_bad_listing_is_refused_by_name(
        self, durable: Durable, arguments: dict[str, object], error: type[Exception]
    ) -> None:
        with pytest.raises(error):
            await inspected(durable).list(**arguments)  # type: ignore[arg-type]
