"""A body changed under a workflow in flight: stamps, the `Nondeterministic` check, `patched`.

Each pass is driven by hand over the memory checkpointer (claim, resume, release) on a
hand-moved clock, so a sleep between two passes costs nothing. The every-store version, under
the real worker, is the conformance suite's `DeployContract`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from durability.codec import (
    Codec,
    JsonCodec,
    Stamped,
    Unencodable,
    as_int,
    as_text,
    decode_checkpoint,
)
from durability.determinism import PATCH, Nondeterministic
from durability.failures import Retry
from durability.memory import MemoryCheckpointer
from durability.stepwise import Blocked, Completed, Run, Sleeping, resume

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LONG = timedelta(minutes=5)
NAP = timedelta(hours=1)
_ids = itertools.count()

Body = Callable[[Run], Awaitable[object]]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Passes:
    """A memory checkpointer, a clock, and one workflow's passes driven by hand."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.checkpointer = MemoryCheckpointer(clock=self.clock)
        self.workflow = f"determinism-{next(_ids)}"
        self.ran: Counter[str] = Counter()

    def effect(self, name: str, fail: bool = False) -> Callable[[], str]:
        def perform() -> str:
            self.ran[name] += 1
            if fail:
                raise LookupError(f"{name} failed")
            return name

        return perform

    async def step(self, run: Run, name: str) -> str:
        return await run.step(name, self.effect(name), as_text)

    async def once(self, body: Body) -> Completed[object] | Sleeping | Blocked:
        """One pass of `body`, then the clock moved past any sleep it stopped at."""
        holder = await self.checkpointer.claim(self.workflow, LONG, LONG)
        assert holder is not None
        try:
            outcome = await resume(holder, self.checkpointer, body, clock=self.clock)
        finally:
            await self.checkpointer.release(holder)
        if isinstance(outcome, Sleeping):
            self.clock.now = outcome.due
        return outcome

    async def ordinals(self) -> dict[str, int | None]:
        holder = await self.checkpointer.claim(self.workflow, LONG, LONG)
        assert holder is not None and holder.ordinals is not None
        await self.checkpointer.release(holder)
        return dict(holder.ordinals)


# --- the stamp ----------------------------------------------------------------------------


def test_a_stamped_value_round_trips_and_reads_back_bare_everywhere_but_the_claim() -> None:
    codec = JsonCodec()
    assert codec.encode(Stamped([1, "a"], 12)) == '#12:[1,"a"]'
    assert codec.encode(Stamped(None, None)) == "#:null"
    assert codec.decode('#12:[1,"a"]') == [1, "a"]
    assert codec.decode_stamped("#:null") == (None, Stamped(None, None))
    assert codec.decode_stamped('"#1:x"') == ("#1:x", None)  # a text that looks like one
    records, ordinals = decode_checkpoint(codec, [("a", "#0:1"), ("b", "2"), ("c", "#:3")])
    assert records == {"a": 1, "b": 2, "c": 3} and ordinals == {"a": 0, "c": None}


def test_a_stamp_is_refused_for_a_bad_ordinal_or_a_stamped_value_inside() -> None:
    with pytest.raises(Unencodable, match="count from 0"):
        JsonCodec().encode(Stamped(1, -1))
    with pytest.raises(Unencodable, match="count from 0"):
        JsonCodec().encode(Stamped(1, True))
    with pytest.raises(Unencodable, match="Stamped does not survive"):
        JsonCodec().encode(Stamped(Stamped(1, 0), 1))
    with pytest.raises(ValueError, match="Extra data"):
        JsonCodec().decode("#1:[1]]")
    with pytest.raises(Unencodable):
        JsonCodec().encode(Stamped((1, 2), 0))  # the value itself is checked as ever


def test_a_codec_that_cannot_stamp_reads_no_ordinals() -> None:
    class Plain:
        def encode(self, value: object) -> str:
            return repr(value)

        def decode(self, text: str) -> object:
            return int(text)

    plain: Codec = Plain()
    assert decode_checkpoint(plain, [("a", "1")]) == ({"a": 1}, None)


