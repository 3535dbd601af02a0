"""`beats`: a polling reader looks on a fixed beat, whatever each look costs."""

from __future__ import annotations

from datetime import timedelta

from durability.waits import beats


class Clock:
    """A clock that moves only when told: by a look's cost or by a sleep."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


async def _looks(poll: float, within: float, cost: float) -> list[float]:
    clock = Clock()
    start, at = clock.now, []
    async for _ in beats(
        timedelta(seconds=poll), timedelta(seconds=within), clock=clock, sleep=clock.sleep
    ):
        at.append(round(clock.now - start, 9))
        clock.now += cost  # the look's own round trip
    return at


async def test_looks_fall_on_the_beat_whatever_each_look_costs() -> None:
    # Sleeping a poll after each look would drift to 0, 0.013, 0.026...; the beat does not.
    assert await _looks(poll=0.010, within=0.035, cost=0.003) == [0, 0.01, 0.02, 0.03, 0.035]


async def test_a_look_that_overruns_beats_waits_for_the_next_one_ahead() -> None:
    assert await _looks(poll=0.010, within=0.05, cost=0.025) == [0, 0.03]


async def test_a_poll_longer_than_within_looks_at_once_and_at_the_end() -> None:
    assert await _looks(poll=1.0, within=0.2, cost=0.001) == [0, 0.2]


async def test_a_look_past_the_deadline_is_the_last() -> None:
    assert await _looks(poll=0.010, within=0.005, cost=0.02) == [0]
