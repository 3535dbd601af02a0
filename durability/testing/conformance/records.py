"""Records: first writer wins, values survive the codec, order is kept, the inbox, transact.

Part of `CheckpointerContract` (see `durability.testing.conformance.checkpointer`).
"""

from __future__ import annotations

import asyncio
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Protocol

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durability.checks import INBOX, MAX_NAME, check_key, check_workflow, inbox_key
from durability.codec import Unencodable
from durability.interfaces import Checkpointer
from durability.signals import Fenced
from durability.testing.conformance.bounds import (
    AT_THE_BOUNDS,
    BAD_KEYS,
    PROPERTY,
    UNSTORABLE,
    names,
    refusal,
)
from durability.testing.conformance.claims import BRIEF, LONG, PAST_BRIEF, claim_now, fresh
from durability.testing.conformance.pace import Stopwatch, at_any_pace
from durability.values import Effect, Recorded


def shape(value: object) -> object:
    """`value` with every scalar tagged by its type, so `1`, `1.0` and `True` differ.

    Dict key order is left out: a value is a mapping, and a store may keep it in any order.
    """
    if isinstance(value, dict):
        return ("dict", sorted((key, shape(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("list", [shape(item) for item in value])
    return (type(value).__name__, value)


class EffectKit(Protocol):
    """A store-side counter per workflow and an effect the store performs on it.

    `effect(workflow, n)` adds `n` to the workflow's counter and returns the new count; it is
    keyed by workflow so that a clustered store can keep the counter on the workflow's slot.
    """

    def effect(self, workflow: str, value: int) -> Effect: ...

    async def counter(self, workflow: str) -> int: ...


class _Foreign(Effect):
    """An effect no store performs: `transact` must refuse it by type."""

    __slots__ = ()


# Values the default codec accepts, chosen where stores tend to go wrong: ints past 64 bits,
# floats that a numeric column prints as integers, text that needs escaping, empty containers.
ROUND_TRIPS: list[object] = [
    None,
    True,
    False,
    0,
    -7,
    2**64 + 1,
    1.0,
    0.1,
    -2.5e-8,
    1e300,
    "",
    "plain",
    "ünïcødé ✓ 漢字",
    'quote " back \\ slash\nnew line\ttab',
    [],
    {},
    [1, "two", None, [3.5, False]],
    {"b": 1, "a": {"nested": [True, None, "x"]}, "é": -1.5},
    # Numbers where text and numeric columns part ways: past 2**53, the extremes of a float,
    # a float a numeric type would print without its point.
    2**53 + 1,
    5e-324,
    1.7976931348623157e308,
    1e16,
    "astral \U0001f389 and separators \u2028\u2029",
    *AT_THE_BOUNDS,
]

# Values JSON would bring back different or not at all: each must be refused before a write.
UNENCODABLE = [
    pytest.param((1, 2), id="tuple"),
    pytest.param({1, 2}, id="set"),
    pytest.param({1: "one"}, id="int-key"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(b"bytes", id="bytes"),
    pytest.param({"deep": [1, (2, 3)]}, id="nested-tuple"),
    *UNSTORABLE,
]


class FirstWriterContract:
    """The first write of a key wins, and every value and key the store takes comes back
    as it went in. Needs `checkpointer`."""

    async def test_first_record_wins(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        assert await checkpointer.record(holder, "step", "first") == Recorded("first", True)
        assert await checkpointer.record(holder, "step", "second") == Recorded("first", False)
        assert await checkpointer.load(workflow) == {"step": "first"}

    async def test_supply_and_record_share_first_writer_wins(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        assert await checkpointer.supply(workflow, "given", "outside") == Recorded("outside", True)
        assert await checkpointer.record(holder, "given", "inside") == Recorded("outside", False)
        assert await checkpointer.record(holder, "made", "inside") == Recorded("inside", True)
        assert await checkpointer.supply(workflow, "made", "outside") == Recorded("inside", False)
        assert await checkpointer.load(workflow) == {"given": "outside", "made": "inside"}

    async def test_concurrent_writes_of_one_key_agree_on_one_winner(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        writes = [checkpointer.record(holder, "raced", n) for n in range(10)]
        writes += [checkpointer.supply(workflow, "raced", 100 + n) for n in range(10)]
        outcomes = await asyncio.gather(*writes)
        assert sum(outcome.first for outcome in outcomes) == 1
        winner = next(outcome.value for outcome in outcomes if outcome.first)
        assert all(outcome.value == winner for outcome in outcomes)
        assert await checkpointer.load(workflow) == {"raced": winner}

    async def test_values_come_back_equal_and_of_the_same_type(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        for index, value in enumerate(ROUND_TRIPS):
            recorded = await checkpointer.record(holder, f"value:{index}", value)
            assert shape(recorded.value) == shape(value)
        loaded = await checkpointer.load(workflow)
        assert [shape(value) for value in loaded.values()] == [shape(v) for v in ROUND_TRIPS]
        written = await checkpointer.history(workflow)
        assert [shape(each.value) for each in written] == [shape(v) for v in ROUND_TRIPS]

    async def test_unusual_step_keys_are_ordinary_keys(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        # Only the exact inbox prefix is reserved; these merely look like structure.
        keys = ["inbox", "INBOX:1", "a:b:c", "with space", "{braces}", "ünï", "'; --",
                "new\nline", "x" * MAX_NAME, "🎉" * MAX_NAME]
        for n, key in enumerate(keys):
            assert (await checkpointer.supply(workflow, key, n)).first
        assert await checkpointer.load(workflow) == {key: n for n, key in enumerate(keys)}

    @pytest.mark.parametrize(("key", "error"), BAD_KEYS)
    async def test_bad_step_keys_are_refused(
        self, checkpointer: Checkpointer, effect_kit: EffectKit, key: str, error: type[Exception]
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        with pytest.raises(error, match="step key"):
            await checkpointer.record(holder, key, 1)
        with pytest.raises(error, match="step key"):
            await checkpointer.supply(workflow, key, 1)
        with pytest.raises(error, match="step key"):
            await checkpointer.transact(holder, key, effect_kit.effect(workflow, 1))
        assert await checkpointer.load(workflow) == {}
        assert await effect_kit.counter(workflow) == 0

    @PROPERTY
    @given(data=st.data())
    async def test_an_id_and_key_either_work_or_are_refused_unwritten(
        self, checkpointer: Checkpointer, data: st.DataObject
    ) -> None:
        head = f"p-{uuid.uuid4().hex[:12]}-"  # fresh, and short: the rest is the property's
        workflow = head + data.draw(names(MAX_NAME - len(head)), label="id")
        key = data.draw(names(MAX_NAME), label="key")
        bad_id, bad_key = refusal(check_workflow, workflow), refusal(check_key, key)
        if bad_id is not None:
            for call in (
                checkpointer.claim(workflow, LONG, LONG),
                checkpointer.supply(workflow, "k", 1),
                checkpointer.load(workflow),
            ):
                with pytest.raises(bad_id):
                    await call
            return
        holder = await claim_now(checkpointer, workflow)
        if bad_key is not None:
            with pytest.raises(bad_key):
                await checkpointer.record(holder, key, 1)
            with pytest.raises(bad_key):
                await checkpointer.supply(workflow, key, 1)
            assert await checkpointer.load(workflow) == {}
        else:
            assert await checkpointer.record(holder, key, [key]) == Recorded([key], True)
            assert await checkpointer.supply(workflow, key, "late") == Recorded([key], False)
            assert await checkpointer.load(workflow) == {key: [key]}
            assert [(each.key, each.value) for each in await checkpointer.history(workflow)] == [
                (key, [key])
            ]
        await checkpointer.release(holder)
        await checkpointer.discard(workflow)

    @pytest.mark.parametrize("value", UNENCODABLE)
    async def test_a_value_the_codec_cannot_bring_back_is_refused_unwritten(
        self, checkpointer: Checkpointer, value: object
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        with pytest.raises(Unencodable):
            await checkpointer.record(holder, "recorded", value)
        with pytest.raises(Unencodable):
            await checkpointer.supply(workflow, "supplied", value)
        with pytest.raises(Unencodable):
            await checkpointer.append(workflow, value)
        assert await checkpointer.load(workflow) == {}
        # Refused means unwritten: the keys are still free for the first value that fits.
        assert (await checkpointer.record(holder, "recorded", "fine")).first
        assert (await checkpointer.supply(workflow, "supplied", "fine")).first


class OrderContract:
    """Records come back in first-recorded order, with the store's time of each, and the
    inbox mints ordered keys. Needs `checkpointer`."""

    async def test_load_keeps_first_recorded_order(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        # k9, k10, ... sorts differently from how it was written; alternate the two writers.
        keys = [f"k{n}" for n in range(9, 40)]
        for n, key in enumerate(keys):
            if n % 2:
                await checkpointer.supply(workflow, key, n)
            else:
                await checkpointer.record(holder, key, n)
        # A losing write of an early key must not move it to the end.
        await checkpointer.record(holder, keys[0], "loser")
        await checkpointer.supply(workflow, keys[1], "loser")
        loaded = await checkpointer.load(workflow)
        assert list(loaded) == keys
        assert list(loaded.values()) == list(range(len(keys)))
        assert [each.key for each in await checkpointer.history(workflow)] == keys

    async def test_load_keeps_order_past_a_small_hash(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        # More than 128 fields: past the size where a Redis hash stops keeping insertion order
        # by accident. The keys are a permutation, so sorting cannot pass for ordering either.
        keys = [f"step-{(n * 7919) % 1000:03d}" for n in range(150)]
        for n, key in enumerate(keys):
            await checkpointer.supply(workflow, key, n)
        loaded = await checkpointer.load(workflow)
        assert list(loaded) == keys
        assert list(loaded.values()) == list(range(len(keys)))
        assert [each.key for each in await checkpointer.history(workflow)] == keys

    async def test_history_carries_the_store_time_of_each_write(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        before = datetime.now(UTC)
        await checkpointer.supply(workflow, "a", 1)
        await checkpointer.record(holder, "b", [2])
        await asyncio.sleep(0.02)
        await checkpointer.record(holder, "c", {"three": 3})
        entry = await checkpointer.append(workflow, "four")
        after = datetime.now(UTC)
        written = await checkpointer.history(workflow)
        assert [(each.key, each.value) for each in written] == [
            ("a", 1),
            ("b", [2]),
            ("c", {"three": 3}),
            (entry.key, "four"),
        ]
        for each in written:
            assert each.at.utcoffset() == timedelta(0), "write times must be aware and in UTC"
            # Loose: this catches local time passed off as UTC, or seconds read as ms.
            assert before - timedelta(seconds=5) <= each.at <= after + timedelta(seconds=5)
        moments = [each.at for each in written]
        assert moments == sorted(moments)

    async def test_an_unknown_workflow_has_nothing(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        assert await checkpointer.load(workflow) == {}
        assert await checkpointer.history(workflow) == []
        assert await checkpointer.discard(workflow) == 0


    async def test_append_mints_fixed_width_keys_in_append_order(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        await checkpointer.supply(workflow, "opened", True)
        entries = [await checkpointer.append(workflow, {"n": n}) for n in range(12)]
        keys = [entry.key for entry in entries]
        assert keys == [inbox_key(n) for n in range(1, 13)]
        assert len({len(key) for key in keys}) == 1
        assert sorted(keys) == keys
        assert [entry.value for entry in entries] == [{"n": n} for n in range(12)]
        loaded = await checkpointer.load(workflow)
        assert list(loaded) == ["opened", *keys]
        assert [loaded[key] for key in keys] == [{"n": n} for n in range(12)]

    async def test_concurrent_appends_get_distinct_keys(self, checkpointer: Checkpointer) -> None:
        workflow = fresh()
        entries = await asyncio.gather(*(checkpointer.append(workflow, n) for n in range(20)))
        assert len({entry.key for entry in entries}) == 20
        assert all(entry.key.startswith(INBOX) for entry in entries)
        loaded = await checkpointer.load(workflow)
        assert {entry.key: entry.value for entry in entries} == loaded
        assert set(loaded.values()) == set(range(20))


class TransactContract:
    """`discard` forgets and fences; `transact` performs its effect once, with its record,
    and not at all for a pass that may no longer write. Needs `checkpointer` and `effect_kit`."""

    async def test_discard_forgets_everything_and_fences_the_running_pass(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        running = await claim_now(checkpointer, workflow)
        await checkpointer.record(running, "a", 1)
        await checkpointer.record(running, "b", 2)
        await checkpointer.supply(workflow, "c", 3)
        await checkpointer.append(workflow, "d")
        await checkpointer.append(workflow, "e")
        assert await checkpointer.discard(workflow) == 5
        assert await checkpointer.load(workflow) == {}
        assert await checkpointer.history(workflow) == []
        with pytest.raises(Fenced):
            await checkpointer.record(running, "f", 6)
        with pytest.raises(Fenced):
            await checkpointer.renew(running, LONG)
        assert await checkpointer.load(workflow) == {}
        assert await checkpointer.discard(workflow) == 0
        # Forgotten keys are free again.
        assert (await checkpointer.supply(workflow, "a", "again")).first


    async def test_transact_refuses_another_store_s_effect(
        self, checkpointer: Checkpointer
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        with pytest.raises(TypeError):
            await checkpointer.transact(holder, "step", _Foreign())
        assert await checkpointer.load(workflow) == {}

    async def test_transact_performs_once_and_records_the_result(
        self, checkpointer: Checkpointer, effect_kit: EffectKit
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        first = await checkpointer.transact(holder, "added", effect_kit.effect(workflow, 5))
        assert first == Recorded(5, True)
        again = await checkpointer.transact(holder, "added", effect_kit.effect(workflow, 7))
        assert again == Recorded(5, False)
        assert await effect_kit.counter(workflow) == 5
        assert await checkpointer.load(workflow) == {"added": 5}
        # A different key is a different step, and performs.
        other = await checkpointer.transact(holder, "more", effect_kit.effect(workflow, 2))
        assert other == Recorded(7, True)
        assert await effect_kit.counter(workflow) == 7

    async def test_concurrent_transacts_of_one_key_perform_once(
        self, checkpointer: Checkpointer, effect_kit: EffectKit
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        effects = [effect_kit.effect(workflow, 1) for _ in range(8)]
        outcomes = await asyncio.gather(
            *(checkpointer.transact(holder, "once", effect) for effect in effects)
        )
        assert sum(outcome.first for outcome in outcomes) == 1
        assert all(outcome.value == 1 for outcome in outcomes)
        assert await effect_kit.counter(workflow) == 1

    async def test_transact_after_a_record_performs_nothing(
        self, checkpointer: Checkpointer, effect_kit: EffectKit
    ) -> None:
        workflow = fresh()
        holder = await claim_now(checkpointer, workflow)
        await checkpointer.supply(workflow, "given", "outside")
        outcome = await checkpointer.transact(holder, "given", effect_kit.effect(workflow, 3))
        assert outcome == Recorded("outside", False)
        assert await effect_kit.counter(workflow) == 0

    async def test_a_transact_of_a_key_recorded_before_is_a_sign_of_life(
        self, checkpointer: Checkpointer, effect_kit: EffectKit
    ) -> None:
        # A transact retried after a lost reply (or of a key supplied from outside) finds its
        # key recorded and is answered early; that is still the pass speaking, and keeps its
        # claim alive as a record of a recorded key does, or the pass is fenced at its next
        # write with no one else in (Redis answered early without renewing).
        async def scenario(scale: float) -> None:
            workflow = fresh()
            alive = timedelta(milliseconds=500 * scale)
            limit = alive.total_seconds()
            since = Stopwatch()
            holder = await claim_now(checkpointer, workflow, budget=LONG, alive=alive)
            await checkpointer.supply(workflow, "given", "outside")
            # Twice `alive` in all, but (on a machine keeping pace) never `alive` between two.
            for beat in range(4):
                await asyncio.sleep(limit / 2)
                sending = Stopwatch()
                try:
                    outcome = await checkpointer.transact(
                        holder, "given", effect_kit.effect(workflow, 1)
                    )
                except Fenced:
                    since.within(limit, f"the sign of life before beat {beat}, and beat {beat}")
                    raise
                assert outcome == Recorded("outside", False)
                since = sending
            claimed = await checkpointer.claim(workflow, LONG, LONG)
            if claimed is not None:
                since.within(limit, "the last beat and the claim after it")
            assert claimed is None
            assert await effect_kit.counter(workflow) == 0

        await at_any_pace(scenario)

    async def test_a_superseded_transact_performs_nothing(
        self, checkpointer: Checkpointer, effect_kit: EffectKit
    ) -> None:
        workflow = fresh()
        stale = await claim_now(checkpointer, workflow)
        await checkpointer.release(stale)
        await claim_now(checkpointer, workflow)
        with pytest.raises(Fenced):
            await checkpointer.transact(stale, "added", effect_kit.effect(workflow, 5))
        assert await effect_kit.counter(workflow) == 0
        assert await checkpointer.load(workflow) == {}

    async def test_a_lapsed_transact_performs_nothing(
        self, checkpointer: Checkpointer, effect_kit: EffectKit
    ) -> None:
        workflow = fresh()
        lapsed = await claim_now(checkpointer, workflow, alive=BRIEF)
        await asyncio.sleep(PAST_BRIEF)
        with pytest.raises(Fenced):
            await checkpointer.transact(lapsed, "added", effect_kit.effect(workflow, 5))
        assert await effect_kit.counter(workflow) == 0
        assert await checkpointer.load(workflow) == {}


class RecordContract(FirstWriterContract, OrderContract, TransactContract):
    """Writes, reads, the inbox, discard and transact; mixed into `CheckpointerContract`."""
