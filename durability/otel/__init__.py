"""OpenTelemetry for durable workflows, built on `work()`'s observer (install
`durability[otel]` for the API; configure an SDK as for any instrumented library).

| name | what |
|---|---|
| `Telemetry` | the observer: a span per pass, one per step that ran, metrics per ending |
| `arrive` | `durable.arrive` in a producer span whose context the passes continue |
| `CONTEXT` | the record that carries it (`carrier`) |
"""

from __future__ import annotations

try:
    import opentelemetry.trace  # noqa: F401
except ImportError as missing:  # pragma: no cover - the extra not installed
    raise ImportError(
        "durability.otel needs the OpenTelemetry API: pip install 'durability[otel]'"
    ) from missing

from durability.otel.carrier import CONTEXT, arrive
from durability.otel.telemetry import Telemetry

__all__ = ["CONTEXT", "Telemetry", "arrive"]
