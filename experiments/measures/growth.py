"""`growth`: how big each queue gets under a steady workload whose workflows wake many times.

Workflows are submitted at a steady rate; each sleeps briefly many times (`bodies.waker`), so
every wakeup goes through the queue again. The queue's own `footprint()` (its entries, and the
bytes the store says they take) is sampled while the work runs and for a while after it ends;
the stream scheduler runs with its worker's trimming and without. Rows are the samples;
`summary` gives the peak and final size per configuration. A rival, which has no durable
sleep, is given as many one-step jobs as our workflows wake, at its defaults and with its own
cleanup setting (`CLEANUP`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from experiments.harness.backends import Backend
from experiments.harness.lab import Agent, Lab

NAME = "growth"
TITLE = "queue size under repeated wakeups"
#: How many backends a quick run measures at once (its figures are queue sizes, which a slower
#: machine changes little); a full run takes one at a time.
SIDE_BY_SIDE = 2
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"rate": "submissions a second", "seconds": "how long it submits",
            "wakes": "how many times each workflow sleeps and wakes",
            "nap_ms": "how long each sleep is, in ms"}


def plan(quick: bool) -> dict[str, float]:
    if quick:
        return {"rate": 10.0, "seconds": 1.5, "wakes": 5, "nap_ms": 50, "tail": 1.0,
                "sample": 0.2, "trim_every_ms": 400}
    return {"rate": 10.0, "seconds": 25.0, "wakes": 20, "nap_ms": 200, "tail": 8.0,
            "sample": 0.5, "trim_every_ms": 5_000}


#: How long a rival that fell behind the submissions may take to finish them before the
#: last samples (some run a few hundred jobs a second here, where ours are given 200 a second).
DRAIN_S = 240.0
#: Each rival's queue at its defaults and with its own cleanup setting (None: it has none).
CLEANUP: dict[str, tuple[str, str | None]] = {
    "saq": ("job ttl=600 s (its default): a finished job's key is kept 10 minutes",
            "job ttl=-1: a finished job's key is deleted"),
    "arq": ("keep_result=3600 s (its default)", "keep_result=0: no result key"),
    "streaq": ("task ttl=300 s (its default)", "task ttl=0: no result kept"),
    "pgqueuer": ("its defaults: a log row per status change, kept until cleared by hand",
                 None),
    "procrastinate": ("delete_jobs=never (its default): every job's row and events stay",
                      "delete_jobs=always"),
}


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    if backend.rival is not None:
        cleanup = CLEANUP[backend.rival][1] is not None
        return [{"trimming": False}, *([{"trimming": True}] if cleanup else [])]
    if backend.scheduler == "RedisStreamScheduler":
        # With the worker's own trimming (`XTRIM ... ACKED` on 8.2, a safe `MINID` trim below
        # 8.2) and without, on Redis 7 and 8.2.
        return [{"trimming": True}, {"trimming": False}]
    return [{"trimming": None}]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    p = {**plan(lab.quick), **{k: params[k] for k in SETTINGS if params.get(k) is not None}}
    if backend.rival is not None:
        if backend.store == "redis" and backend.server is not None:
            # A server of its own: arq does not name its keys after the queue.
            with lab.servers.fresh(backend.server) as server:
                return await _rival(lab, backend, p, bool(params["trimming"]), server)
        return await _rival(lab, backend, p, bool(params["trimming"]), None)
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
        end = p["seconds"] + p["wakes"] * p["nap_ms"] / 1000 + p["tail"]
        samples = await _sampled(client, p, end, client.request(
            "submit", prefix=prefix, rate=p["rate"], count=count, seed=7,
            value={"wakes": p["wakes"], "nap_ms": p["nap_ms"]}, timeout=900))
        done = await worker.request("mark")
        await worker.request("stop")
    rows = _rows(samples)
    rows.append({"metric": "workflows", "value": count, "unit": "count"})
    rows.append({"metric": "wakeups", "value": count * p["wakes"], "unit": "count"})
    rows.append({"metric": "completed", "value": done["kinds"].get("outcome", 0),
                 "unit": "passes"})
    return rows


async def _rival(lab: Lab, backend: Backend, p: dict[str, float], cleanup: bool, server: Any
                 ) -> list[dict[str, Any]]:
    """As many jobs as our workflows' wakeups, at the same rate, into a rival's queue.

    A rival has no durable sleep: each of our wakeups is a pass through the queue, so a rival
    is given as many one-step jobs as our workflows wake, and its queue counted the same way
    (`experiments.harness.rivals.footprint`) until it has run them all, with its defaults
    (`trimming` False) and with its own cleanup setting (True; `CLEANUP` says what each is)."""
    count = round(p["rate"] * p["seconds"] * p["wakes"])
    options = "cleanup=on" if cleanup else ""
    async with (
        lab.place(backend, server) as (place, _),
        lab.agent(backend, place, options=options) as worker,
        lab.agent(backend, place, role="client", housekeeping=False, options=options) as client,
    ):
        await worker.request("work", body="one-step", pool=64)

        async def finished() -> bool:
            return int((await worker.request("mark"))["outcomes"]) >= count

        samples = await _sampled(client, p, p["seconds"] + p["tail"], client.request(
            "submit", prefix=f"gr{uuid.uuid4().hex[:6]}", rate=count / p["seconds"],
            count=count, seed=7, timeout=900), finished)
        done = await worker.request("mark")
        await worker.request("stop")
    return [*_rows(samples),
            {"metric": "jobs", "value": count, "unit": "count"},
            {"metric": "wakeups", "value": count, "unit": "count"},
            {"metric": "completed", "value": done["kinds"].get("outcome", 0), "unit": "jobs"}]


async def _sampled(client: Agent, p: dict[str, float], end: float, submitting: Any,
                   finished: Callable[[], Awaitable[bool]] | None = None
                   ) -> list[dict[str, Any]]:
    """The queue's footprint (stream entries and sleepers, sorted-set members, rows; and the
    bytes the store says they take) every `sample` seconds from now until `end`, while the
    submission `submitting` runs (awaited before returning); with `finished`, on until it
    says every job is done (at most `DRAIN_S` more) and `tail` after that, so the last sample
    is the queue after every job, not one still working through a backlog."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    running = asyncio.ensure_future(submitting)
    samples: list[dict[str, Any]] = []

    async def sample() -> None:
        found = await client.request("footprint")
        samples.append({"t": loop.time() - began, **found})
        await asyncio.sleep(p["sample"])

    try:
        while loop.time() - began < end:
            await sample()
        await running
        if finished is not None:
            drained = loop.time() + DRAIN_S
            while loop.time() < drained and not await finished():
                await sample()
            tail = loop.time() + p["tail"]
            while loop.time() < tail:
                await sample()
    finally:
        running.cancel()
    return samples