async def test_each_record_of_the_body_carries_the_order_its_own_task_reached_it() -> None:
    passes = Passes()
    await passes.checkpointer.supply(passes.workflow, "order", 7)

    async def body(run: Run) -> object:
        await passes.step(run, "first")
        async with asyncio.TaskGroup() as group:
            group.create_task(passes.step(run, "left"))
            group.create_task(passes.step(run, "right"))
        await passes.step(run, "first")  # a key reached again keeps its place
        await run.sleep("nap", NAP)
        return await passes.step(run, "last")

    assert isinstance(await passes.once(body), Sleeping)
    assert await passes.ordinals() == {"first": 0, "left": None, "right": None, "nap": 1}
    assert await passes.once(body) == Completed("last")
    assert (await passes.ordinals())["last"] == 2
    assert await passes.checkpointer.load(passes.workflow) == {
        "order": 7, "first": "first", "left": "left", "right": "right",
        "nap": (T0 + NAP).isoformat(), "last": "last",
    }


# --- a changed body is caught ---------------------------------------------------------------


async def _changed(old: Body, new: Body, passes: Passes) -> Nondeterministic:
    assert isinstance(await passes.once(old), Sleeping)
    before = Counter(passes.ran)
    with pytest.raises(Nondeterministic) as caught:
        await passes.once(new)
    assert passes.ran == before, "an effect of the changed body ran"
    return caught.value


async def test_a_renamed_step_stops_the_pass_naming_both_keys_before_it_runs() -> None:
    passes = Passes()

    async def old(run: Run) -> object:
        await passes.step(run, "charge")
        await passes.step(run, "reserve")
        await run.sleep("nap", NAP)
        return await passes.step(run, "ship")

    async def new(run: Run) -> object:
        await passes.step(run, "charge")
        await passes.step(run, "reserve-stock")
        await run.sleep("nap", NAP)
        return await passes.step(run, "ship")

    error = await _changed(old, new, passes)
    assert (error.reached, error.missed) == ("reserve-stock", "reserve")
    assert error.workflow == passes.workflow
    assert "'reserve-stock'" in str(error) and "'reserve'" in str(error)
    assert not Retry(attempts=9).retries(error)


@pytest.mark.parametrize(
    ("new_order", "reached", "missed"),
    [
        (["charge", "nap", "ship"], "ship", "reserve"),  # a step removed
        (["charge", "ship", "reserve", "nap"], "ship", "reserve"),  # moved ahead of another
        (["charge", "audit", "reserve", "nap", "ship"], "audit", "reserve"),  # one added
        (["charge", "?approval", "reserve", "nap", "ship"], "approval", "reserve"),  # a wait
    ],
)
async def test_a_step_removed_moved_or_added_ahead_of_recorded_ones_is_caught(
    new_order: list[str], reached: str, missed: str
) -> None:
    passes = Passes()

    async def old(run: Run) -> object:
        await passes.step(run, "charge")
        await passes.step(run, "reserve")
        await run.sleep("nap", NAP)
        return await passes.step(run, "ship")

    async def new(run: Run) -> object:
        for name in new_order:
            if name == "nap":
                await run.sleep("nap", NAP)
            elif name.startswith("?"):
                await run.awaiting(name[1:], as_text)
            else:
                await passes.step(run, name)
        return "shipped"

    error = await _changed(old, new, passes)
    assert (error.reached, error.missed) == (reached, missed)


async def test_a_body_that_catches_nondeterministic_fails_all_the_same_and_runs_nothing_new(
) -> None:
    passes = Passes()

    async def old(run: Run) -> object:
        await passes.step(run, "a")
        await run.sleep("nap", NAP)
        return "done"

    async def new(run: Run) -> object:
        try:
            await passes.step(run, "b")
        except Exception:
            await passes.step(run, "cleanup")  # refused: the pass is broken
        return "done"

    assert isinstance(await passes.once(old), Sleeping)
    with pytest.raises(Nondeterministic) as caught:
        await passes.once(new)
    assert caught.value.reached == "b"
    assert passes.ran == Counter(a=1)


