"""Schedules kept in the store: kept, listed, paused, removed, and each firing started once.

The store's part is its `Timetable` (`durability.schedules.timetable`): a record by name, a
compare-and-set on it, and an index by when each is due. These tests drive it through
`Schedules` with the time passed in, so a day of firings takes milliseconds; the races are real
(many firers at once over the store), and so is the one test under `work`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from durability.bodies import STARTED
from durability.interfaces import Durable
from durability.schedules import HOLD, Announced, Schedules, Timetabled, fired, firing_id
from durability.split import SplitDurable
from durability.stepwise import Run
from durability.testing import Observed
from durability.testing.conformance.claims import fresh
from durability.testing.conformance.scheduler import QUIET
from durability.testing.conformance.working import PATIENCE, working
from durability.values import Limit, Recorded

#: A moment on the minute, so interval firings fall on round times.
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _schedules(durable: Durable, moment: datetime) -> Schedules:
    """Schedules whose clock (read by `add` and `resume` alone) says `moment`."""
    return Schedules(durable, clock=lambda: moment)


async def _delivered(durable: Durable) -> list[str]:
    """Every workflow the queue hands out now, each answered."""
    got: list[str] = []
    while (delivery := await durable.scheduler.next_ready(QUIET)) is not None:
        got.append(delivery.workflow)
        await durable.scheduler.done(delivery)
    return got


#: Makes another `Durable` over the store and queue of `durable`.
Twin = Callable[[], Awaitable[Durable]]


class ScheduleContract:
    """What every store's schedules must do. Part of `DurableContract`: override `durable`,
    and `twin` if the store has connections of its own to give another worker."""

    @pytest.fixture
    def twin(self, durable: Durable) -> Twin:
        """Another `Durable` over the same store and queue as `durable`, on connections of its
        own where the store has them: another worker, as near as one process comes. By
        default `durable` itself."""

        async def same() -> Durable:
            return durable

        return same

    async def test_a_schedule_is_kept_listed_and_removed(self, durable: Durable) -> None:
        name = fresh("schedule")
        schedules = _schedules(durable, T0)
        added = await schedules.add(name, "report", {"to": "ops"}, every=timedelta(hours=1))
        assert added.next == T0 + timedelta(hours=1)
        assert await schedules.get(name) == added
        assert name in [s.name for s in await schedules.list()]
        assert await schedules.earliest() == T0 + timedelta(hours=1)
        assert await schedules.remove(name) is True
        assert await schedules.get(name) is None
        assert await schedules.remove(name) is False
        assert await schedules.earliest() is None

    async def test_adding_again_unchanged_keeps_it_and_changed_replaces_it(
        self, durable: Durable
    ) -> None:
        name = fresh("schedule")
        first = await _schedules(durable, T0).add(name, "report", every=timedelta(hours=1))
        later = _schedules(durable, T0 + timedelta(minutes=30))
        assert await later.add(name, "report", every=timedelta(hours=1)) == first
        changed = await later.add(name, "report", cron="0 3 * * *")
        assert changed.next == datetime(2030, 1, 2, 3, 0, tzinfo=UTC)
        assert await later.get(name) == changed

    async def test_the_earliest_is_the_soonest_unpaused_schedule(self, durable: Durable) -> None:
        schedules = _schedules(durable, T0)
        soon, later = fresh("soon"), fresh("later")
        await schedules.add(later, "report", every=timedelta(hours=2))
        await schedules.add(soon, "report", every=timedelta(hours=1))
        assert await schedules.earliest() == T0 + timedelta(hours=1)
        paused = await schedules.pause(soon)
        assert paused.paused and paused.next is None
        assert await schedules.earliest() == T0 + timedelta(hours=2)
        assert await schedules.fire_due(T0 + timedelta(hours=1, seconds=1)) == []
        resumed = await _schedules(durable, T0 + timedelta(minutes=90)).resume(soon)
        assert resumed.next == T0 + timedelta(hours=2)
        with pytest.raises(KeyError, match="no schedule"):
            await schedules.pause(fresh("absent"))

    async def test_a_firing_starts_its_workflow_with_its_input(self, durable: Durable) -> None:
        name = fresh("schedule")
        schedules = _schedules(durable, T0)
        await schedules.add(name, "report", {"to": "ops"}, every=MINUTE)
        assert await schedules.fire_due(T0 + timedelta(seconds=59)) == []
        started = await schedules.fire_due(T0 + MINUTE)
        assert started == [firing_id(name, T0 + MINUTE)]
        records = await durable.checkpointer.load(started[0])
        assert records == {STARTED: {"body": "report", "value": {"to": "ops"}, "schedule": name,
                                     "at": (T0 + MINUTE).isoformat()}}
        assert await _delivered(durable) == started
        stored = await schedules.get(name)
        assert stored is not None
        assert (stored.fired, stored.next, stored.pending) == (T0 + MINUTE, T0 + 2 * MINUTE, ())

    async def test_many_firers_start_each_firing_once(self, durable: Durable, twin: Twin) -> None:
        name = fresh("schedule")
        schedules = _schedules(durable, T0)
        await schedules.add(name, "report", every=MINUTE, missed="skip")
        workers = [schedules] + [_schedules(await twin(), T0) for _ in range(3)]
        started: list[str] = []
        for minute in range(1, 13):
            now = T0 + minute * MINUTE + timedelta(seconds=1)
            # Eight firers look at once, two a worker, as processes woken by one deadline do.
            looks = await asyncio.gather(*(w.fire_due(now) for w in workers for _ in range(2)))
            started += [workflow for look in looks for workflow in look]
        assert sorted(started) == sorted(firing_id(name, T0 + m * MINUTE) for m in range(1, 13))
        assert sorted(await _delivered(durable)) == sorted(started)

    async def test_two_starters_of_one_firing_make_one_workflow(self, durable: Durable) -> None:
        name = fresh("schedule")
        schedules = _schedules(durable, T0)
        await schedules.add(name, "report", every=MINUTE)
        crashing = _Crashing(durable)
        with pytest.raises(_Crash):  # took the firing, then died before starting it
            await Schedules(crashing).fire_due(T0 + MINUTE)
        stored = await schedules.get(name)
        assert stored is not None and stored.pending == (T0 + MINUTE,)
        assert await schedules.fire_due(T0 + MINUTE + HOLD / 2) == []  # still held
        lapsed = T0 + MINUTE + HOLD + timedelta(seconds=1)
        looks = await asyncio.gather(*(schedules.fire_due(lapsed) for _ in range(4)))
        assert [w for look in looks for w in look] == [firing_id(name, T0 + MINUTE)]
        assert await _delivered(durable) == [firing_id(name, T0 + MINUTE)]
        stored = await schedules.get(name)
        assert stored is not None and stored.pending == () and stored.fired == T0 + MINUTE

    @pytest.mark.parametrize(
        ("missed", "bound", "expected"),
        [("skip", 100, []), ("latest", 100, [10]), ("all", 3, [8, 9, 10]), ("all", 100,
                                                                           list(range(1, 11)))],
    )
    async def test_firings_missed_while_no_worker_ran_follow_the_policy(
        self, durable: Durable, missed: str, bound: int, expected: list[int]
    ) -> None:
        name = fresh("schedule")
        schedules = _schedules(durable, T0)
        every = 5 * MINUTE
        await schedules.add(name, "report", every=every, missed=missed, bound=bound)  # type: ignore[arg-type]
        now = T0 + 10 * every + timedelta(seconds=90)  # ten missed, the last 90 s late
        started = await schedules.fire_due(now)
        assert started == [firing_id(name, T0 + m * every) for m in expected]
        stored = await schedules.get(name)
        assert stored is not None and stored.next == T0 + 11 * every

    async def test_a_worker_fires_a_schedule_and_the_body_gets_the_firing(
        self, durable: Durable
    ) -> None:
        name = fresh("schedule")
        got: asyncio.Queue[tuple[str, object]] = asyncio.Queue()

        async def body(run: Run) -> None:
            firing = await fired(run)
            await got.put((firing.body, firing.input))

        async with working(durable, body, Observed(), pool=2):
            await Schedules(durable).add(name, "tick", {"n": 1},
                                         every=timedelta(milliseconds=100), missed="skip")
            assert await asyncio.wait_for(got.get(), PATIENCE) == ("tick", {"n": 1})
        await Schedules(durable).remove(name)

    async def test_a_firing_of_a_body_no_worker_runs_fails_and_is_kept(
        self, durable: Durable
    ) -> None:
        name = fresh("schedule")
        ran: asyncio.Queue[object] = asyncio.Queue()

        async def known(run: Run) -> None:
            await ran.put(run.input(lambda value: value))

        schedules = Schedules(durable)
        await schedules.add(name, "unknown-body", {"n": 1}, every=timedelta(milliseconds=100),
                            missed="skip")
        async with working(durable, {"known": known}, Observed(), pool=2):
            loop = asyncio.get_running_loop()
            give_up = loop.time() + PATIENCE
            while not (page := await durable.list(prefix=name, state="failed")).statuses:  # type: ignore[attr-defined]
                assert loop.time() < give_up, "the firing of an unknown body never failed"
                await asyncio.sleep(0.05)
            await schedules.pause(name)
        failure = page.statuses[0].failure
        assert failure is not None and failure.type == "UnknownBody"
        assert "unknown-body" in failure.message
        assert ran.empty()
        assert await durable.checkpointer.load(page.statuses[0].workflow)  # kept, to retry
        await schedules.remove(name)

    async def test_bad_schedules_are_refused_before_the_store(self, durable: Durable) -> None:
        schedules = _schedules(durable, T0)
        name = fresh("schedule")
        with pytest.raises(ValueError, match="malformed cron expression '61 \\* \\* \\* \\*'"):
            await schedules.add(name, "report", cron="61 * * * *")
        with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
            await schedules.add(name, "report", cron="0 3 * * *", zone="Mars/Olympus")
        with pytest.raises(ValueError, match="every"):
            await schedules.add(name, "report", every=timedelta(0))
        with pytest.raises(ValueError, match="exactly one of cron= and every="):
            await schedules.add(name, "report")
        with pytest.raises(ValueError, match="missed must be one of skip, latest, all"):
            await schedules.add(name, "report", every=MINUTE, missed="sometimes")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="bound"):
            await schedules.add(name, "report", every=MINUTE, missed="all", bound=0)
        with pytest.raises(ValueError, match="brace"):
            await schedules.add("{nightly}", "report", every=MINUTE)
        with pytest.raises(ValueError, match="body"):
            await schedules.add(name, "", every=MINUTE)
        assert await schedules.get(name) is None


class _Crash(Exception):
    """What the crashing worker dies of, right after taking a firing."""


class _Crashing(SplitDurable):
    """`durable`'s two halves, whose starts die before they reach the store."""

    def __init__(self, durable: Durable) -> None:
        super().__init__(durable.checkpointer, durable.scheduler)

    async def arrive(
        self,
        workflow: str,
        key: str,
        value: object,
        *,
        priority: int = 0,
        limit: Limit | None = None,
    ) -> Recorded:
        raise _Crash(workflow)



async def a_schedule_added_elsewhere_wakes_a_worker(durable: Durable, twin: Twin) -> None:
    """For a store whose timetable is `Announced`: a worker asleep for a long sweep starts a
    schedule another process (`twin`) adds, at its first firing, not at its next sweep."""
    name = fresh("schedule")
    got: asyncio.Queue[str] = asyncio.Queue()

    async def body(run: Run) -> None:
        await got.put((await fired(run)).schedule)

    elsewhere = await twin()
    assert isinstance(elsewhere.scheduler, Timetabled)
    assert isinstance(elsewhere.scheduler.timetable, Announced)
    # A sweep far past the patience: only the announcement can wake the worker in time.
    async with working(durable, body, Observed(), pool=2, sweep=timedelta(minutes=10)):
        await asyncio.sleep(0.3)  # asleep, with nothing to fire
        await Schedules(elsewhere).add(name, "tick", every=timedelta(milliseconds=100),
                                       missed="skip")
        assert await asyncio.wait_for(got.get(), PATIENCE) == name
    await Schedules(elsewhere).remove(name)