def _rows(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples as rows, each at `t_s`, seconds since the first submission."""
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
    if backend in CLEANUP:  # a rival: its defaults, or its own cleanup setting
        cleaned = trimming is True or trimming == "True"
        return f"{backend}, {'its cleanup' if cleaned else 'defaults'}"
    if trimming is True or trimming == "True":
        return f"{backend}, trimmed"
    if trimming is False or trimming == "False":
        return f"{backend}, untrimmed"
    return backend


def summary(frame: Any) -> Any:
    """A row per backend and trimming: the queue's peak and final entries and KiB, each the
    median over the run's repeats, with its interval (`<column>_lo`, `<column>_hi`: a bootstrap
    over the repeats) where there are two or more, and `repeats`, how many it rests on. Each
    repeat's peak and end are its own: one repeat's last sample is not another's."""
    import pandas

    from experiments.readers.uncertainty import quantile

    samples = frame[frame["metric"].isin(["entries", "bytes"])]
    if "repeat" not in samples.columns:
        samples = samples.assign(repeat=0)
    runs: dict[tuple[Any, Any], list[dict[str, float]]] = {}
    for (backend, trimming, _), group in samples.groupby(["backend", "trimming", "repeat"],
                                                         dropna=False, sort=False):
        entries = group[group["metric"] == "entries"].sort_values("t_s")["value"]
        size = group[group["metric"] == "bytes"].sort_values("t_s")["value"]
        nothing = float("nan")
        runs.setdefault((backend, trimming), []).append({
            "peak_entries": entries.max() if len(entries) else nothing,
            "final_entries": entries.iloc[-1] if len(entries) else nothing,
            "peak_kib": size.max() / 1024 if len(size) else nothing,
            "final_kib": size.iloc[-1] / 1024 if len(size) else nothing,
        })
    out = []
    for (backend, trimming), repeats in runs.items():
        row: dict[str, Any] = {"backend": backend,
                               "trimming": "" if pandas.isna(trimming) else trimming}
        for column in GROWN:
            values = [r[column] for r in repeats if r[column] == r[column]]
            found = quantile(values, 0.5) if values else None
            row[column] = found.estimate if found else float("nan")
            row[f"{column}_lo"] = found.lo if found else float("nan")
            row[f"{column}_hi"] = found.hi if found else float("nan")
        row["repeats"] = len(repeats)
        out.append(row)
    totals = frame[frame["metric"] == "wakeups"].groupby("backend")["value"].first()
    table = pandas.DataFrame(out)
    table["wakeups"] = [totals.get(b, float("nan")) for b in table["backend"]]
    table["setting"] = [_setting(str(b), t) for b, t in
                        zip(table["backend"], table["trimming"], strict=True)]
    return table


