"""`Telemetry` fed a worker's events by hand, for the orders a single store run seldom shows: a
wakeup that meets the pass running here (no ending), a pass that finds its workflow failed
before (no new workflow failure), and a worker stopped mid-pass (`close`)."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durability import Completed
from durability.otel import Telemetry
from durability.worker.events import Event, Kind


def telemetry() -> tuple[Telemetry, InMemorySpanExporter, InMemoryMetricReader]:
    spans = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    return Telemetry(tracer_provider=tracing, meter_provider=MeterProvider(
        metric_readers=[reader])), spans, reader


def tell(observer: Telemetry, kind: Kind, at: float, **fields: object) -> None:
    observer(Event(kind, "w", at, **fields))  # type: ignore[arg-type]


def endings(reader: InMemoryMetricReader) -> dict[str, int]:
    data = reader.get_metrics_data()
    found: dict[str, int] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "durability.workflow.endings":
                    for point in metric.data.data_points:
                        state = str((point.attributes or {})["durability.workflow.state"])
                        found[state] = int(point.value)
    return found


def test_a_wakeup_that_meets_the_pass_running_here_does_not_end_it() -> None:
    observer, spans, reader = telemetry()
    tell(observer, "delivered", 1.0)
    tell(observer, "started", 1.1)
    tell(observer, "loaded", 1.2, token=7, records={"start": 1})
    tell(observer, "delivered", 1.3)  # a second wakeup, taken while the pass runs
    tell(observer, "contended", 1.4)  # ... finds the claim held
    tell(observer, "step", 1.5, key="a", began=1.45)
    tell(observer, "outcome", 1.6, outcome=Completed(3))
    passes = [s for s in spans.get_finished_spans() if s.name.startswith("pass")]
    [one] = passes
    assert (one.attributes or {})["durability.pass.ending"] == "completed"
    assert one.start_time == 1_100_000_000 and one.end_time == 1_600_000_000
    [step] = [s for s in spans.get_finished_spans() if s.name == "step a"]
    assert step.parent is not None and one.context is not None
    assert step.parent.span_id == one.context.span_id
    assert endings(reader) == {"completed": 1}


def test_a_body_meeting_another_workflow_held_ends_its_pass_contended() -> None:
    observer, spans, _ = telemetry()
    tell(observer, "delivered", 1.0)
    tell(observer, "started", 1.1)
    tell(observer, "loaded", 1.2, token=7, records={})
    tell(observer, "contended", 1.3)
    [one] = spans.get_finished_spans()
    assert (one.attributes or {})["durability.pass.ending"] == "contended"


def test_a_pass_finding_its_workflow_failed_before_fails_nothing_new() -> None:
    observer, spans, reader = telemetry()
    tell(observer, "delivered", 1.0)
    tell(observer, "started", 1.1)
    tell(observer, "loaded", 1.2, token=7, records={})
    tell(observer, "dead", 1.3, attempt=1)
    [one] = spans.get_finished_spans()
    assert (one.attributes or {})["durability.pass.ending"] == "dead"
    assert endings(reader) == {}
    tell(observer, "delivered", 2.0)
    tell(observer, "started", 2.1)
    tell(observer, "loaded", 2.2, token=8, records={})
    tell(observer, "failed", 2.3, error=ValueError("no"), attempt=1)
    tell(observer, "dead", 2.4, attempt=1)
    assert endings(reader) == {"failed": 1}
    second = spans.get_finished_spans()[-1]
    [link] = second.links  # to the pass before, which this process ran
    assert one.context is not None and link.context.span_id == one.context.span_id


def test_close_ends_a_pass_the_worker_left_mid_way() -> None:
    observer, spans, _ = telemetry()
    tell(observer, "delivered", 1.0)
    tell(observer, "started", 1.1)
    assert spans.get_finished_spans() == ()
    observer.close()
    [one] = spans.get_finished_spans()
    assert (one.attributes or {})["durability.pass.ending"] == "abandoned"
