"""What a researcher meets calling the readers from a notebook: names and folders given as
text, a misspelt name said in one line, a figure to restyle, a table to read, where each row
came from, and a run of their own against the reference."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

import experiments as lab
from experiments.readers import reading
from experiments.refusals import TRACEBACK, BadInput
from experiments.results import RESULTS, write


def _latency(where: Path, *, scale: float = 1.0, rates: tuple[float, ...] = (20.0, 100.0),
             meta: dict[str, Any] | None = None) -> None:
    draw = random.Random(5)
    rows = [{"backend": backend, "variant": "default", "rate": rate, "poll_ms": None,
             "repeat": 0, "submission": i, "metric": "submit_to_first_pass",
             "value": draw.lognormvariate(math.log(base * scale), 0.2), "unit": "ms"}
            for backend, base in (("memory", 0.3), ("sqlite", 1.5))
            for rate in rates for i in range(200)]
    rows += [{"backend": backend, "variant": "default", "rate": rate, "poll_ms": None,
              "repeat": 0, "metric": "submissions", "value": 200, "unit": "count"}
             for backend in ("memory", "sqlite") for rate in rates]
    write("latency", rows, {"mode": "full", "command": "made up by a test",
                            "started": "2026-12-01T10:00:00+00:00", **(meta or {})}, where)


def test_a_misspelt_experiment_is_named_with_the_choices_not_a_module_not_found() -> None:
    for reader in (lab.table, lab.frame, lab.figure, lab.summary, lab.shown):
        with pytest.raises(BadInput, match=r"no experiment 'latncy'; choose from latency, "):
            reader("latncy")


def test_the_readers_take_a_folder_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    _latency(tmp_path / "mine")
    monkeypatch.chdir(tmp_path)
    assert len(lab.frame("latency", where="mine")) == len(lab.frame("latency", tmp_path / "mine"))
    assert set(lab.table("latency", where=str(tmp_path / "mine"))["backend"]) == {"memory",
                                                                                 "sqlite"}
    with pytest.raises(BadInput, match="no folder 'elsewhere'"):
        lab.frame("latency", where="elsewhere")


def test_a_refusal_shows_in_a_notebook_as_one_line_unless_its_frames_are_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        lab.table("latncy")
    except BadInput as error:
        monkeypatch.delenv(TRACEBACK, raising=False)
        assert error._render_traceback_() == [
            "BadInput: no experiment 'latncy'; choose from " + ", ".join(reading.READABLE)]
        monkeypatch.setenv(TRACEBACK, "1")
        frames = error._render_traceback_()
        assert len(frames) > 3 and any("reading.py" in line for line in frames)
    else:
        raise AssertionError("no refusal")


def test_a_figure_is_a_matplotlib_figure_of_every_rate_or_the_rate_picked(tmp_path: Path
                                                                          ) -> None:
    from matplotlib.figure import Figure

    _latency(tmp_path)
    every = lab.figure("latency", where=tmp_path)
    assert isinstance(every, Figure)
    titles = [ax.get_title() for ax in every.axes if ax.get_visible()]
    assert any("every rate" in t for t in titles)
    assert any("20/s" in t for t in titles)
    picked = lab.figure("latency", where=tmp_path, rate=100)
    titles = [ax.get_title() for ax in picked.axes if ax.get_visible()]
    assert any("100/s" in t for t in titles) and not any("every rate" in t for t in titles)
    with pytest.raises(BadInput, match="no rate 7/s in this run; it measured 20, 100"):
        lab.figure("latency", where=tmp_path, rate=7)
    with pytest.raises(BadInput, match="takes no rate"):
        lab.figure("idle", rate=20)


def test_a_table_shows_a_reader_s_columns_with_units_and_no_nan(tmp_path: Path) -> None:
    _latency(tmp_path)
    table = lab.table("latency", where=tmp_path)
    shown = repr(table)
    assert "p50 ms" in shown and "rate /s" in shown and "p50_lo" not in shown
    assert "nan" not in shown.lower() and "NaN" not in table._repr_html_()
    assert len(table.shown().columns) <= 13 < len(table.columns)
    # and it computes as the summary does, every column there
    assert {"p50_lo", "p50_hi", "repeats"} <= set(table.columns)
    assert float(table[table.backend == "sqlite"].p50.iloc[0]) > 1
    assert "p50 ms" in repr(table[table.rate == 20.0])  # a part of it shows so too


def test_every_row_says_the_run_that_made_it_and_the_run_line_lists_each_merged_run(
        tmp_path: Path) -> None:
    _latency(tmp_path, meta={"runs": [
        {"command": "python -m experiments run latency --backends memory,sqlite",
         "started": "2026-12-01T10:00:00+00:00", "git_revision": "a" * 40,
         "cpu_calibration_seconds": {"at_start": 0.13}, "backends": ["memory", "sqlite"]},
        {"command": "python -m experiments run latency --backends sqlite --merge",
         "started": "2026-12-02T11:30:00+00:00", "git_revision": "b" * 40, "git_dirty": True,
         "cpu_calibration_seconds": {"at_start": 0.5}, "backends": ["sqlite"]}]})
    rows = lab.frame("latency", where=tmp_path)
    assert dict(rows.groupby("backend")["run"].first()) == {"memory": "20261201-100000",
                                                            "sqlite": "20261202-113000"}
    said = lab.run_line("latency", where=tmp_path).data
    assert "--backends memory,sqlite`" in said and "--backends sqlite --merge`" in said
    assert "(uncommitted changes)" in said and "⚠" in said and "0.13 to 0.5 s" in said


def test_reads_says_something_in_a_console_and_names_no_cell_it_may_not_have() -> None:
    said = lab.reads()
    assert repr(said).startswith("Reading the reference run") and "<" not in repr(said)
    assert "RUN" not in said.data and "lab.use(path)" in said.data


def test_a_run_against_the_reference_is_each_headline_s_ratio_with_its_interval(
        tmp_path: Path) -> None:
    _latency(tmp_path / "before")
    _latency(tmp_path / "after", scale=2.0)
    _latency(tmp_path / "again")
    compared = lab.compare(str(tmp_path / "after"), tmp_path / "before")
    p50 = compared[compared.measure.str.contains("median")].set_index("backend")
    assert list(p50.index) == ["memory", "sqlite"]
    assert all(p50.ratio_lo > 1.8) and all(p50.ratio_hi < 2.2) and all(p50.changed)
    same = lab.compare(tmp_path / "again", tmp_path / "before")
    assert not same.changed.any() and all(same.ratio == 1.0)


def test_the_overview_gives_a_rival_its_takeover_where_takeover_has_one() -> None:
    meta = json.loads((RESULTS / "takeover.json").read_text())
    rivals = {b for b in meta["backends"] if b in ("saq", "pgqueuer")}
    overview = lab.overview().set_index("backend")
    (column,) = [c for c in overview.columns if c.startswith("takeover")]
    assert rivals and all(overview.loc[b, column] > 0 for b in rivals)


def test_a_polled_backend_of_one_s_own_shows_its_default_poll_not_nan(tmp_path: Path) -> None:
    draw = random.Random(6)
    rows = [{"backend": "mine", "variant": "default", "rate": 20.0, "poll_ms": poll,
             "repeat": 0, "submission": i, "metric": "submit_to_first_pass",
             "value": draw.lognormvariate(0, 0.2), "unit": "ms"}
            for poll in (None, 5.0, 50.0) for i in range(40)]
    rows += [{**row, "backend": "redis-stream"} for row in rows if row["poll_ms"] is None]
    write("latency", rows, {"mode": "full", "command": "made up by a test"}, tmp_path)
    shown = lab.table("latency", where=tmp_path).shown().set_index("backend")
    assert list(shown.loc["mine", "poll ms"]) == ["its default", "5", "50"]
    assert shown.loc["redis-stream", "poll ms"] == ""


def test_a_cluster_s_server_requests_are_blank_not_a_zero_never_measured(tmp_path: Path
                                                                        ) -> None:
    from experiments.readers.tables import views

    rows = [{"backend": backend, "server": server, "variant": "default", "processes": 1,
             "repeat": r, "metric": metric, "value": value, "unit": "1"}
            for backend, server in (("redis-stream", "redis7"),
                                    ("redis-stream-cluster", "cluster"))
            for r in range(3)
            for metric, value in (("passes_per_s", 700.0 + r), ("passes", 4000),
                                  ("server_requests_per_pass", 0.0 if server == "cluster"
                                   else 6.0))]
    write("throughput", rows, {"mode": "full", "command": "made up by a test"}, tmp_path)
    summary = lab.summary("throughput", where=tmp_path).set_index("backend")
    assert summary.loc["redis-stream", "server_requests_per_pass"] == 6.0
    assert math.isnan(summary.loc["redis-stream-cluster", "server_requests_per_pass"])
    costs = next(v for v in views("throughput", lab.frame("throughput", tmp_path))
                 if v.key == "costs").table
    assert list(costs["server requests"]) == ["6", ""]
