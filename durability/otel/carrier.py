"""How a trace travels with a workflow: `arrive` writes the caller's trace context as one
record (`CONTEXT`) before the workflow is made ready, and each pass reads it back from the
checkpoint it loaded (`origin`), so a request's trace continues into the worker.

One record per workflow, written by the first traced `arrive` (records are first-writer-wins):
every pass of the workflow is a child of that request. A workflow made ready without it has a
trace of its own, its id derived from the workflow id, so its passes still share one trace.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping

from opentelemetry import context, propagate, trace
from opentelemetry.trace import SpanKind

from durability import wakeups
from durability.checks import check_limit, check_priority
from durability.interfaces import Durable, Recorded
from durability.otel.naming import Names
from durability.values import Limit

__all__ = ["CONTEXT", "arrive", "derived", "origin", "submitted"]

#: The record that carries a workflow's trace context: {"traceparent": ..., "tracestate": ...,
#: "key": the key the traced `arrive` supplied, "at": its time, epoch seconds}.
CONTEXT = "otel:context"


async def arrive(
    durable: Durable,
    workflow: str,
    key: str,
    value: object,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    priority: int = 0,
    limit: Limit | None = None,
) -> Recorded:
    """`durable.arrive(workflow, key, value, priority=, limit=)` in a producer span, having first
    recorded the span's context as `CONTEXT` (so the passes it starts continue its trace). Two
    writes: a caller cut off between them just sends the same arrive again."""
    check_priority(priority)  # before the context's write, as the arrive would refuse them
    check_limit(limit)
    names = Names.of(durable)
    tracer = trace.get_tracer("durability", tracer_provider=tracer_provider)
    with tracer.start_as_current_span(
        f"send {names.destination}",
        kind=SpanKind.PRODUCER,
        attributes={
            **names.messaging("send"),
            "durability.workflow.id": workflow,
            "durability.key": key,
        },
    ):
        carrier: dict[str, object] = {}
        propagate.inject(carrier)
        if carrier:
            carrier |= {"key": key, "at": time.time()}
            await durable.checkpointer.supply(workflow, CONTEXT, carrier)
        return await wakeups.arrive(durable, workflow, key, value, priority, limit)


def origin(workflow: str, records: Mapping[str, object]) -> context.Context:
    """The context a pass of `workflow` is a child of: the one its records carry, else the
    workflow's own (`derived`)."""
    carried = records.get(CONTEXT)
    if isinstance(carried, Mapping):
        extracted = propagate.extract({str(k): str(v) for k, v in carried.items()})
        if trace.get_current_span(extracted).get_span_context().is_valid:
            return extracted
    return trace.set_span_in_context(trace.NonRecordingSpan(derived(workflow)))


def derived(workflow: str) -> trace.SpanContext:
    """A remote span context made from the workflow id alone: the same in every process, so the
    passes of a workflow no traced `arrive` started still share a trace."""
    digest = hashlib.sha256(workflow.encode("utf-8", "surrogatepass")).digest()
    return trace.SpanContext(
        trace_id=int.from_bytes(digest[:16], "big") or 1,
        span_id=int.from_bytes(digest[16:24], "big") or 1,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )


def submitted(records: Mapping[str, object]) -> float | None:
    """When the traced `arrive` came, if these are the records of the workflow's first pass:
    nothing but that arrive's context and its key (a later pass holds more)."""
    carried = records.get(CONTEXT)
    if len(records) != 2 or not isinstance(carried, Mapping):
        return None
    key, at = carried.get("key"), carried.get("at")
    if key not in records or not isinstance(at, int | float):
        return None
    return float(at)
