"""The instruments `Telemetry` records into, and `watch`, which samples a queue's depth and
oldest wait for two observable gauges (a store read is async; a gauge's callback is not)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import timedelta

from opentelemetry import metrics

from durability.checks import positive
from durability.interfaces import Durable, Waiting
from durability.otel.naming import Names
from durability.values import Backlog

__all__ = ["Meters"]


class Meters:
    """Every instrument, named as OpenTelemetry's conventions name one where one fits
    (`messaging.process.duration` for a pass)."""

    def __init__(self, meter: metrics.Meter, names: Names) -> None:
        self.common = {
            "messaging.system": "durability",
            "messaging.destination.name": names.destination,
            "durability.store": names.store,
        }
        self.passes = meter.create_counter(
            "durability.passes", unit="{pass}", description="Passes, by how each ended"
        )
        self.pass_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="How long a pass ran, from its claim to its ending, by ending",
        )
        self.step_duration = meter.create_histogram(
            "durability.step.duration",
            unit="s",
            description="How long a step that ran took, its record included",
        )
        self.start_latency = meter.create_histogram(
            "durability.workflow.start_latency",
            unit="s",
            description="From a traced arrive to the first pass of its workflow",
        )
        self.endings = meter.create_counter(
            "durability.workflow.endings",
            unit="{workflow}",
            description="Workflows that completed or failed for good",
        )
        self.retries = meter.create_counter(
            "durability.retries", unit="{retry}", description="Failed attempts tried again"
        )
        self.failures = meter.create_counter(
            "durability.failures", unit="{failure}", description="Failed attempts, by error type"
        )
        self.sampled: Backlog | None = None
        meter.create_observable_gauge(
            "durability.queue.depth",
            callbacks=[self._depth],
            unit="{workflow}",
            description="Workflows ready and not yet taken (as last sampled by watch)",
        )
        meter.create_observable_gauge(
            "durability.queue.oldest_ready_age",
            callbacks=[self._age],
            unit="s",
            description="How long the oldest ready workflow has waited (as last sampled)",
        )

    def passed(self, ending: str, nanoseconds: int) -> None:
        attributes = {**self.common, "durability.pass.ending": ending}
        self.passes.add(1, attributes)
        self.pass_duration.record(nanoseconds / 1e9, attributes)

    def step(self, seconds: float, error: BaseException | None) -> None:
        attributes = dict(self.common)
        if error is not None:
            attributes["error.type"] = type(error).__qualname__
        self.step_duration.record(max(seconds, 0.0), attributes)

    def failed(self, error: BaseException | None) -> None:
        kind = "unknown" if error is None else type(error).__qualname__
        self.failures.add(1, {**self.common, "error.type": kind})

    def _depth(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        if self.sampled is not None:
            yield metrics.Observation(self.sampled.ready, self.common)

    def _age(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        if self.sampled is not None and self.sampled.oldest is not None:
            yield metrics.Observation(self.sampled.oldest.total_seconds(), self.common)

    async def sample(self, durable: Durable) -> Backlog | None:
        """Read the queue's backlog once, for the gauges (None if the store cannot say)."""
        scheduler = durable.scheduler
        if not isinstance(scheduler, Waiting):
            return None
        self.sampled = await scheduler.backlog()
        return self.sampled

    async def watch(self, durable: Durable, every: timedelta) -> None:
        """Sample the backlog every `every` until cancelled; a failed read keeps the last."""
        positive("every", every)
        while True:
            with contextlib.suppress(Exception):  # a store fault: the gauges keep the last
                await self.sample(durable)
            await asyncio.sleep(every.total_seconds())
