"""Model-based tests: random sequences of operations on a real store, checked step by step
against a model of the contract (`checkpoint_model`, `queue_model`).

`CheckpointerModelContract` and `SchedulerModelContract` are the classes a store's suite
subclasses; `drive` runs a model's state machine against the store under the chosen profile.
A failure that hypothesis cannot replay (a real clock can go another way the second time) is
reported as itself, with the store calls that led to it, not as hypothesis's `Flaky`.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import reprlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeGuard, TypeVar, cast

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.errors import Flaky, FlakyFailure, HypothesisException
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from durability.interfaces import Checkpointer
from durability.testing.conformance.checkpoint_model import CheckpointMachine
from durability.testing.conformance.queue_model import MakeScheduler, QueueMachine
from durability.testing.conformance.records import EffectKit
from durability.testing.conformance.timeline import RealTime, Timeline
from durability.values import Pass

__all__ = ["PROFILES", "CheckpointerModelContract", "SchedulerModelContract", "drive", "profile"]

T = TypeVar("T")

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]
# Applied to these tests only. `durability-model` is sized for CI; `durability-model-long`,
# chosen with `DURABILITY_MODEL_PROFILE=long`, searches for minutes per store.
settings.register_profile(
    "durability-model",
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=_QUIET,
)
settings.register_profile(
    "durability-model-long",
    max_examples=500,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=_QUIET,
)
#: What `DURABILITY_MODEL_PROFILE` may say, and the profile each picks.
PROFILES = {"ci": "durability-model", "long": "durability-model-long"}
#: The most one operation may take before the test fails rather than hangs.
STEP_TIMEOUT = 60.0


def profile() -> settings:
    """The settings `DURABILITY_MODEL_PROFILE` picks (`ci` unless set)."""
    chosen = os.environ.get("DURABILITY_MODEL_PROFILE", "ci")
    if chosen not in PROFILES:
        raise ValueError(
            f"DURABILITY_MODEL_PROFILE={chosen!r}; it may be one of {sorted(PROFILES)}"
        )
    return settings.get_profile(PROFILES[chosen])


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


class _Short(reprlib.Repr):
    """How a value is shown in a noted call: cut short, but a `Pass` always with its token."""

    def __init__(self) -> None:
        super().__init__()
        self.maxother = self.maxstring = 90

    def repr_Pass(self, holder: Pass, level: int) -> str:  # reprlib finds it by type name
        return f"Pass({holder.workflow!r}, token={holder.token}, alive={holder.alive})"


_SHORT = _Short()


def _said(awaitable: Awaitable[Any]) -> str:
    """A store call as `Class.method(arg=value, ...)`, each value cut short."""
    name = getattr(awaitable, "__qualname__", type(awaitable).__name__)
    arguments = inspect.getcoroutinelocals(awaitable) if inspect.iscoroutine(awaitable) else {}
    shown = (f"{key}={_SHORT.repr(value)}" for key, value in arguments.items() if key != "self")
    return f"{name}({', '.join(shown)})"


def _unmasked(flaky: Flaky, trail: list[str]) -> BaseException:
    """What to report for a `Flaky`: the failure it was raised over, if any, else itself.

    On a real clock the same example can fail at another step, or not at all, when hypothesis
    runs it again (to shrink it), and hypothesis then reports that it could not: as a
    `FlakyStrategyDefinition` raised over the failure, blaming the data generation, or as a
    `FlakyFailure` grouping the failure with that. What the first run found is still a failure
    of the store or of the model, so that is what is raised. `trail` (the calls of the last
    example run) is the failing example's only in the first case, so only then is it shown.
    """
    if isinstance(flaky, FlakyFailure):
        under: list[BaseException | None] = list(flaky.exceptions)
        steps = ""
    else:
        under = [flaky.__context__]
        steps = " What the example asked of the store, in order:\n" + "\n".join(trail)
    found = next((error for error in under if _ours(error)), None)
    if found is None:
        return flaky
    found.add_note(
        "Hypothesis could not replay this example (on a real clock a rerun can go another way)"
        f" and gave up with {type(flaky).__name__}; this is the failure as it first happened."
        + steps
    )
    return found


def _ours(error: BaseException | None) -> TypeGuard[Exception]:
    """A failure of the test's own (an assertion, a store's error), not hypothesis's."""
    return isinstance(error, Exception) and not isinstance(error, HypothesisException)


