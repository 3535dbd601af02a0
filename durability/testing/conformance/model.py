"""Model-based tests: random sequences of operations on a real store, checked step by step
against a model of the contract (`checkpoint_model`, `queue_model`).

A store's suite subclasses the two classes here with the fixtures its conformance classes
already have (a third-party store does the same):

    class TestRedisCheckpointerModel(CheckpointerModelContract):
        checkpointer = TestRedisCheckpointer.checkpointer     # and effect_kit, to transact
    class TestRedisStreamModel(SchedulerModelContract):
        make_scheduler = TestRedisStreamContract.make_scheduler

A store that takes its clock from the caller overrides `timeline` with a `FakeTime` and builds
itself on it; the others run on `RealTime`, with short real sleeps and a grey window (see
`timeline`). Each example works on ids (and a queue) of its own, so shared servers are fine.

Profiles (hypothesis settings, applied to these tests only): `durability-model`, sized for CI
(40 examples of up to 30 steps per store), and `durability-model-long`, chosen by setting
`DURABILITY_MODEL_PROFILE=long` (500 examples of up to 80 steps: minutes per store).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from durability.interfaces import Checkpointer
from durability.testing.conformance.checkpoint_model import CheckpointMachine
from durability.testing.conformance.queue_model import MakeScheduler, QueueMachine
from durability.testing.conformance.records import EffectKit
from durability.testing.conformance.timeline import RealTime, Timeline

__all__ = ["PROFILES", "CheckpointerModelContract", "SchedulerModelContract", "drive", "profile"]

T = TypeVar("T")

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]
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


async def drive(build: Callable[[Callable[[Awaitable[Any]], Any]], RuleBasedStateMachine]) -> None:
    """Run the machine `build(run)` makes under `profile()`.

    Hypothesis calls rules synchronously, and the store lives on this test's event loop, so
    the machine runs in a thread of its own and `run` hands each coroutine to this loop and
    waits for its outcome (a `Fenced` included: it is raised in the machine's thread).
    """
    loop = asyncio.get_running_loop()

    def run(awaitable: Awaitable[Any]) -> Any:
        future = asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop)
        return future.result(timeout=STEP_TIMEOUT)

    def machine() -> RuleBasedStateMachine:
        return build(run)

    def test() -> None:
        # Documented as taking any factory; annotated as taking the class.
        run_state_machine_as_test(cast(type[RuleBasedStateMachine], machine), settings=profile())

    await asyncio.to_thread(test)


class CheckpointerModelContract:
    """Random operations on the store's `Checkpointer` agree with the model at every step."""

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
    """Random operations on the store's `Scheduler` agree with the model at every step."""

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
