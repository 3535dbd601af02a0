"""OpenTelemetry on every store, read back through the SDK's in-memory exporters: a request's
trace continues into each pass (`durability.otel.arrive`), a span per pass with its attempt,
token, ending and store, a child per step that ran (not per step replayed), the failure on
both, each pass linked to the one before, and the metrics of it all."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from durability import Durable, Retry, Run, as_int, as_text, work
from durability.connect import open_durable
from durability.otel import CONTEXT, Telemetry, arrive
from durability.otel.carrier import derived
from tests.integration.conftest import POLL

TICK = timedelta(milliseconds=100)


class Exported:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracing = TracerProvider()
        self.tracing.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.metering = MeterProvider(metric_readers=[self.reader])

    def finished(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith(name)]

    def points(self, metric: str) -> list[tuple[dict[str, object], object]]:
        data = self.reader.get_metrics_data()
        found = []
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for each in scope.metrics:
                    if each.name == metric:
                        for point in each.data.data_points:
                            found.append((dict(point.attributes or {}), point))
        return found


@pytest.fixture
def exported() -> Exported:
    return Exported()


@pytest.fixture
async def durable(store_url: str) -> AsyncIterator[Durable]:
    """The store, with a lease long enough that a loaded machine never hands a pass over
    mid-way: these tests count passes, and a takeover would add one."""
    async with open_durable(store_url, lease=timedelta(seconds=10), poll=POLL) as opened:
        yield opened


def a_pass_ended(exported: Exported, ending: str) -> Callable[[], bool]:
    """Whether a pass has ended so."""
    return lambda: any(
        (span.attributes or {}).get("durability.pass.ending") == ending
        for span in exported.finished("pass")
    )


def body_failing_once() -> Callable[[Run], object]:
    tries = {"b": 0}

    def flaky() -> int:
        tries["b"] += 1
        if tries["b"] == 1:
            raise ValueError("the first try of b fails")
        return 2

    async def body(run: Run) -> int:
        a = await run.step("a", lambda: 1, as_int)
        b = await run.step("b", flaky, as_int)
        await run.awaiting("go", as_text)
        return a + b

    return body  # type: ignore[return-value]


@contextlib.asynccontextmanager
async def working(
    durable: Durable, telemetry: Telemetry, body: Callable[[Run], object]
) -> AsyncIterator[None]:
    task = asyncio.create_task(
        work(
            durable,
            body,  # type: ignore[arg-type]
            tick=TICK,
            observer=telemetry,
            retry=Retry(attempts=3, initial=timedelta(milliseconds=50), jitter=0.0),
        )
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        telemetry.close()


async def until(check: Callable[[], bool]) -> None:
    """Wait for `check` to hold (the exporter tells no one: look again, less often)."""
    pause = 0.01
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.2)


async def test_a_workflow_s_life_is_one_trace_from_the_request(
    durable: Durable, tag: str, exported: Exported
) -> None:
    telemetry = Telemetry(
        durable, tracer_provider=exported.tracing, meter_provider=exported.metering
    )
    assert telemetry.enabled and telemetry.detail
    workflow = f"{tag}-order"
    request = exported.tracing.get_tracer("test")
    async with working(durable, telemetry, body_failing_once()):
        with request.start_as_current_span("POST /orders") as root:
            await arrive(
                durable, workflow, "start", {"n": 1}, tracer_provider=exported.tracing
            )
        await until(a_pass_ended(exported, "blocked"))
        await durable.arrive(workflow, "go", "now")
        await until(a_pass_ended(exported, "completed"))
    trace_id = root.get_span_context().trace_id
    [send] = exported.finished("send")
    assert send.kind is SpanKind.PRODUCER
    assert send.attributes is not None
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.parent is not None and send.parent.span_id == root.get_span_context().span_id
    assert CONTEXT in await durable.checkpointer.load(workflow)

    passes = sorted(exported.finished("pass"), key=lambda s: s.start_time or 0)
    for span in passes:
        assert span.kind is SpanKind.CONSUMER
        assert span.context is not None and span.context.trace_id == trace_id
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        attributes = span.attributes or {}
        assert attributes["durability.workflow.id"] == workflow
        assert attributes["messaging.system"] == "durability"
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["durability.store"] in (
            "memory", "redis-stream", "redis-set", "postgres", "sqlite"
        )
    attrs = [span.attributes or {} for span in passes]
    assert [a["durability.pass.ending"] for a in attrs] == ["retrying", "blocked", "completed"]
    assert [a["durability.pass.attempt"] for a in attrs] == [1, 2, 2]
    tokens = [int(str(a["durability.pass.token"])) for a in attrs]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    # Each pass is linked to the one before it.
    assert passes[0].links == () or list(passes[0].links) == []
    for before, after in itertools.pairwise(passes):
        [link] = after.links
        assert before.context is not None
        assert link.context.span_id == before.context.span_id
    # The failure is on the first pass, and on its step.
    assert passes[0].status.status_code is StatusCode.ERROR
    assert any(event.name == "exception" for event in passes[0].events)
    assert passes[1].status.status_code is not StatusCode.ERROR

    steps = exported.finished("step")
    by_pass: dict[int, list[str]] = {}
    for step in steps:
        assert step.parent is not None
        by_pass.setdefault(step.parent.span_id, []).append(step.name)
    ids = [span.context.span_id for span in passes if span.context is not None]
    # Pass 1 ran a and b (b failed); pass 2 replayed a and ran b; pass 3 ran nothing.
    assert by_pass == {ids[0]: ["step a", "step b"], ids[1]: ["step b"]}
    failed_step = next(s for s in steps if s.parent and s.parent.span_id == ids[0]
                       and s.name == "step b")
    assert failed_step.status.status_code is StatusCode.ERROR

    passed = {a["durability.pass.ending"]: p.value for a, p in exported.points("durability.passes")}
    assert passed == {"retrying": 1, "blocked": 1, "completed": 1}
    assert sum(p.count for _, p in exported.points("messaging.process.duration")) == 3
    assert sum(p.count for _, p in exported.points("durability.step.duration")) == 3
    [(_, latency)] = exported.points("durability.workflow.start_latency")
    assert latency.count == 1 and latency.sum >= 0
    assert [p.value for _, p in exported.points("durability.retries")] == [1]
    [(failure, count)] = exported.points("durability.failures")
    assert failure["error.type"] == "ValueError" and count.value == 1
    ended = exported.points("durability.workflow.endings")
    assert [(a["durability.workflow.state"], p.value) for a, p in ended] == [("completed", 1)]


async def test_a_workflow_made_ready_without_a_trace_gets_one_of_its_own(
    durable: Durable, tag: str, exported: Exported
) -> None:
    telemetry = Telemetry(
        durable, tracer_provider=exported.tracing, meter_provider=exported.metering
    )
    workflow = f"{tag}-plain"
    async with working(durable, telemetry, body_failing_once()):
        await durable.arrive(workflow, "start", 1)
        await until(a_pass_ended(exported, "blocked"))
    expected = derived(workflow).trace_id
    assert {s.context.trace_id for s in exported.finished("pass") if s.context} == {expected}
    assert derived(workflow) == derived(workflow)  # the same in every process


async def test_the_queue_gauges_report_the_sampled_backlog(
    durable: Durable, tag: str, exported: Exported
) -> None:
    telemetry = Telemetry(
        durable, tracer_provider=exported.tracing, meter_provider=exported.metering
    )
    for n in range(3):
        await durable.arrive(f"{tag}-{n}", "start", n)
    sampled = await telemetry.meters.sample(durable)
    assert sampled is not None and sampled.ready == 3
    [(_, depth)] = exported.points("durability.queue.depth")
    assert depth.value == 3
    ages = exported.points("durability.queue.oldest_ready_age")
    if type(durable.scheduler).__name__ == "MemoryScheduler":
        assert ages == []  # the memory queue cannot say
    else:
        [(_, age)] = ages
        assert 0 <= age.value < 60


def test_with_no_provider_configured_it_is_off() -> None:
    telemetry = Telemetry()
    assert not telemetry.enabled and not telemetry.detail