# --- bodies that did not change never trip it ------------------------------------------------


async def test_branches_recorded_in_any_order_replay_without_tripping() -> None:
    passes = Passes()
    broken = [True]

    async def slow_then_maybe_fail() -> str:
        await asyncio.sleep(0.01)
        if broken[0]:
            raise LookupError("not yet")
        return "left"

    async def body(run: Run) -> object:
        await passes.step(run, "before")
        async with asyncio.TaskGroup() as group:
            group.create_task(run.step("left", slow_then_maybe_fail, as_text))
            group.create_task(passes.step(run, "right"))
        await run.sleep("nap", NAP)
        return await passes.step(run, "after")

    with pytest.raises(ExceptionGroup):
        await passes.once(body)
    assert passes.ran == Counter(before=1, right=1)  # the later branch landed, the first not
    broken[0] = False
    assert isinstance(await passes.once(body), Sleeping)
    assert await passes.once(body) == Completed("after")
    assert passes.ran == Counter(before=1, right=1, after=1)


async def test_a_failure_caught_then_a_later_pass_taking_another_way_does_not_trip() -> None:
    passes = Passes()
    broken = [True]

    def notify() -> str:
        passes.ran["notify"] += 1
        if broken[0]:
            raise LookupError("mail server down")
        return "sent"

    async def body(run: Run) -> object:
        try:
            await run.step("notify", notify, as_text)
        except LookupError:
            await passes.step(run, "note-the-failure")
        await run.sleep("nap", NAP)
        return await passes.step(run, "done")

    assert isinstance(await passes.once(body), Sleeping)
    broken[0] = False
    # Not recorded, the failed step runs again and now succeeds: another way, not a change.
    assert await passes.once(body) == Completed("done")


async def test_loops_inbox_reads_and_waits_replay_without_tripping() -> None:
    passes = Passes()
    checkpointer, workflow = passes.checkpointer, passes.workflow
    await checkpointer.supply(workflow, "approved", "ada")  # supplied before it is reached

    async def body(run: Run) -> object:
        cursor = None
        seen = []
        for n in range(3):
            await passes.step(run, f"item-{n}")
            entries = await run.receive(f"mail-{n}", after=cursor, limit=1)
            cursor = entries[-1].key
            seen.append(entries[0].value)
            await run.sleep(f"nap-{n}", NAP)
        approver = await run.awaiting("approved", as_text)
        return f"{seen} by {approver}"

    for n in range(3):
        assert isinstance(await passes.once(body), Blocked)
        await checkpointer.append(workflow, f"letter-{n}")
        assert isinstance(await passes.once(body), Sleeping)
    assert await passes.once(body) == Completed("['letter-0', 'letter-1', 'letter-2'] by ada")


async def test_records_written_before_stamps_replay_and_are_not_checked() -> None:
    passes = Passes()
    holder = await passes.checkpointer.claim(passes.workflow, LONG, LONG)
    assert holder is not None
    await passes.checkpointer.record(holder, "charge", "charge")  # bare, as before stamps
    await passes.checkpointer.release(holder)

    async def body(run: Run) -> object:
        await passes.step(run, "charge")
        return await passes.step(run, "ship")

    async def renamed(run: Run) -> object:
        await passes.step(run, "charge-card")
        return await passes.step(run, "ship")

    assert await passes.ordinals() == {}
    assert await passes.once(body) == Completed("ship")
    assert passes.ran == Counter(ship=1)
    other = Passes()
    other.checkpointer, other.workflow = passes.checkpointer, f"{passes.workflow}-bare"
    holder = await other.checkpointer.claim(other.workflow, LONG, LONG)
    assert holder is not None
    await other.checkpointer.record(holder, "charge", "charge")
    await other.checkpointer.release(holder)
    # A bare record carries no order to check against: the change is not seen.
    assert await other.once(renamed) == Completed("ship")


