"""The `policies` experiment: each arm's rows on memory and SQLite, what must hold in them
(no duplicate or missed firing, no limit overshot, no rate limit overshot), an arm whose store
or rival lacks its feature recorded as skipped rather than measured, one arm run and merged
alone, and the readers over a run's rows.

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
from experiments.measures.policies import supports
from experiments.measures.policy_rows import most_at_once, most_in_window, rate_rows
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


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_rate_limit_is_never_overshot_and_runs_every_workflow(lab: Lab, backend: str
                                                                     ) -> None:
    processes = 1 if backend == "memory" else 2
    params = {"arm": "rate", "at_most": 5, "processes": processes, "windows": 3}
    rows = await _measure(lab, backend, params)
    counted = _counts(rows)
    assert counted["passes"] == 15 and counted["never_started"] == 0
    assert counted["overshoot"] == 0
    # Nothing but the limit holds them back: a window's burst takes all it allows.
    assert counted["most_in_window"] == 5
    rates = {r["metric"]: r["value"] for r in rows if r["unit"] == "1/s"}
    assert rates["ceiling_per_s"] == 5
    # Ten started after the first window's burst, over at least the two windows they waited.
    assert rates["passes_per_s"] <= 5 * 1.1


def test_the_most_in_a_window_counts_starts_less_than_a_window_apart() -> None:
    assert most_in_window([], 10) == 0
    assert most_in_window([0, 10, 20], 10) == 1  # a window apart: each in a window of its own
    assert most_in_window([0, 9, 10, 19], 10) == 2
    assert most_in_window([0, 1, 2, 50, 51], 10) == 3
    second = 1_000_000_000
    starts = [0, 1, 2, second, second + 1, second + 2]
    found = {r["metric"]: r["value"] for r in rate_rows(starts, 3, 1000.0, 6)}
    assert found["overshoot"] == 0 and found["most_in_window"] == 3
    assert found["never_started"] == 0
    assert found["passes_per_s"] == pytest.approx(3 / ((second + 2) / 1e9))
    found = {r["metric"]: r["value"] for r in rate_rows([*starts, second + 3], 3, 1000.0, 7)}
    assert found["overshoot"] == 1  # a fourth start in the second window
    # Cut short four seconds in with three of nine never started: the rate is to the cut.
    found = {r["metric"]: r["value"] for r in rate_rows(starts, 3, 1000.0, 9, 4 * second)}
    assert found["never_started"] == 3
    assert found["passes_per_s"] == pytest.approx(3 / 4)


def test_a_rival_s_missing_feature_is_a_configuration_said_to_be_skipped() -> None:
    from experiments.measures.policies import configurations

    streaq = configurations(BACKENDS["streaq"], False)
    assert {"arm": "limit"} in streaq and {"arm": "rate"} in streaq
    assert {c["arm"] for c in streaq} == {"schedule", "priority", "limit", "rate"}
    procrastinate = configurations(BACKENDS["procrastinate"], False)
    limits = {c.get("at_most") for c in procrastinate if c["arm"] == "limit"}
    assert limits == {0, 1, 4, 16}
    assert {"arm": "limit", "at_most": 4} in procrastinate  # a lock is one at a time
    assert [c for c in procrastinate if c["arm"] == "rate"] == [{"arm": "rate"}]
    # ours have every arm, and none of them a configuration standing for a lack
    ours = configurations(BACKENDS["postgres"], False)
    assert {c["arm"] for c in ours} == {"schedule", "priority", "limit", "rate", "common"}
    assert all(len(c) > 1 for c in ours)


async def test_a_rival_lacking_a_feature_is_skipped_with_its_reason(lab: Lab) -> None:
    for backend, params, said in (("streaq", {"arm": "rate"}, "rate limit"),
                                  ("procrastinate", {"arm": "limit", "at_most": 4}, "lock")):
        with pytest.raises(Skipped, match=said):
            await _measure(lab, backend, params)


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
                             "workflows": (40,), "common": (100,), "windows": (2,)}})
    assert failures == 0
    frame = load("policies", tmp_path)
    table = read.summary(frame)
    fired = table[table["arm"] == "schedule"].iloc[0]
    assert fired["duplicates"] == 0 and fired["missing"] == 0 and fired["n"] >= 4
    assert set(table["arm"]) >= {"schedule", "priority", "limit", "common"}
    shown = {v.key: v for v in views("policies", frame)}
    assert list(shown) == ["schedule", "priority", "limit", "rate", "common"]
    paid = read.pays(frame, tmp_path)
    assert list(paid.index) == ["memory"]
    assert paid.at["memory", "duplicates"] == "0"
    skipped = metadata("policies", tmp_path)["skipped"]
    supported = await _memory_takes("limit")
    assert ("limit overshoot" in paid.columns) == supported
    assert ("rate limit overshoot" in paid.columns) == supported
    if supported:
        assert paid.at["memory", "rate limit overshoot"] == "0"
        assert len(shown["rate"].table) == 1
    assert any(key.startswith("memory arm=limit") for key in skipped) != supported
    assert (tmp_path / "figures" / "policies.png").stat().st_size > 10_000
    plt.close("all")


async def test_one_arm_run_and_merged_replaces_only_that_arm_s_rows(tmp_path: Path) -> None:
    """`--set arm=rate --merge`: the arm's configurations alone, its rows in place of the
    earlier ones of that arm, every other arm's rows and metadata kept."""
    sizes = {"firings": (4,), "backlog": (40,), "urgent": (2,), "workflows": (20,),
             "common": (60,), "windows": (2,)}
    memory = [BACKENDS["memory"]]
    assert await run(["policies"], memory, quick=True, sources=("url",), where=tmp_path,
                     figures=False, overrides={"policies": sizes}) == 0
    before = load("policies", tmp_path)
    arms = set(before["arm"])
    assert "rate" in arms and len(arms) > 2
    earlier = before[before["arm"] != "rate"]
    assert await run(["policies"], memory, quick=True, sources=("url",), where=tmp_path,
                     figures=False, merge=True,
                     overrides={"policies": {**sizes, "arm": ("rate",)}}) == 0
    after = load("policies", tmp_path)
    kept = after[after["arm"] != "rate"]
    assert len(kept) == len(earlier)
    assert list(kept["metric"]) == list(earlier["metric"])
    assert list(kept["value"]) == list(earlier["value"])
    fresh = after[after["arm"] == "rate"]
    assert len(fresh) == len(before[before["arm"] == "rate"])  # replaced, not added to
    meta = metadata("policies", tmp_path)
    assert [r.get("only") for r in meta["runs"]] == [None, {"arm": ["rate"]}]
    assert {c["arm"] for c in meta["configurations"]} == arms
    assert sum(c["arm"] == "rate" for c in meta["configurations"]) == 1


def test_a_selector_picks_configurations_and_a_plain_override_changes_them() -> None:
    from experiments.commands.overrides import apply

    grid = [{"arm": "limit", "at_most": 1}, {"arm": "rate", "at_most": 10},
            {"arm": "common", "processes": 1}]
    memory = BACKENDS["memory"]
    assert apply(grid, {"arm": ("rate", "common")}, memory, ("arm",)) == grid[1:]
    assert apply(grid, {"at_most": (5,)}, memory, ("arm",)) == [
        {"arm": "limit", "at_most": 5}, {"arm": "rate", "at_most": 5},
        {"arm": "common", "processes": 1, "at_most": 5}]
    assert apply(grid, {"arm": ("rate",)}, memory) == [
        {"arm": "rate", "at_most": 1}, {"arm": "rate", "at_most": 10},
        {"arm": "rate", "processes": 1}]
