"""Claims and fencing: who may write to a workflow, and for how long.

Part of `CheckpointerContract` (see `durability.testing.conformance.checkpointer`). The clock is
real: where a claim has to lapse a test sleeps a little past it, and no test asserts how long
anything took. Where a claim has to stay live, the test times itself and runs again slower if
the machine stalled past its margin (`pace.at_any_pace`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from durability.checks import MAX_DURATION, MAX_NAME, inbox_key
from durability.interfaces import Checkpointer
from durability.signals import Fenced
from durability.testing.conformance.bounds import ABSURD, BAD_IDS
from durability.testing.conformance.pace import Stopwatch, at_any_pace
from durability.values import Pass, Recorded

#: Long enough that no claim made with it lapses while a test runs.
LONG = timedelta(seconds=30)
#: A claim that is meant to lapse, and a sleep that outlasts it with room to spare.
BRIEF = timedelta(milliseconds=300)
PAST_BRIEF = 0.45


def fresh(label: str = "wf") -> str:
    """A workflow id no other test, suite or agent sharing the server will ever use."""
    return f"conformance-{label}-{uuid.uuid4().hex}"


def now_ms() -> int:
    # One millisecond of slack for the host clock's rounding, nothing more: a token that is a
    # counter, or seconds rather than milliseconds, is still far below this.
    return time.time_ns() // 1_000_000 - 1


async def claim_now(
    checkpointer: Checkpointer,
    workflow: str,
    budget: timedelta = LONG,
    alive: timedelta = LONG,
) -> Pass:
    """Claim a workflow the test knows to be free."""
    holder = await checkpointer.claim(workflow, budget, alive)
    assert holder is not None, f"{workflow} should have been free to claim"
    return holder


class ClaimingContract:
    """One live claim at a time, its token rising on every claim. Needs `checkpointer`."""

    async def test_is_a_checkpointer(self, checkpointer: Checkpointer) -> None:
        assert isinstance(checkpointer, Checkpointer)

    async def test_claim_returns_a_pass_for_the_workflow(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow, alive=BRIEF)
        assert holder.workflow == workflow
        assert holder.alive == BRIEF
        assert holder.budget_ends.utcoffset() is not None, "budget_ends must be timezone-aware"

    async def test_a_live_claim_turns_the_next_one_away(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        await claim_now(checkpointer, workflow)
        assert await checkpointer.claim(workflow, LONG, LONG) is None

    @pytest.mark.parametrize("contenders", [2, 20])
    async def test_concurrent_claims_admit_exactly_one(
        self, checkpointer: Checkpointer, contenders: int
    ) -> None:
        workflow = fresh()
        outcomes = await asyncio.gather(
            *(checkpointer.claim(workflow, LONG, LONG) for _ in range(contenders))
        )
        winners = [holder for holder in outcomes if holder is not None]
        assert len(winners) == 1
        assert winners[0].workflow == workflow

    async def test_tokens_rise_on_every_claim_and_are_at_least_the_clock(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        tokens: list[int] = []
        for _ in range(6):
            floor = now_ms()
            holder = await claim_now(checkpointer, workflow)
            assert holder.token >= floor, "a token must be stamped from the clock in ms"
            tokens.append(holder.token)
            await checkpointer.release(holder)
        # Several claims land in one millisecond here, so `previous + 1` must do the rising.
        assert all(later > earlier for earlier, later in pairwise(tokens))

    async def test_release_lets_the_next_claim_in_at_once(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        first = await claim_now(checkpointer, workflow)
        await checkpointer.release(first)
        second = await claim_now(checkpointer, workflow)
        assert second.token > first.token

    async def test_tokens_still_rise_after_a_claim_lapses(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        first = await claim_now(checkpointer, workflow, alive=BRIEF)
        await asyncio.sleep(PAST_BRIEF)
        floor = now_ms()
        second = await claim_now(checkpointer, workflow)
        assert second.token > first.token
        assert second.token >= floor

    async def test_tokens_still_rise_after_discard(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        first = await claim_now(checkpointer, workflow)
        await checkpointer.record(first, "step", 1)
        await checkpointer.discard(workflow)
        # discard clears the claim, so the next one gets in although `first` was live.
        second = await claim_now(checkpointer, workflow)
        assert second.token > first.token
        await checkpointer.discard(workflow)
        third = await claim_now(checkpointer, workflow)
        assert third.token > second.token

    async def test_release_by_a_superseded_pass_leaves_the_new_claim_alone(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        stale = await claim_now(checkpointer, workflow, alive=BRIEF)
        await asyncio.sleep(PAST_BRIEF)
        current = await claim_now(checkpointer, workflow)
        await checkpointer.release(stale)
        assert await checkpointer.claim(workflow, LONG, LONG) is None
        assert (await checkpointer.record(current, "step", "mine")).first


class FencingContract:
    """A pass that is superseded or lapsed writes nothing, and its claim is stretched only
    as the contract lets it. Needs `checkpointer`."""

    async def test_a_superseded_pass_is_fenced_and_writes_nothing(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        stale = await claim_now(checkpointer, workflow)
        await checkpointer.record(stale, "before", 1)
        await checkpointer.release(stale)
        current = await claim_now(checkpointer, workflow)
        with pytest.raises(Fenced) as fenced:
            await checkpointer.record(stale, "after", 2)
        assert fenced.value.workflow == workflow
        assert fenced.value.token == stale.token
        assert await checkpointer.load(workflow) == {"before": 1}
        with pytest.raises(Fenced):
            await checkpointer.renew(stale, LONG)
        with pytest.raises(Fenced):
            await checkpointer.extend(stale, LONG, LONG)
        # The key the stale pass tried is still free for the pass that holds the claim.
        assert await checkpointer.record(current, "after", 3) == Recorded(3, True)

    async def test_a_lapsed_pass_is_fenced_and_writes_nothing(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        lapsed = await claim_now(checkpointer, workflow, alive=BRIEF)
        await checkpointer.supply(workflow, "before", 1)
        await asyncio.sleep(PAST_BRIEF)
        # No one else claimed: the claim lapsing on its own must be enough to fence it.
        with pytest.raises(Fenced):
            await checkpointer.record(lapsed, "after", 2)
        with pytest.raises(Fenced):
            await checkpointer.renew(lapsed, LONG)
        with pytest.raises(Fenced):
            await checkpointer.extend(lapsed, LONG, LONG)
        assert await checkpointer.load(workflow) == {"before": 1}
        assert await checkpointer.claim(workflow, LONG, LONG) is not None

    async def test_renew_cannot_carry_a_claim_past_its_budget(
        self, checkpointer: Checkpointer
    ) -> None:
        async def scenario(scale: float) -> None:
            workflow = fresh()
            # alive == budget: the renew only has to land inside the budget.
            budget = timedelta(milliseconds=600 * scale)
            clock = Stopwatch()
            holder = await claim_now(checkpointer, workflow, budget=budget, alive=budget)
            try:
                await checkpointer.renew(holder, timedelta(seconds=5 * scale))
            except Fenced:
                clock.within(budget.total_seconds(), "claim and renew")
                raise
            # Past the budget (a lower bound: a slow machine only makes it later), though the
            # renew asked for longer; a renew that ignored the budget would still be live.
            await asyncio.sleep(budget.total_seconds() * 4 / 3)
            with pytest.raises(Fenced):
                await checkpointer.record(holder, "late", 1)
            with pytest.raises(Fenced):
                await checkpointer.renew(holder, timedelta(seconds=5))
            assert await checkpointer.load(workflow) == {}
            assert await checkpointer.claim(workflow, LONG, LONG) is not None

        await at_any_pace(scenario)

    async def test_extend_carries_a_claim_past_its_budget(self, checkpointer: Checkpointer) -> None:
        async def scenario(scale: float) -> None:
            workflow = fresh()
            budget = timedelta(milliseconds=400 * scale)
            stretched = timedelta(seconds=2 * scale)
            claiming = Stopwatch()
            holder = await claim_now(checkpointer, workflow, budget=budget, alive=budget)
            extending = Stopwatch()
            try:
                extended = await checkpointer.extend(holder, stretched, stretched)
            except Fenced:
                claiming.within(budget.total_seconds(), "claim and extend")
                raise
            assert (extended.workflow, extended.token) == (holder.workflow, holder.token)
            assert extended.budget_ends > holder.budget_ends
            await asyncio.sleep(budget.total_seconds() * 1.5)  # past the first budget
            claimed = await checkpointer.claim(workflow, LONG, LONG)
            if claimed is not None:
                extending.within(stretched.total_seconds(), "extend and the next claim")
            assert claimed is None
            try:
                assert (await checkpointer.record(extended, "late", 1)).first
            except Fenced:
                extending.within(stretched.total_seconds(), "extend and the record")
                raise

        await at_any_pace(scenario)

    async def test_extend_never_shortens_a_claim(self, checkpointer: Checkpointer) -> None:
        async def scenario(scale: float) -> None:
            workflow = fresh()
            held = timedelta(seconds=3 * scale)
            clock = Stopwatch()
            holder = await claim_now(checkpointer, workflow, budget=held, alive=held)
            tiny = timedelta(milliseconds=50)
            await checkpointer.extend(holder, tiny, tiny)
            await checkpointer.renew(holder, tiny)
            await asyncio.sleep(0.3)  # well past `tiny`
            claimed = await checkpointer.claim(workflow, LONG, LONG)
            if claimed is not None:
                clock.within(held.total_seconds(), "the claim and the next")
            assert claimed is None
            try:
                assert (await checkpointer.record(holder, "still", 1)).first
            except Fenced:
                clock.within(held.total_seconds(), "the claim and the record")
                raise

        await at_any_pace(scenario)

    async def test_a_write_is_a_sign_of_life(self, checkpointer: Checkpointer) -> None:
        async def scenario(scale: float) -> None:
            workflow = fresh()
            alive = timedelta(milliseconds=500 * scale)
            limit = alive.total_seconds()
            # From the sending of one sign of life to the answer to the next: the most the
            # store's clock can have moved between the two (a write under WAITAOF can take a
            # good part of `alive` on a busy disk, which a fixed margin did not allow for).
            since = Stopwatch()
            holder = await claim_now(checkpointer, workflow, budget=LONG, alive=alive)
            # Twice `alive` in all, but (on a machine keeping pace) never `alive` between two.
            for beat in range(4):
                await asyncio.sleep(limit / 2)
                sending = Stopwatch()
                try:
                    assert (await checkpointer.record(holder, f"beat:{beat}", beat)).first
                except Fenced:
                    since.within(limit, f"the sign of life before beat {beat}, and beat {beat}")
                    raise
                since = sending
            claimed = await checkpointer.claim(workflow, LONG, LONG)
            if claimed is not None:
                since.within(limit, "the last beat and the claim after it")
            assert claimed is None

        await at_any_pace(scenario)

    @pytest.mark.parametrize("zero", [timedelta(0), timedelta(milliseconds=-1)])
    async def test_durations_must_be_positive(
        self, checkpointer: Checkpointer, zero: timedelta
    ) -> None:
        workflow = fresh()
        with pytest.raises(ValueError, match="budget"):
            await checkpointer.claim(workflow, zero, LONG)
        with pytest.raises(ValueError, match="alive"):
            await checkpointer.claim(workflow, LONG, zero)
        holder = await claim_now(checkpointer, workflow)
        with pytest.raises(ValueError, match="budget"):
            await checkpointer.extend(holder, zero, LONG)
        with pytest.raises(ValueError, match="alive"):
            await checkpointer.extend(holder, LONG, zero)
        with pytest.raises(ValueError, match="alive"):
            await checkpointer.renew(holder, zero)


class ClaimBoundsContract:
    """A bad id or duration is refused, and the longest good ones work like any other.
    Needs `checkpointer`."""

    @pytest.mark.parametrize(("workflow", "error"), BAD_IDS)
    async def test_a_bad_workflow_id_is_refused(
        self, checkpointer: Checkpointer, workflow: str, error: type[Exception]
    ) -> None:
        for call in (
            checkpointer.claim(workflow, LONG, LONG),
            checkpointer.load(workflow),
            checkpointer.history(workflow),
            checkpointer.supply(workflow, "step", 1),
            checkpointer.append(workflow, 1),
            checkpointer.discard(workflow),
        ):
            with pytest.raises(error, match="workflow id"):
                await call

    async def test_the_longest_ids_are_ids_like_any_other(self, checkpointer: Checkpointer) -> None:
        # MAX_NAME characters, from one byte of UTF-8 each to four (1 KiB in all).
        for fill in ("x", "é", "漢", "🎉"):
            head = fresh(label="long")
            workflow = head + fill * (MAX_NAME - len(head))
            assert len(workflow) == MAX_NAME
            holder = await claim_now(checkpointer, workflow)
            assert holder.workflow == workflow
            assert (await checkpointer.record(holder, "step", fill)).first
            assert (await checkpointer.append(workflow, "mail")).key == inbox_key(1)
            assert await checkpointer.load(workflow) == {"step": fill, inbox_key(1): "mail"}
            assert await checkpointer.discard(workflow) == 2

    @pytest.mark.parametrize(("duration", "error"), ABSURD)
    async def test_an_absurd_duration_writes_nothing(
        self, checkpointer: Checkpointer, duration: timedelta, error: type[Exception]
    ) -> None:
        workflow = fresh()
        with pytest.raises(error, match="budget"):
            await checkpointer.claim(workflow, duration, LONG)
        with pytest.raises(error, match="alive"):
            await checkpointer.claim(workflow, LONG, duration)
        # Refused before anything was written: the workflow is free, not locked by a claim
        # that was written and then failed.
        holder = await claim_now(checkpointer, workflow)
        with pytest.raises(error, match="budget"):
            await checkpointer.extend(holder, duration, LONG)
        with pytest.raises(error, match="alive"):
            await checkpointer.extend(holder, LONG, duration)
        with pytest.raises(error, match="alive"):
            await checkpointer.renew(holder, duration)
        # And the claim is as it was: live, and released as any other.
        assert (await checkpointer.record(holder, "step", 1)).first
        await checkpointer.release(holder)
        assert await checkpointer.claim(workflow, LONG, LONG) is not None

    async def test_the_longest_duration_is_a_duration_like_any_other(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow, budget=MAX_DURATION, alive=MAX_DURATION)
        # A century from now, give or take the store's rounding.
        assert holder.budget_ends - datetime.now(UTC) > MAX_DURATION - timedelta(minutes=1)
        assert await checkpointer.claim(workflow, LONG, LONG) is None
        extended = await checkpointer.extend(holder, MAX_DURATION, MAX_DURATION)
        assert extended.budget_ends >= holder.budget_ends
        await checkpointer.renew(holder, MAX_DURATION)
        assert (await checkpointer.record(holder, "step", 1)).first
        await checkpointer.release(holder)
        assert await checkpointer.claim(workflow, LONG, LONG) is not None


class ClaimContract(ClaimingContract, FencingContract, ClaimBoundsContract):
    """Claims, tokens, fencing, liveness and budget; mixed into `CheckpointerContract`."""
