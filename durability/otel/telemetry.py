"""`Telemetry`: a `work()` observer that turns a worker's events into OpenTelemetry spans and
metrics. A span per pass (a consumer span, child of the workflow's origin: `carrier`), a child
span per step that ran, the failure recorded on both; counters and histograms per ending.

It keeps nothing across processes: what it needs of a pass's past (the origin, the attempt) it
reads from the checkpoint the pass loaded. With neither a tracer nor a meter provider
configured when it is made it is off (`enabled` False), and a worker never calls it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import assert_never

from opentelemetry import metrics, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from durability.failures import since_retry
from durability.interfaces import Durable
from durability.otel.carrier import origin, submitted
from durability.otel.meters import Meters
from durability.otel.naming import Names
from durability.stepwise import Blocked, Completed, Sleeping
from durability.worker import Event

__all__ = ["ENDINGS", "Telemetry"]

#: Each event that ends a pass, and the ending it names ("outcome" names its own).
ENDINGS = {
    "retrying": "retrying",
    "dead": "dead",
    "expired": "expired",
    "fenced": "fenced",
    "unavailable": "unavailable",
    "contended": "contended",
    "cancelled": "cancelled",
}
#: How many workflows' last pass spans a process keeps, to link the next pass to.
REMEMBERED = 10_000


@dataclass(slots=True)
class _Open:
    """A pass under way: when it started, its span once its checkpoint is loaded."""

    started: int  # ns
    span: trace.Span | None = None
    attempt: int = 1
    raised: bool = False  # the body failed in this pass ("failed" came)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _configured(tracer: object, meter: object) -> bool:
    """Whether either provider records anything: not the API's no-op, nor its proxy before an
    SDK is set (the proxy's class is private, so it is told by name)."""
    idle_tracer = isinstance(tracer, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    idle_meter = isinstance(meter, metrics.NoOpMeterProvider) or type(meter).__name__.startswith(
        "_Proxy"
    )
    return not (idle_tracer and idle_meter)


class Telemetry:
    """Pass it as `work(..., observer=Telemetry(durable))`.

    `tracer_provider` and `meter_provider` default to the global ones. A pass that never
    reports its end (the worker was cancelled mid-pass) is ended by `close`, or when the same
    workflow's next pass starts in this process.
    """

    def __init__(
        self,
        durable: Durable | None = None,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        tracing = tracer_provider or trace.get_tracer_provider()
        metering = meter_provider or metrics.get_meter_provider()
        #: Whether any event is turned into anything: False with no provider configured.
        self.enabled = _configured(tracing, metering)
        #: Asks the worker for the per-step events (only when it will use them).
        self.detail = self.enabled
        self.names = Names.of(durable)
        self.tracer = trace.get_tracer("durability", tracer_provider=tracing)
        self.meters = Meters(metrics.get_meter("durability", meter_provider=metering), self.names)
        self.open: dict[str, _Open] = {}
        self.inflight: dict[str, int] = {}  # deliveries of each workflow under way here
        self.last: OrderedDict[str, trace.SpanContext] = OrderedDict()

    def __call__(self, event: Event) -> None:
        if not self.enabled:
            return
        kind = event.kind
        workflow = event.workflow
        match kind:
            case "delivered":
                self.inflight[workflow] = self.inflight.get(workflow, 0) + 1
            case "started":
                stale = self.open.pop(workflow, None)
                if stale is not None:
                    self._end(workflow, stale, "abandoned", event.at)
                self.open[workflow] = _Open(_ns(event.at))
            case "loaded":
                self._loaded(event)
            case "step":
                self._step(event)
            case "failed":
                self._failed(event)
            case "outcome":
                self._ended(event, _outcome(event))
            case "contended":
                if self.inflight.get(workflow, 0) > 1 or workflow not in self.open:
                    self._delivered(workflow)  # a wakeup met the pass running here: no end
                else:
                    self._ended(event, "contended")  # the body met another workflow held
            case "retrying" | "dead" | "expired" | "fenced" | "unavailable" | "cancelled":
                self._ended(event, ENDINGS[kind])
            case _:
                assert_never(kind)

    async def watch(self, durable: Durable, every: timedelta = timedelta(seconds=15)) -> None:
        """Sample `durable`'s queue (depth, oldest wait) every `every` for the gauges, until
        cancelled: run it beside `work`. Where the store cannot say the oldest wait (memory),
        only the depth is reported."""
        if self.enabled:
            await self.meters.watch(durable, every)

    def close(self) -> None:
        """End every pass span still open (a worker stopped mid-pass): ending "abandoned"."""
        for workflow, open_ in list(self.open.items()):
            self._end(workflow, open_, "abandoned", None)
        self.open.clear()
        self.inflight.clear()

    # -- a pass --------------------------------------------------------------------------

    def _loaded(self, event: Event) -> None:
        open_ = self.open.get(event.workflow)
        if open_ is None or event.records is None:
            return
        records = event.records
        open_.attempt = 1 + len(since_retry(records))
        open_.span = self._span(event.workflow, open_, records, event.token)
        arrived = submitted(records)
        if arrived is not None:
            self.meters.start_latency.record(
                max(event.at - arrived, 0.0), self.meters.common
            )

    def _span(
        self,
        workflow: str,
        open_: _Open,
        records: Mapping[str, object],
        token: int | None,
    ) -> trace.Span:
        parent = origin(workflow, records)
        previous = self.last.get(workflow)
        links = [] if previous is None else [Link(previous, {"durability.link": "previous pass"})]
        attributes: dict[str, str | int] = {
            **self.names.messaging("process"),
            "durability.workflow.id": workflow,
            "durability.pass.attempt": open_.attempt,
        }
        if token is not None:
            attributes["durability.pass.token"] = token
        return self.tracer.start_span(
            f"pass {self.names.destination}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=open_.started,
        )

    def _step(self, event: Event) -> None:
        open_ = self.open.get(event.workflow)
        if open_ is None or open_.span is None or event.key is None:
            return
        began = event.began if event.began is not None else event.at
        step = self.tracer.start_span(
            f"step {event.key}",
            context=trace.set_span_in_context(open_.span),
            attributes={"durability.step.key": event.key, "durability.workflow.id": event.workflow},
            start_time=_ns(began),
        )
        error = event.error
        if error is not None:
            step.record_exception(error, timestamp=_ns(event.at))
            step.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        step.end(end_time=_ns(event.at))
        self.meters.step(event.at - began, error)

    def _failed(self, event: Event) -> None:
        self.meters.failed(event.error)
        open_ = self.open.get(event.workflow)
        if open_ is not None:
            open_.raised = True
        if open_ is None or open_.span is None or event.error is None:
            return
        open_.span.record_exception(event.error, timestamp=_ns(event.at))
        open_.span.set_status(
            Status(StatusCode.ERROR, f"{type(event.error).__name__}: {event.error}")
        )

    def _ended(self, event: Event, ending: str) -> None:
        workflow = event.workflow
        self._delivered(workflow)
        open_ = self.open.pop(workflow, None)
        if open_ is None:
            return  # an ending told twice (a finish that failed after the pass ended)
        self._end(workflow, open_, ending, event.at)
        if ending == "retrying":
            self.meters.retries.add(1, self.meters.common)
        # A pass that finds its workflow failed before ("dead" alone) ends nothing new.
        if ending == "completed" or (ending == "dead" and open_.raised):
            state = "completed" if ending == "completed" else "failed"
            self.meters.endings.add(1, {**self.meters.common, "durability.workflow.state": state})

    def _end(self, workflow: str, open_: _Open, ending: str, at: float | None) -> None:
        span = open_.span
        if span is None:  # ended before its checkpoint was loaded (a store fault, say)
            span = self._span(workflow, open_, {}, None)
        span.set_attribute("durability.pass.ending", ending)
        end = None if at is None else _ns(at)
        span.end(end_time=end)
        self.last[workflow] = span.get_span_context()
        self.last.move_to_end(workflow)
        if len(self.last) > REMEMBERED:
            self.last.popitem(last=False)
        if at is not None:
            self.meters.passed(ending, (end or open_.started) - open_.started)

    def _delivered(self, workflow: str) -> None:
        left = self.inflight.get(workflow, 0) - 1
        if left > 0:
            self.inflight[workflow] = left
        else:
            self.inflight.pop(workflow, None)


def _outcome(event: Event) -> str:
    match event.outcome:
        case Completed():
            return "completed"
        case Sleeping():
            return "sleeping"
        case Blocked():
            return "blocked"
        case None:
            return "unknown"
        case _:
            assert_never(event.outcome)
