"""The per-step events ("loaded", "step"): sent to an observer that asks for them (`detail`),
for each step that ran and never for one replayed from its record; never sent to one that
does not ask."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import pytest

from durability import MemoryCheckpointer, MemoryScheduler, Run, SplitDurable, as_int, work
from durability.codec import as_text
from durability.testing import Observed
from durability.worker.events import DETAIL, Emitter, Event

TICK = timedelta(milliseconds=50)


class Detailed(Observed):
    """Keeps what each "loaded" event's records held when it was sent (they are the pass's own,
    read as told: the pass goes on adding to them)."""

    detail = True

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[dict[str, object]] = []

    def __call__(self, event: Event) -> None:
        if event.kind == "loaded" and event.records is not None:
            self.loaded.append(dict(event.records))
        super().__call__(event)


def durable() -> SplitDurable:
    return SplitDurable(MemoryCheckpointer(), MemoryScheduler(lease=timedelta(seconds=5)))


async def body(run: Run) -> int:
    first = await run.step("first", lambda: 1, as_int)
    await run.awaiting("go", as_text)
    return first + await run.step("second", lambda: 2, as_int)


async def passes(observer: Observed, store: SplitDurable) -> None:
    task = asyncio.create_task(work(store, body, tick=TICK, observer=observer))
    try:
        await store.arrive("w", "start", 0)
        await observer.until(lambda: len(observer.of("w", "outcome")) == 1)
        await store.arrive("w", "go", "now")
        await observer.until(lambda: observer.completed("w"))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_detailed_observer_sees_each_step_that_ran_once_and_no_replay() -> None:
    observer = Detailed()
    store = durable()
    await passes(observer, store)
    steps = observer.of("w", "step")
    # The second pass replays "first" from its record: only "second" ran in it.
    assert [event.key for event in steps] == ["first", "second"]
    for event in steps:
        assert event.error is None
        assert event.began is not None and event.began <= event.at
    loaded = observer.of("w", "loaded")
    assert len(loaded) == 2
    assert loaded[0].token is not None and loaded[1].token is not None
    assert loaded[1].token > loaded[0].token  # each pass its own claim
    assert observer.loaded == [{"start": 0}, {"start": 0, "first": 1, "go": "now"}]


async def test_a_plain_observer_is_sent_no_detail() -> None:
    observer = Observed()
    await passes(observer, durable())
    assert not any(event.kind in DETAIL for event in observer.events)
    assert observer.kinds("w").count("started") == 2


async def test_a_step_that_raises_is_told_with_its_error() -> None:
    observer = Detailed()
    store = durable()

    def broken() -> int:
        raise ValueError("no")

    async def failing(run: Run) -> int:
        return await run.step("bad", broken, as_int)

    task = asyncio.create_task(work(store, failing, tick=TICK, observer=observer))
    try:
        await store.arrive("f", "start", 0)
        await observer.until(lambda: bool(observer.of("f", "dead")))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    [step] = observer.of("f", "step")
    assert step.key == "bad" and isinstance(step.error, ValueError)
    assert [e.kind for e in observer.of("f") if e.kind != "delivered"][:3] == [
        "started",
        "loaded",
        "step",
    ]


def test_an_event_without_detail_keeps_its_old_shape() -> None:
    event = Event("started", "w", 1.0)
    assert event.token is None and event.key is None and event.records is None


async def test_an_observer_that_says_it_is_off_is_never_called() -> None:
    class Off(Detailed):
        enabled = False

    observer = Off()
    store = durable()
    task = asyncio.create_task(work(store, body, tick=TICK, observer=observer))
    try:
        await store.arrive("w", "start", 0)
        pause = 0.005
        async with asyncio.timeout(5):
            while (await store.status("w")).state != "blocked":  # the pass ran
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.1)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert observer.events == []


def test_an_emitted_event_reads_every_field_it_was_not_given_as_none_and_equals_one_made_whole(
) -> None:
    import dataclasses
    import pickle

    seen: list[Event] = []
    Emitter(seen.append).emit("started", "w-1")
    Emitter(seen.append).emit("step", "w-1", key="charge", began=1.0)
    plain, keyed = seen
    whole = Event("started", "w-1", plain.at)
    assert plain == whole and hash(plain) == hash(whole) and repr(plain) == repr(whole)
    assert [getattr(plain, f.name) for f in dataclasses.fields(Event)][3:] == [None] * 8
    assert (keyed.key, keyed.began, keyed.kind, keyed.error) == ("charge", 1.0, "step", None)
    assert dataclasses.replace(plain, key="charge", began=1.0, kind="step", at=keyed.at) == keyed
    assert pickle.loads(pickle.dumps(plain)) == plain and dataclasses.asdict(plain) == (
        dataclasses.asdict(whole)
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.key = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = plain.nothing  # type: ignore[attr-defined]
