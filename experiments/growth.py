"""`growth`: how big each queue gets under a steady workload whose workflows wake many times.

Workflows are submitted at a steady rate; each sleeps briefly many times (`bodies.waker`), so
every wakeup goes through the queue again. The queue's own `footprint()` (stream entries and
sleepers, sorted-set members, rows; and the bytes the store says they take) is sampled while
the work runs and for a while after it ends. The stream scheduler runs with trimming (the
worker's housekeeping: `XTRIM ... ACKED` on 8.2, a safe `MINID` trim below 8.2) and without,
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
    options = f"trim_every_ms={p['trim_every_ms']:g}" if trimming else ""
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


#: The two panels of a row: (metric, unit, scale, where the log scale starts).
METRICS = (("entries", "entries", 1.0, 10.0), ("bytes", "KiB", 1 / 1024, 1.0))


def draw(frame: Any) -> Any:
    """The queue's entries and bytes over time, a line a backend (untrimmed dotted, hollow), on
    a scale linear near zero and logarithmic above, so that a queue holding tens and one holding
    thousands both show; a row of panels per family where there are too many lines."""
    from experiments.figures import figure, label, look, nothing, panels

    samples = frame[frame["metric"].isin([m for m, *_ in METRICS])]
    series = list(samples.groupby(["backend", "trimming"], dropna=False, sort=False).groups)
    groups = panels([b for b, _ in series], series=len(series)) or [("", [])]
    fig, axes = figure(columns=2, rows=len(groups), width=6.0,
                       height=4.2 if len(groups) == 1 else 3.4 if len(groups) <= 3 else 2.8)
    for row, (title, chosen) in zip(axes, groups, strict=True):
        for ax, (metric, unit, scale, linear) in zip(row, METRICS, strict=True):
            rows = samples[(samples["metric"] == metric) & samples["backend"].isin(chosen)]
            keys = rows.groupby(["backend", "trimming"], dropna=False, sort=False)
            for number, ((backend, trimming), group) in enumerate(keys):
                group = group.sort_values("t_s")
                seen = look(str(backend)).line()
                if trimming is False or trimming == "False":  # the stream left to grow
                    seen.update(linestyle=":", markerfacecolor="white")
                seen["label"] = _label(str(backend), trimming)
                # markers spaced alike but started apart, so lines lying on each other (the
                # small queues near zero) each show theirs; a short run's on every sample
                ax.plot(group["t_s"], group["value"] * scale, markersize=4, linewidth=1.3,
                        markevery=(number * 2 % 16, 16) if len(group) > 32 else None, **seen)
            heading = f"Queue {metric} while workflows wake repeatedly"
            ax.set_title(f"{title}: queue {metric}" if title else heading)
            if rows.empty:
                nothing(ax, f"no {metric} sampled for these backends")
                continue
            ax.set_ylim(bottom=0)
            if samples[samples["metric"] == metric]["value"].max() * scale > 50 * linear:
                ax.set_yscale("symlog", linthresh=linear)
                unit = f"{unit} (log scale above {linear:g})"
            label(ax, ax.get_title(), "seconds since the first submission", unit)
        handles, names = row[0].get_legend_handles_labels()
        for extra, name in zip(*row[1].get_legend_handles_labels(), strict=True):
            if name not in names:
                handles.append(extra)
                names.append(name)
        # beside the row, not on it: the small queues lie along the bottom, the stream's
        # growth across the middle
        row[1].legend(handles, names, loc="center left", bbox_to_anchor=(1.02, 0.5))
    for column in range(len(METRICS)):  # one scale down a column, so rows compare
        top = max(ax.get_ylim()[1] for ax in axes[:, column])
        for ax in axes[:, column]:
            ax.set_ylim(0, top)
    return fig