# --- patched ------------------------------------------------------------------------------


async def test_patched_is_true_for_a_new_workflow_and_stays_so() -> None:
    passes = Passes()
    await passes.checkpointer.supply(passes.workflow, "order", 1)  # unread input: not history
    answers: list[bool] = []

    async def body(run: Run) -> object:
        answers.append(await run.patched("v2"))
        await run.sleep("nap", NAP)
        return await passes.step(run, "after")

    assert isinstance(await passes.once(body), Sleeping)
    assert await passes.once(body) == Completed("after")
    assert answers == [True, True]
    assert (await passes.checkpointer.load(passes.workflow))[f"{PATCH}v2"] is True
    assert await passes.ordinals() == {f"{PATCH}v2": None, "nap": 0, "after": 1}


async def test_patched_is_false_where_the_history_lies_past_it_and_stays_so() -> None:
    passes = Passes()

    async def old(run: Run) -> object:
        await passes.step(run, "a")
        await passes.step(run, "b")
        await run.sleep("nap", NAP)
        return await passes.step(run, "c")

    answers: list[bool] = []

    async def new(run: Run) -> object:
        await passes.step(run, "a")
        if await run.patched("new-b"):
            answers.append(True)
            await passes.step(run, "new-b")
        else:
            answers.append(False)
            await passes.step(run, "b")
        await run.sleep("nap", NAP)
        return await passes.step(run, "c")

    assert isinstance(await passes.once(old), Sleeping)
    assert await passes.once(new) == Completed("c")
    assert answers == [False]
    assert passes.ran == Counter(a=1, b=1, c=1)


async def test_patched_is_false_for_a_workflow_whose_records_predate_stamps() -> None:
    passes = Passes()
    holder = await passes.checkpointer.claim(passes.workflow, LONG, LONG)
    assert holder is not None
    for key in ("a", "b"):  # bare records: the old body ran a, then b, past the patch
        await passes.checkpointer.record(holder, key, key)
    await passes.checkpointer.release(holder)

    async def new(run: Run) -> object:
        await passes.step(run, "a")
        if await run.patched("skip-b"):
            return "new way"
        return await passes.step(run, "b")

    assert await passes.once(new) == Completed("b")


async def test_patched_refuses_a_bad_name_and_a_record_that_is_not_a_bool() -> None:
    passes = Passes()

    async def bad_name(run: Run) -> object:
        return await run.patched("")

    with pytest.raises(ValueError):
        await passes.once(bad_name)
    holder = await passes.checkpointer.claim(passes.workflow, LONG, LONG)
    assert holder is not None
    await passes.checkpointer.record(holder, f"{PATCH}v2", "yes")
    await passes.checkpointer.release(holder)

    async def body(run: Run) -> object:
        return await run.patched("v2")

    with pytest.raises(TypeError, match="not a bool"):
        await passes.once(body)


async def test_a_step_count_still_runs_its_effect_once_per_pass_with_stamps() -> None:
    passes = Passes()

    async def body(run: Run) -> object:
        got = await asyncio.gather(*(run.step("shared", passes.effect("shared"), as_text)
                                     for _ in range(3)))
        return await run.step("n", lambda: len(got), as_int)

    assert await passes.once(body) == Completed(3)
    assert passes.ran == Counter(shared=1)


def test_a_run_made_outside_a_loop_orders_the_first_task_that_steps() -> None:
    passes = Passes()
    loop = asyncio.new_event_loop()
    try:
        holder = loop.run_until_complete(passes.checkpointer.claim(passes.workflow, LONG, LONG))
        assert holder is not None
        run = Run(holder, passes.checkpointer, {}, ordinals={})  # no loop runs yet
        assert loop.run_until_complete(passes.step(run, "first")) == "first"
        assert loop.run_until_complete(passes.step(run, "second")) == "second"
        loop.run_until_complete(passes.checkpointer.release(holder))
        assert loop.run_until_complete(passes.ordinals()) == {"first": 0, "second": None}
    finally:
        loop.close()
