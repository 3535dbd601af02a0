"""`growth`: how big each queue gets under a steady workload whose workflows wake many times.

Workflows are submitted at a steady rate; each sleeps briefly many times (`bodies.waker`), so
every wakeup goes through the queue again. The queue's own `footprint()` (stream entries and
sleepers, sorted-set members, rows; and the bytes the store says they take) is sampled while
the work runs and for a while after it ends. The stream scheduler runs with trimming (the
worker's own: `XTRIM ... ACKED` on 8.2, a safe `MINID` trim below 8.2) and without,
on Redis 7 and 8.2. Rows are the samples (seconds since the first submission); `summary` gives
the peak and final size per configuration.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from experiments.backends import Backend
from experiments.harness import Lab

NAME = "growth"
TITLE = "queue size under repeated wakeups"
#: How many backends a quick run measures at once (its figures are queue sizes, which a slower
#: machine changes little); a full run takes one at a time.
SIDE_BY_SIDE = 2
#: What a run may set beside the configurations' own parameters (`experiments.overrides`).
SETTINGS = {"rate": "submissions a second", "seconds": "how long it submits",
            "wakes": "how many times each workflow sleeps and wakes",
            "nap_ms": "how long each sleep is, in ms"}


def plan(quick: bool) -> dict[str, float]:
    if quick:
        return {"rate": 10.0, "seconds": 1.5, "wakes": 5, "nap_ms": 50, "tail": 1.0,
                "sample": 0.2, "trim_every_ms": 400}
    return {"rate": 10.0, "seconds": 25.0, "wakes": 20, "nap_ms": 200, "tail": 8.0,
            "sample": 0.5, "trim_every_ms": 5_000}


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    if backend.scheduler == "RedisStreamScheduler":
        return [{"trimming": True}, {"trimming": False}]
    return [{"trimming": None}]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    p = {**plan(lab.quick), **{k: params[k] for k in SETTINGS if params.get(k) is not None}}
    trimming = params["trimming"]
    # The stream's worker trims by default: `off` is what leaves it untrimmed.
    options = ("" if trimming is None else
               f"trim_every_ms={p['trim_every_ms']:g}" if trimming else "trim_every_ms=off")
    count = round(p["rate"] * p["seconds"])
    async with (
        lab.place(backend) as (place, _),
        lab.agent(backend, place, housekeeping=bool(trimming), options=options) as worker,
        _client(lab, backend, place, worker if backend.in_process else None) as client,
    ):
        prefix = f"gr{uuid.uuid4().hex[:6]}"
        await worker.request("work", body="waker", pool=64)
        began = asyncio.get_running_loop().time()
        samples: list[dict[str, Any]] = []
        submitting = asyncio.create_task(client.request(
            "submit", prefix=prefix, rate=p["rate"], count=count, seed=7,
            value={"wakes": p["wakes"], "nap_ms": p["nap_ms"]}, timeout=900))
        end = p["seconds"] + p["wakes"] * p["nap_ms"] / 1000 + p["tail"]
        while (now := asyncio.get_running_loop().time() - began) < end:
            found = await client.request("footprint")
            samples.append({"t": now, **found})
            await asyncio.sleep(p["sample"])
        await submitting
        done = await worker.request("mark")
        await worker.request("stop")
    rows: list[dict[str, Any]] = []
    for sample in samples:
        entries = sum(sample["parts"].values())
        rows.append({"t_s": sample["t"], "metric": "entries", "value": entries, "unit": "count"})
        if sample.get("bytes") is not None:
            rows.append({"t_s": sample["t"], "metric": "bytes", "value": sample["bytes"],
                         "unit": "B"})
        for part, value in sample["parts"].items():
            rows.append({"t_s": sample["t"], "metric": "part", "part": part, "value": value,
                         "unit": "count"})
    rows.append({"metric": "workflows", "value": count, "unit": "count"})
    rows.append({"metric": "wakeups", "value": count * p["wakes"], "unit": "count"})
    rows.append({"metric": "completed", "value": done["kinds"].get("outcome", 0),
                 "unit": "passes"})
    return rows


def _client(lab: Lab, backend: Backend, place: Any, given: Any) -> Any:
    """The worker itself for an in-process store, else an agent of its own (an API)."""
    if given is not None:
        class Same:
            async def __aenter__(self) -> Any:
                return given

            async def __aexit__(self, *_: object) -> None:
                return None

        return Same()
    return lab.agent(backend, place, role="client", housekeeping=False)


def _label(backend: str, trimming: Any) -> str:
    if trimming is True or trimming == "True":
        return f"{backend}, trimmed"
    if trimming is False or trimming == "False":
        return f"{backend}, untrimmed"
    return backend


def summary(frame: Any) -> Any:
    import pandas

    samples = frame[frame["metric"].isin(["entries", "bytes"])]
    out = []
    for (backend, trimming), group in samples.groupby(["backend", "trimming"], dropna=False,
                                                      sort=False):
        entries = group[group["metric"] == "entries"].sort_values("t_s")["value"]
        size = group[group["metric"] == "bytes"].sort_values("t_s")["value"]
        out.append({
            "backend": backend,
            "trimming": "" if pandas.isna(trimming) else trimming,
            "peak_entries": entries.max(),
            "final_entries": entries.iloc[-1] if len(entries) else float("nan"),
            "peak_kib": size.max() / 1024 if len(size) else float("nan"),
            "final_kib": size.iloc[-1] / 1024 if len(size) else float("nan"),
        })
    totals = frame[frame["metric"] == "wakeups"].groupby("backend")["value"].first()
    table = pandas.DataFrame(out)
    table["wakeups"] = [totals.get(b, float("nan")) for b in table["backend"]]
    return table


def draw(frame: Any) -> Any:
    from experiments.figures import colour, figure, label

    fig, axes = figure(columns=2, width=6.5, height=4.5)
    for ax, metric, unit, scale in ((axes[0][0], "entries", "entries", 1.0),
                                    (axes[0][1], "bytes", "KiB", 1 / 1024)):
        rows = frame[frame["metric"] == metric]
        for (backend, trimming), group in rows.groupby(["backend", "trimming"], dropna=False,
                                                       sort=False):
            group = group.sort_values("t_s")
            untrimmed = trimming is False or trimming == "False"
            ax.plot(group["t_s"], group["value"] * scale, label=_label(str(backend), trimming),
                    color=colour(str(backend)), linestyle=":" if untrimmed else "-")
        label(ax, f"Queue {metric} while workflows wake repeatedly",
              "seconds since the first submission", unit)
        ax.legend(loc="upper left", ncol=2)
    return fig
