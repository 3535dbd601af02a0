"""One workflow's life as OpenTelemetry records it, drawn as a collector's waterfall would be.

An order is submitted inside a request's span (`durability.otel.arrive`); its first pass fails
in a step and is retried after a backoff; the second waits for an approval, which a second
request supplies; the third completes. The spans are exported in memory, written as OTLP/JSON
and drawn with matplotlib:

    .venv/bin/python examples/trace_waterfall.py docs/operating
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from durability import (
    MemoryCheckpointer,
    MemoryScheduler,
    Retry,
    Run,
    SplitDurable,
    as_int,
    as_text,
    work,
)
from durability.otel import Telemetry, arrive

WORKFLOW = "order-1042"


async def life() -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider(resource=Resource.create({"service.name": "orders"}))
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    durable = SplitDurable(MemoryCheckpointer(), MemoryScheduler(lease=timedelta(seconds=2)))
    telemetry = Telemetry(durable, tracer_provider=tracing)
    declined = {"left": 1}

    async def charge() -> str:
        await asyncio.sleep(0.03)
        if declined["left"]:
            declined["left"] -= 1
            raise ConnectionError("the payment gateway timed out")
        return "ch_7781"

    async def reserve() -> int:
        await asyncio.sleep(0.02)
        return 3

    async def ship() -> str:
        await asyncio.sleep(0.025)
        return "parcel-55"

    async def body(run: Run) -> str:
        await run.step("reserve", reserve, as_int)
        await run.step("charge", charge, as_text)
        await run.awaiting("approval", as_text)
        return await run.step("ship", ship, as_text)

    def passes() -> int:
        return sum(1 for s in exporter.get_finished_spans() if s.name.startswith("pass"))

    async def until(count: int) -> None:
        pause = 0.005
        while passes() < count:  # the exporter tells no one: look again, less often
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)

    request = tracing.get_tracer("orders.api")
    task = asyncio.create_task(
        work(durable, body, observer=telemetry, tick=timedelta(milliseconds=100),
             retry=Retry(attempts=3, initial=timedelta(milliseconds=150), jitter=0.0))
    )
    try:
        with request.start_as_current_span("POST /orders"):
            await arrive(durable, WORKFLOW, "order", {"amount": "120.00 EUR"},
                         tracer_provider=tracing)
        await until(2)
        await asyncio.sleep(0.1)
        with request.start_as_current_span("POST /orders/{id}/approval"):
            await durable.arrive(WORKFLOW, "approval", "dana")
        await until(3)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return list(exporter.get_finished_spans())


ROOT = Path(__file__).resolve().parent.parent


def _value(value: object) -> dict[str, Any]:
    if isinstance(value, str):
        # A recorded stack trace names this checkout's files: shown relative to it.
        value = value.replace(str(ROOT) + "/", "").replace(sys.prefix, "<python>")
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def otlp(spans: list[ReadableSpan]) -> dict[str, Any]:
    """The spans as OTLP/JSON (one resource, one scope per instrumentation scope)."""

    def one(span: ReadableSpan) -> dict[str, Any]:
        assert span.context is not None
        body: dict[str, Any] = {
            "traceId": f"{span.context.trace_id:032x}",
            "spanId": f"{span.context.span_id:016x}",
            "name": span.name,
            "kind": span.kind.value + 1,  # OTLP numbers kinds from 1 (INTERNAL)
            "startTimeUnixNano": str(span.start_time),
            "endTimeUnixNano": str(span.end_time),
            "attributes": [{"key": k, "value": _value(v)}
                           for k, v in (span.attributes or {}).items()],
            "events": [{"name": e.name, "timeUnixNano": str(e.timestamp),
                        "attributes": [{"key": k, "value": _value(v)}
                                       for k, v in (e.attributes or {}).items()]}
                       for e in span.events],
            "links": [{"traceId": f"{link.context.trace_id:032x}",
                       "spanId": f"{link.context.span_id:016x}",
                       "attributes": [{"key": k, "value": _value(v)}
                                      for k, v in (link.attributes or {}).items()]}
                      for link in span.links],
            "status": {"code": {StatusCode.UNSET: 0, StatusCode.OK: 1,
                                StatusCode.ERROR: 2}[span.status.status_code],
                       **({"message": span.status.description}
                          if span.status.description else {})},
        }
        if span.parent is not None:
            body["parentSpanId"] = f"{span.parent.span_id:016x}"
        return body

    scopes: dict[str, list[dict[str, Any]]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        name = span.instrumentation_scope.name if span.instrumentation_scope else ""
        scopes.setdefault(name, []).append(one(span))
    resource = spans[0].resource.attributes if spans else {}
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": k, "value": _value(v)}
                                    for k, v in resource.items()]},
        "scopeSpans": [{"scope": {"name": name}, "spans": listed}
                       for name, listed in scopes.items()],
    }]}


def _label(span: ReadableSpan) -> str:
    attributes = span.attributes or {}
    if span.name.startswith("pass"):
        return (f"pass (attempt {attributes.get('durability.pass.attempt')}) →"
                f" {attributes.get('durability.pass.ending')}")
    return span.name


def draw(spans: list[ReadableSpan], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in by_id else None, []).append(span)
    ordered: list[tuple[int, ReadableSpan]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            ordered.append((depth, span))
            assert span.context is not None
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    start = min(s.start_time or 0 for s in spans)
    figure, axes = plt.subplots(figsize=(11, 0.42 * len(ordered) + 1.2))
    for row, (_depth, span) in enumerate(ordered):
        left = ((span.start_time or 0) - start) / 1e6
        width = max(((span.end_time or 0) - (span.start_time or 0)) / 1e6, 0.8)
        if span.status.status_code is StatusCode.ERROR:
            colour = "#d64545"
        elif span.name.startswith("pass"):
            colour = "#3b6fd8"
        elif span.name.startswith("step"):
            colour = "#2f9e6a"
        else:
            colour = "#8a8f98"
        axes.barh(row, width, left=left, color=colour, height=0.6)
        axes.text(left + width + 3, row, _label(span), va="center", fontsize=9)
        for link in span.links:
            source = next((r for r, (_, s) in enumerate(ordered) if s.context is not None
                           and s.context.span_id == link.context.span_id), None)
            if source is not None:
                axes.annotate("", xy=(left, row), xytext=(left, source),
                              arrowprops={"arrowstyle": "->", "color": "#b0b6c0",
                                          "linestyle": "dashed"})
    axes.set_yticks([])
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    axes.legend(
        handles=[
            Patch(color="#8a8f98", label="the request and its arrive"),
            Patch(color="#3b6fd8", label="a pass"),
            Patch(color="#2f9e6a", label="a step that ran"),
            Patch(color="#d64545", label="failed (the exception is on the span)"),
            Line2D([], [], color="#b0b6c0", linestyle="dashed",
                   label="link to the previous pass"),
        ],
        loc="upper right",
        fontsize=8,
        frameon=False,
    )
    axes.invert_yaxis()
    axes.set_xlabel("milliseconds since the request began")
    root = ordered[0][1]
    assert root.context is not None
    axes.set_title(f"trace {root.context.trace_id:032x}: one workflow, {WORKFLOW}", fontsize=10)
    axes.spines[["top", "right"]].set_visible(False)
    right = max(((s.end_time or 0) - start) / 1e6 for s in spans)
    axes.set_xlim(0, right * 1.35)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    logging.getLogger("durability").setLevel(logging.CRITICAL)  # the failure is on purpose
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    folder.mkdir(parents=True, exist_ok=True)
    every = asyncio.run(life())
    # The workflow's trace: the first request's. (The approval's request is a trace of its
    # own; the pass it wakes stays in the workflow's.)
    first = next(s for s in every if s.name == "POST /orders")
    assert first.context is not None
    spans = [s for s in every if s.context is not None
             and s.context.trace_id == first.context.trace_id]
    (folder / "trace.otlp.json").write_text(json.dumps(otlp(spans), indent=1) + "\n")
    draw(spans, folder / "trace.png")


if __name__ == "__main__":
    main()
