"""What OpenTelemetry costs a worker: passes per second at saturation, one worker process, on
every store, in three modes interleaved in one sitting: `none` (no observer, no OpenTelemetry
module imported, as if the extra were absent), `off` (`Telemetry` as the observer, no SDK
configured) and `on` (the SDK: batch span processor into an in-memory exporter, an in-memory
metric reader). Each run is a fresh process that arrives `--workflows` workflows of two steps
(not timed), then times `work` until every one has completed.

    python -m benchmarks.otel_overhead --rounds 5 --out results/ab/otel-overhead

writes `runs.csv` (a row a run) and `made.json` (how), and prints the ratios to `none`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STORES = ("memory", "sqlite", "postgres", "redis-stream", "redis-set")
MODES = ("none", "off", "on")
REDIS = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _url(store: str, name: str, folder: str) -> str:
    if store == "memory":
        return "memory://"
    if store == "sqlite":
        return f"sqlite:///{folder}/ab.db"
    if store == "postgres":
        return f"{POSTGRES}?queue={name}"
    return f"{REDIS}?scheduler={store.removeprefix('redis-')}&namespace={name}"


async def _one(store: str, mode: str, workflows: int) -> dict[str, Any]:
    from durability import Run, as_int, work
    from durability.connect import open_durable

    observer: Any = None
    if mode != "none":
        from durability.otel import Telemetry

        if mode == "on":
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )

            tracing = TracerProvider()
            tracing.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
            metering = MeterProvider(metric_readers=[InMemoryMetricReader()])
            observer = Telemetry(tracer_provider=tracing, meter_provider=metering)
        else:
            observer = Telemetry()
        assert observer.enabled == (mode == "on")
    else:
        assert not any(name.startswith("opentelemetry") for name in sys.modules)
    done = 0
    finished = asyncio.Event()

    async def body(run: Run) -> int:
        nonlocal done
        a = await run.step("a", lambda: 1, as_int)
        b = await run.step("b", lambda: 2, as_int)
        done += 1
        if done == workflows:
            finished.set()
        return a + b

    name = f"ab{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory() as folder:
        async with open_durable(_url(store, name, folder)) as durable:
            for n in range(workflows):
                await durable.arrive(f"{name}-{n}", "start", n)
            began = time.perf_counter()
            worker = asyncio.create_task(work(durable, body, observer=observer))
            await asyncio.wait_for(finished.wait(), timeout=600)
            seconds = time.perf_counter() - began
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
    if store.startswith("redis"):
        import redis

        client = redis.Redis.from_url(REDIS)
        keys = list(client.scan_iter(match=f"*{name}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    return {"store": store, "mode": mode, "passes": workflows, "seconds": round(seconds, 4),
            "passes_per_second": round(workflows / seconds, 1)}


def _revision() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--stores", nargs="*", default=list(STORES))
    parser.add_argument("--out", type=Path, default=Path("results/ab/otel-overhead"))
    parser.add_argument("--one", nargs=2, metavar=("STORE", "MODE"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one:
        store, mode = arguments.one
        print(json.dumps(asyncio.run(_one(store, mode, arguments.workflows))))
        return
    rows: list[dict[str, Any]] = []
    began = datetime.now(UTC)
    for round_ in range(1, arguments.rounds + 1):
        for store in arguments.stores:
            modes = list(MODES)
            random.shuffle(modes)  # no mode always first (a warm cache, a quiet machine)
            for mode in modes:
                ran = subprocess.run(
                    [sys.executable, "-m", "benchmarks.otel_overhead", "--one", store, mode,
                     "--workflows", str(arguments.workflows)],
                    capture_output=True, text=True, check=True,
                )
                row = {"round": round_, **json.loads(ran.stdout.strip().splitlines()[-1])}
                rows.append(row)
                print(row, flush=True)
    arguments.out.mkdir(parents=True, exist_ok=True)
    with (arguments.out / "runs.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    made = {
        "command": "python -m benchmarks.otel_overhead "
        f"--rounds {arguments.rounds} --workflows {arguments.workflows}",
        "revision": _revision(),
        "started": began.isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "workload": "one worker process (pool 16), workflows of two steps each, all arrived"
        " before the worker starts; timed from its start to the last completion",
        "modes": {
            "none": "no observer, no OpenTelemetry module imported",
            "off": "Telemetry observer, no SDK configured (enabled False)",
            "on": "Telemetry observer, SDK: BatchSpanProcessor(InMemorySpanExporter),"
            " MeterProvider(InMemoryMetricReader)",
        },
        "interleaving": "rounds of every store; within a store the three modes in a shuffled"
        " order; each run a fresh process",
    }
    (arguments.out / "made.json").write_text(json.dumps(made, indent=2) + "\n")
    print(summary(rows))


def summary(rows: list[dict[str, Any]]) -> str:
    """Per store: the median passes/s of each mode and the ratio of off and on to none, with
    the range of the per-round ratios."""
    lines = ["store          none p/s   off/none (range)      on/none (range)"]
    stores = dict.fromkeys(row["store"] for row in rows)
    for store in stores:
        by: dict[tuple[int, str], float] = {
            (row["round"], row["mode"]): float(row["passes_per_second"])
            for row in rows
            if row["store"] == store
        }
        rounds = sorted({r for r, _ in by})
        base = statistics.median(by[r, "none"] for r in rounds)
        cells = [f"{store:<14} {base:>8.0f}"]
        for mode in ("off", "on"):
            ratios = [by[r, mode] / by[r, "none"] for r in rounds]
            cells.append(
                f"{statistics.median(ratios):>6.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
            )
        lines.append("   ".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
