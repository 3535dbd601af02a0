"""`drive` reports a failure that hypothesis cannot replay as that failure.

On a real clock a model-based example can go another way when hypothesis runs it again, and
hypothesis then reports its own bookkeeping (`FlakyStrategyDefinition`, "inconsistent data
generation", or a `FlakyFailure`) instead of what failed; a Redis checkpointer bug once
reached CI that way. These machines fail in some examples and not in others, as a failure
that turns on a real clock does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition
from hypothesis.stateful import RuleBasedStateMachine, rule

from durability.testing.conformance import model
from durability.testing.conformance.model import _unmasked, drive

Run = Callable[[Awaitable[Any]], Any]


async def _answer(step: int) -> int:
    return step


@pytest.fixture(autouse=True)
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    quick = settings(max_examples=10, stateful_step_count=3, deadline=None, database=None)
    monkeypatch.setattr(model, "profile", lambda: quick)


def machines(fails: Callable[[int, int], bool]) -> Callable[[Run], RuleBasedStateMachine]:
    """A factory of machines whose one rule asks the store something, then fails when
    `fails(example, step)` says so (both counted from 1 over the whole run)."""
    examples = [0]

    class Asking(RuleBasedStateMachine):
        def __init__(self, run: Run) -> None:
            super().__init__()
            self.run = run
            self.steps = 0
            examples[0] += 1

        @rule()
        def ask(self) -> None:
            self.steps += 1
            answer = self.run(_answer(self.steps))
            assert not fails(examples[0], answer), f"the store said no at step {answer}"

    return Asking


#: Failures that come and go as a real clock's can: once only, and every other example.
COMING_AND_GOING = {
    "once": lambda example, step: example == 1 and step == 2,
    "every other": lambda example, step: example % 2 == 0 and step == 1,
}


@pytest.mark.parametrize("fails", COMING_AND_GOING.values(), ids=COMING_AND_GOING.keys())
async def test_a_failure_hypothesis_cannot_replay_is_reported_as_itself(
    fails: Callable[[int, int], bool],
) -> None:
    # Hypothesis, running the example again, sees it go another way and raises Flaky: either
    # FlakyStrategyDefinition over the failure or a FlakyFailure grouping it.
    with pytest.raises(AssertionError, match="the store said no") as failed:
        await drive(machines(fails))
    assert "could not replay" in "\n".join(failed.value.__notes__)


async def test_a_failure_cut_short_is_reported_with_the_calls_before_it() -> None:
    # Hypothesis reports this machine's failure one of two ways, by its own choice (a run can
    # go either way every time): FlakyStrategyDefinition straight over the failure, where the
    # example that failed is the last one run, so its calls are known and shown; or a
    # FlakyFailure grouping it, where the last example run is another, so none are shown.
    with pytest.raises(AssertionError, match="the store said no at step 1") as failed:
        await drive(machines(COMING_AND_GOING["every other"]))
    notes = "\n".join(failed.value.__notes__)
    if "FlakyStrategyDefinition" in notes:
        assert notes.rstrip().endswith("_answer(step=1) -> 1"), notes
    else:
        assert "FlakyFailure" in notes, notes
        assert "_answer(" not in notes, notes


def _failure() -> AssertionError:
    return AssertionError("the store said no")


def test_a_strategy_blamed_over_a_failure_shows_the_failure_and_its_calls() -> None:
    failure = _failure()
    flaky = FlakyStrategyDefinition("Inconsistent data generation")
    flaky.__context__ = failure
    trail = ["  sent..answered Store.get(key='a') -> None", "  sent..answered Store.put() -> 1"]
    found = _unmasked(flaky, trail)
    assert found is failure
    notes = "\n".join(found.__notes__)
    assert "gave up with FlakyStrategyDefinition" in notes
    assert notes.endswith("\n".join(trail)), notes


def test_a_grouped_failure_is_raised_without_another_examples_calls() -> None:
    failure = _failure()
    flaky = FlakyFailure("unreliable", [failure])
    found = _unmasked(flaky, ["  sent..answered Store.get(key='b') -> None"])
    assert found is failure
    notes = "\n".join(found.__notes__)
    assert "gave up with FlakyFailure" in notes
    assert "Store.get" not in notes


def test_a_flaky_with_no_failure_of_ours_under_it_is_raised_as_it_is() -> None:
    flaky = FlakyStrategyDefinition("Inconsistent data generation")
    assert _unmasked(flaky, []) is flaky


async def test_a_steady_failure_is_left_to_hypothesis() -> None:
    # A failure that replays is shrunk and reported by hypothesis as ever, with no note.
    with pytest.raises(AssertionError, match="the store said no at step 1") as failed:
        await drive(machines(lambda example, step: True))
    assert "could not replay" not in "\n".join(failed.value.__notes__)
    assert "state.ask()" in failed.value.__notes__
