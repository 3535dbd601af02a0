"""Status and listing: what every `Durable` answers about any workflow, from its standings
(where each workflow's last pass left it), and the helpers the failure tests share with it.

Mixed into `DurableContract` through `FailuresContract`. The standings and listings are driven
through the `Ledger` directly (a listing test needs many workflows in known states, not many
passes); only the status test runs the real `work` loop.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from durability.codec import as_text
from durability.failures import Failure
from durability.interfaces import Durable, Ledger, Settling
from durability.status import Inspectable, Status
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance.claims import LONG, fresh
from durability.testing.conformance.scheduler import ARRIVES, QUIET
from durability.testing.conformance.working import PATIENCE, working


def inspected(durable: Durable) -> Inspectable:
    assert isinstance(durable, Inspectable), f"{type(durable).__name__} has no status/list/retry"
    return durable


def ledger(durable: Durable) -> Ledger:
    checkpointer = durable.checkpointer
    assert isinstance(checkpointer, Ledger), f"{type(checkpointer).__name__} is not a Ledger"
    return checkpointer


async def settled(durable: Durable, workflow: str, state: str, **detail: object) -> None:
    holder = await durable.checkpointer.claim(workflow, LONG, LONG)
    assert holder is not None
    assert await ledger(durable).settle(holder, state, detail)
    await durable.checkpointer.release(holder)


async def reaches(durable: Durable, workflow: str, state: str) -> Status:
    """The workflow's status once it is `state`: the worker writes a standing just after it
    reports the outcome, so a test that saw the event polls the store (bounded, not timed)."""
    async with asyncio.timeout(PATIENCE):
        while True:
            status = await inspected(durable).status(workflow)
            if status.state == state:
                return status
            await asyncio.sleep(0.01)


def failure_record(message: str) -> dict[str, object]:
    at = datetime.now(UTC)
    return Failure("charge", "LookupError", message, "Traceback ...", 1, at).to_record()


class StandingsContract:
    """`status` says what each workflow is doing, a standing is written only by the newest
    pass, and a listing pages by state and prefix. Needs `durable`."""

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
            await reaches(durable, names["holds"], "completed")
            await reaches(durable, names["ends"], "completed")
            await reaches(durable, names["listens"], "blocked")
            await reaches(durable, names["waits"], "blocked")
            await reaches(durable, names["sleeps"], "sleeping")

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
        late = {"failure": failure_record("late")}
        assert not await ledger(durable).settle(older, "failed", late)
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
        detail = {"until": until.isoformat(), "failure": failure_record("slept")}
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

    async def test_a_listing_pages_by_state_and_prefix_in_id_order_while_others_write(
        self, durable: Durable
    ) -> None:
        prefix = fresh("listed") + "-"
        names = [f"{prefix}{i:02d}" for i in range(10)]
        for name in names[:7]:
            await settled(durable, name, "completed")
        for name in names[7:]:
            await settled(durable, name, "failed", failure=failure_record(name))
        await settled(durable, fresh("elsewhere"), "completed")  # outside the prefix
        listing = inspected(durable).list

        first = await listing(state="completed", prefix=prefix, limit=3)
        assert [s.workflow for s in first.statuses] == names[:3]
        assert first.after == names[2]
        # Writes between pages: one moves out of the state, one arrives after the cursor, one
        # before it. No page repeats a workflow, and none that stayed is skipped.
        await settled(durable, names[4], "failed", failure=failure_record("moved"))
        await settled(durable, f"{prefix}99", "completed")
        await settled(durable, f"{prefix}00a", "completed")
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
            await settled(durable, name, "blocked", waiting=["approved-by"])
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