#: What `summary` gives of each repeat, and then the median of.
GROWN = ("peak_entries", "final_entries", "peak_kib", "final_kib")


def _setting(backend: str, trimming: Any) -> str:
    """What a rival's row ran with: its defaults, or its cleanup setting."""
    if backend not in CLEANUP:
        return ""
    default, cleanup = CLEANUP[backend]
    return (cleanup or "") if trimming is True or trimming == "True" else default


#: The two panels of a row: (metric, unit, scale, where the log scale starts).
METRICS = (("entries", "entries", 1.0, 10.0), ("bytes", "KiB", 1 / 1024, 1.0))


def draw(frame: Any) -> Any:
    """The queue's entries and bytes over time, a line a backend (untrimmed dotted, hollow; a
    rival with its own cleanup setting dashed, hollow, as a rival's tuned setting is drawn
    everywhere), on a scale linear near zero and logarithmic above, so that a queue holding
    tens and one holding thousands both show; a row of panels per family where there are too
    many lines."""
    from experiments.readers.figures import figure, label, look, nothing, panels

    samples = frame[frame["metric"].isin([m for m, *_ in METRICS])]
    first = ""
    if "repeat" in samples.columns and samples["repeat"].nunique() > 1:
        # a line is one run's: repeats drawn as one would zigzag between them (the tables give
        # the median over repeats and its interval)
        earliest = samples.groupby(["backend", "trimming"], dropna=False)["repeat"].transform("min")
        samples = samples[samples["repeat"] == earliest]
        first = ", the first repeat"
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
                cleaned = trimming is True or trimming == "True"
                if backend in CLEANUP:  # a rival: its defaults plain, its cleanup its variant
                    seen = look(str(backend), "cleanup" if cleaned else "default").line()
                else:
                    seen = look(str(backend)).line()
                    if trimming is False or trimming == "False":  # the stream left to grow
                        seen.update(linestyle=":", markerfacecolor="white")
                seen["label"] = _label(str(backend), trimming)
                # markers spaced alike but started apart, so lines lying on each other (the
                # small queues near zero) each show theirs; a short run's on every sample
                ax.plot(group["t_s"], group["value"] * scale, markersize=4, linewidth=1.3,
                        markevery=(number * 2 % 16, 16) if len(group) > 32 else None, **seen)
            heading = f"Queue {metric} while workflows wake repeatedly{first}"
            ax.set_title(f"{title}: queue {metric}{first}" if title else heading)
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
        if axes[0, column].get_yscale() == "symlog":  # headroom: a line ends at the peak
            top *= 2
        for ax in axes[:, column]:
            ax.set_ylim(0, top)
    return fig
