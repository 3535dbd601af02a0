"""The `policies` experiment: each arm's rows on memory and SQLite, what must hold in them
(no duplicate or missed firing, no limit overshot), an arm whose store lacks its feature
recorded as skipped rather than measured, and the readers over a run's rows.

No timing is asserted: only counts and orders that fail if the code is wrong.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from experiments.commands.runner import module, run
from experiments.harness.backends import BACKENDS
from experiments.harness.lab import Lab, Skipped
from experiments.harness.servers import Servers
from experiments.measures.policies import most_at_once, supports
from experiments.results import load, metadata


@pytest.fixture
async def lab() -> AsyncIterator[Lab]:
    servers = Servers(("url",))
    try:
        yield Lab(servers, quick=True)
    finally:
        servers.close()


async def _measure(lab: Lab, backend: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    async with lab.scope():
        rows: list[dict[str, Any]] = await module("policies").measure(lab, BACKENDS[backend],
                                                                      params)
    return rows


def _counts(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {r["metric"]: r["value"] for r in rows if r["unit"] == "count"}


async def _memory_takes(feature: str) -> bool:
    """Whether the memory store takes `feature`, asked as the agent asks: the arms skip where
    it does not."""
    from durability.connect import open_durable

    async with open_durable("memory://") as durable:
        return supports(durable)[feature]


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_every_firing_of_a_schedule_runs_once_with_its_delay(lab: Lab, backend: str
                                                                   ) -> None:
    processes = 1 if backend == "memory" else 2
    rows = await _measure(lab, backend, {"arm": "schedule", "processes": processes,
                                         "firings": 8})
    counted = _counts(rows)
    assert counted["duplicates"] == 0 and counted["missing"] == 0
    assert counted["firings"] >= 6  # about one a 100 ms for 0.8 s
    delays = [r for r in rows if r["metric"] == "firing_delay"]
    assert len(delays) == counted["firings"]
    assert all(r["value"] >= 0 for r in delays)  # no pass starts before its firing's time


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_urgent_work_without_a_priority_is_timed_behind_the_backlog(lab: Lab,
                                                                          backend: str) -> None:
    rows = await _measure(lab, backend, {"arm": "priority", "ordering": "none",
                                         "backlog": 120, "urgent": 5})
    counted = _counts(rows)
    assert counted["never_started"] == 0 and counted["urgent"] == 5
    starts = [r for r in rows if r["metric"] == "urgent_start"]
    assert len(starts) == 5 and all(r["value"] > 0 for r in starts)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_urgent_work_with_a_priority_overtakes_the_backlog_or_the_arm_is_skipped(
        lab: Lab, backend: str) -> None:
    params = {"arm": "priority", "ordering": "priority", "backlog": 400, "urgent": 5}
    try:
        rows = await _measure(lab, backend, params)
    except Skipped as why:
        assert "priority" in str(why) and backend in str(why)
        return
    counted = _counts(rows)
    assert counted["never_started"] == 0
    # Strict priority: the last urgent one started while backlog was still queued.
    assert counted["backlog_after_last_urgent"] > 0


@pytest.mark.parametrize("at_most", [1, 4, 0])
async def test_a_limit_is_never_overshot_or_the_arm_is_skipped(lab: Lab, at_most: int) -> None:
    params = {"arm": "limit", "at_most": at_most, "processes": 2, "workflows": 60}
    try:
        rows = await _measure(lab, "sqlite", params)
    except Skipped as why:
        assert at_most > 0 and "limit" in str(why)
        return
    counted = _counts(rows)
    assert counted["passes"] == 60
    assert counted["overshoot"] == 0
    if at_most:
        assert 1 <= counted["max_holders"] <= at_most
    else:
        assert counted["max_holders"] > 4  # two processes of 32 slots, nothing holding back


def test_the_most_spans_open_at_once_counts_overlaps_not_neighbours() -> None:
    assert most_at_once([]) == 0
    assert most_at_once([(0, 10), (10, 20), (20, 30)]) == 1  # each ends as the next begins
    assert most_at_once([(0, 10), (5, 15), (6, 7), (14, 20)]) == 3
    assert most_at_once([(0, 100)] * 5) == 5


async def test_an_arm_a_store_cannot_answer_is_recorded_as_skipped_not_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from experiments.commands import runner

    fake = types.ModuleType("experiments.fake")
    fake.NAME, fake.TITLE = "fake", "a fake experiment"  # type: ignore[attr-defined]
    fake.configurations = lambda backend, quick: [{"arm": "a"}, {"arm": "b"}]  # type: ignore[attr-defined]

    async def measure(lab: Lab, backend: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
        if params["arm"] == "b":
            raise Skipped(f"{backend.name}: no b here")
        return [{"metric": "calls", "value": 1, "unit": "count"}]

    fake.measure = measure  # type: ignore[attr-defined]
    monkeypatch.setattr(runner, "module", lambda name: fake)
    failures = await run(["fake"], [BACKENDS["memory"]], quick=True, sources=("url",),
                         where=tmp_path, figures=False)
    assert failures == 0
    meta = metadata("fake", tmp_path)
    assert meta["skipped"] == {"memory arm=b": "memory: no b here"}
    assert meta["failed"] == {}
    assert list(load("fake", tmp_path)["arm"]) == ["a"]


async def test_a_run_on_memory_is_read_back_by_every_reader(tmp_path: Path) -> None:
    """The summary, the tables, what each design pays and the figure, from a small run."""
    import matplotlib.pyplot as plt

    from experiments.readers.summaries import policies as read
    from experiments.readers.tables import views

    failures = await run(["policies"], [BACKENDS["memory"]], quick=True, sources=("url",),
                         where=tmp_path, figures=True, overrides={"policies": {
                             "firings": (5,), "backlog": (100,), "urgent": (4,),
                             "workflows": (40,), "common": (100,)}})
    assert failures == 0
    frame = load("policies", tmp_path)
    table = read.summary(frame)
    fired = table[table["arm"] == "schedule"].iloc[0]
    assert fired["duplicates"] == 0 and fired["missing"] == 0 and fired["n"] >= 4
    assert set(table["arm"]) >= {"schedule", "priority", "limit", "common"}
    shown = {v.key: v for v in views("policies", frame)}
    assert list(shown) == ["schedule", "priority", "limit", "common"]
    paid = read.pays(frame, tmp_path)
    assert list(paid.index) == ["memory"]
    assert paid.at["memory", "duplicates"] == "0"
    skipped = metadata("policies", tmp_path)["skipped"]
    supported = await _memory_takes("limit")
    assert ("limit overshoot" in paid.columns) == supported
    assert any(key.startswith("memory arm=limit") for key in skipped) != supported
    assert (tmp_path / "figures" / "policies.png").stat().st_size > 10_000
    plt.close("all")