async def drive(build: Callable[[Callable[[Awaitable[Any]], Any]], RuleBasedStateMachine]) -> None:
    """Run the machine `build(run)` makes under `profile()`.

    Hypothesis calls rules synchronously, and the store lives on this test's event loop, so
    the machine runs in a thread of its own and `run` hands each coroutine to this loop and
    waits for its outcome (a `Fenced` included: it is raised in the machine's thread). Each
    call is noted, with when it was sent and answered, so that a failure hypothesis cannot
    replay is still reported as itself, with its steps (see `_unmasked`).
    """
    loop = asyncio.get_running_loop()
    #: The calls of the example running now.
    trail: list[str] = []

    def run(awaitable: Awaitable[Any]) -> Any:
        said = _said(awaitable)
        sent = datetime.now(UTC)
        future = asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop)
        try:
            outcome = future.result(timeout=STEP_TIMEOUT)
        except BaseException as error:
            heard = f"raised {error!r}"
            raise
        else:
            heard = _SHORT.repr(outcome)
            return outcome
        finally:
            answered = datetime.now(UTC)
            trail.append(f"  {sent:%H:%M:%S.%f}..{answered:%H:%M:%S.%f} {said} -> {heard}")

    def machine() -> RuleBasedStateMachine:
        trail.clear()
        return build(run)

    def test() -> None:
        try:
            # Documented as taking any factory; annotated as taking the class.
            run_state_machine_as_test(
                cast(type[RuleBasedStateMachine], machine), settings=profile()
            )
        except Flaky as flaky:
            found = _unmasked(flaky, trail)
            if found is flaky:
                raise
            raise found from None

    await asyncio.to_thread(test)


class CheckpointerModelContract:
    """Random operations on the store's `Checkpointer` agree with the model at every step.

    Subclass with the fixtures the store's `CheckpointerContract` already has
    (`checkpointer = TestRedisCheckpointer.checkpointer`, and `effect_kit` to try `transact`);
    `docs/conformance.md` has the whole example. Each example works on ids of its own, so a
    shared server is fine. The store runs on `RealTime` (short real sleeps, and a grey window:
    see `timeline`) unless the subclass overrides `timeline`: a store that takes its clock from
    the caller gives a `FakeTime` there and builds itself on it.
    """

    @pytest.fixture
    def checkpointer(self) -> Checkpointer:
        raise NotImplementedError(f"{type(self).__name__} must override `checkpointer`")

    @pytest.fixture
    def effect_kit(self) -> EffectKit | None:
        """The store's effect kit (see `CheckpointerContract`), or None to leave out transact."""
        return None

    @pytest.fixture
    def timeline(self) -> Timeline:
        return RealTime()

    async def test_agrees_with_the_model(
        self, checkpointer: Checkpointer, effect_kit: EffectKit | None, timeline: Timeline
    ) -> None:
        await drive(lambda run: CheckpointMachine(checkpointer, timeline, run, effect_kit))


class SchedulerModelContract:
    """Random operations on the store's `Scheduler` agree with the model at every step.

    Subclass with the store's `SchedulerContract` fixture
    (`make_scheduler = TestRedisStreamContract.make_scheduler`). Each example works on ids and a
    queue of its own, so a shared server is fine. `timeline` is as in
    `CheckpointerModelContract`.
    """

    @pytest.fixture
    def make_scheduler(self) -> MakeScheduler:
        raise NotImplementedError(f"{type(self).__name__} must override `make_scheduler`")

    @pytest.fixture
    def timeline(self) -> Timeline:
        return RealTime()

    async def test_agrees_with_the_model(
        self, make_scheduler: MakeScheduler, timeline: Timeline
    ) -> None:
        await drive(lambda run: QueueMachine(make_scheduler, timeline, run))
