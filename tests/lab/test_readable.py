"""`lab.table(name)` for every experiment the readers read: the columns a reader needs under
headers with their units, numbers rounded as the report rounds them, blank (or a word) where a
value does not apply, never NaN, and the backends in the tables' one order; the numbers
underneath still the summary's (`lab.summary`), every column there."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any

import pandas
import pytest

import experiments as lab
from experiments.readers.figures import order
from experiments.readers.reading import READABLE
from experiments.readers.tables import HEADERS, TIMES, readable
from experiments.results import RESULTS, write


def too_many_digits(cell: object) -> bool:
    """A fraction shown with more than three significant digits (the raw summary's 91.241359
    or 0.00031948), where the report shows 91.2 and 0.00032."""
    found = re.fullmatch(r"-?([\d,]+)\.(\d+)", str(cell))
    return bool(found) and len((found[1] + found[2]).replace(",", "").lstrip("0")) > 3


@pytest.mark.parametrize("name", READABLE)
def test_every_experiment_s_table_on_the_reference_reads_as_a_reader_needs(name: str) -> None:
    table = lab.table(name, where=RESULTS)
    shown = table.shown()
    # its own columns under their headers, fewer than the summary has, none a raw name
    assert name in HEADERS
    assert 4 <= len(shown.columns) <= 14
    assert len(shown.columns) <= len(table.columns)
    assert not [c for c in shown.columns if "_" in str(c)], shown.columns
    text = repr(table)
    assert "nan" not in text.lower() and "NaN" not in table._repr_html_()
    cells = [str(v) for v in shown.to_numpy().ravel()]
    assert not [c for c in cells if too_many_digits(c)], name
    # the backends in the tables' one order, each backend's rows together
    if "backend" in table.columns:
        seen = list(dict.fromkeys(table["backend"]))
        assert seen == order(seen)
        assert len(seen) == len([b for i, b in enumerate(table["backend"])
                                 if i == 0 or table["backend"].iloc[i - 1] != b])
    # and it computes as the summary does
    summary = lab.summary(name, where=RESULTS)
    assert list(summary.columns) == list(table.columns) or name == "latency"
    assert len(summary) == len(table)


def _lifecycle(where: Path) -> None:
    draw = random.Random(3)
    rows = [{"backend": backend, "case": case, "metric": metric, "repeat": 0, "sample": i,
             "value": draw.lognormvariate(math.log(base), 0.3), "unit": "ms"}
            for backend, base in (("sqlite", 2.0), ("memory", 0.2))
            for case, metric in (("mid-step", "cancel"), ("sleeper", "to_stopped"),
                                 ("result", "to_result"))
            for i in range(60)]
    rows += [{"backend": backend, "metric": metric, "repeat": 0, "value": value,
              "unit": "count"}
             for backend in ("sqlite", "memory")
             for metric, value in (("races", 50), ("cancel_won", 20), ("pass_won", 30),
                                   ("both", 0), ("lost", 0), ("revived", 0))]
    write("lifecycle", rows, {"mode": "full", "command": "made up by a test"}, where)


def test_the_lifecycle_table_has_units_its_timings_in_words_and_the_backends_in_order(
        tmp_path: Path) -> None:
    _lifecycle(tmp_path)
    table = lab.table("lifecycle", where=tmp_path)
    shown = table.shown()
    assert list(shown.columns) == ["backend", "timing", "samples", "p50 ms", "p50 from",
                                   "p50 to", "p99 ms"]
    assert list(dict.fromkeys(shown["backend"])) == ["memory", "sqlite"]
    assert "cancel call, a pass mid-step" in set(shown["timing"])
    assert "nan" not in repr(table).lower()
    assert not [c for c in shown.to_numpy().ravel() if too_many_digits(c)]
    # the numbers underneath: every interval, in ms
    memory = table[(table.backend == "memory") & (table.metric == "to_result")].iloc[0]
    assert memory.p50_lo <= memory.p50 <= memory.p50_hi and 0.1 < memory.p50 < 0.4
    assert memory.n == 60


def _cells(summary: dict[str, list[Any]], name: str) -> Any:
    return readable(pandas.DataFrame(summary), name).shown()


def test_idle_cpu_reads_in_milliseconds_a_second_not_a_run_of_zeros() -> None:
    shown = _cells({"backend": ["memory", "postgres"], "variant": ["default"] * 2,
                    "worker_requests": [0.117, 0.0666], "worker_cpu": [0.00032, 0.00307],
                    "server_cpu": [math.nan, 0.0005]}, "idle")
    assert list(shown["worker CPU ms/s"]) == ["0.32", "3.07"]
    assert list(shown["server CPU ms/s"]) == ["", "0.5"]


def test_a_kill_never_taken_over_reads_never_not_a_blank_median() -> None:
    shown = _cells({"backend": ["saq", "saq"], "phase": ["mid-job"] * 2,
                    "recovery": ["sweep", "sweep-default-retries"], "lease_s": [1.0, 1.0],
                    "n": [5, 5], "median": [5.92, math.nan], "median_lo": [5.9, math.nan],
                    "median_hi": [5.94, math.nan], "taken_over": [5, 0],
                    "lease_plus_tick": [math.nan, math.nan],
                    "median_vs_bound": [math.nan, math.nan]}, "takeover")
    assert list(shown["median s"]) == ["5.92", "never"]
    assert list(shown["of lease + tick"]) == ["", ""]
    ours = _cells({"backend": ["sqlite"], "phase": ["mid-step"], "lease_s": [1.0], "n": [5],
                   "median": [0.946], "taken_over": [5], "lease_plus_tick": [1.25],
                   "median_vs_bound": [0.7568]}, "takeover")
    assert ours.iloc[0]["of lease + tick"] == "76%"
    assert list(shown["lease + tick s"]) == ["", ""]


def test_growth_says_trimmed_as_its_table_does_for_the_stream_and_for_a_rival() -> None:
    shown = _cells({"backend": ["memory", "redis-stream", "redis-stream", "saq", "saq"],
                    "trimming": ["", "True", "False", "False", "True"],
                    "peak_entries": [54.0, 1200.0, 5250.0, 5004.0, 17.0],
                    "setting": ["", "", "", "job ttl=600 s", "job ttl=-1"]}, "growth")
    assert list(shown["trimmed"]) == ["", "yes", "no", "defaults", "its cleanup"]


def test_a_slope_reads_at_two_decimals_and_a_share_as_a_percentage() -> None:
    shown = _cells({"backend": ["memory"], "dimension": ["ready"], "slope": [-0.00664],
                    "slope_lo": [-0.00951], "slope_hi": [0.0053], "reads": ["flat"],
                    "ms@1,000": [0.00845]}, "scaling")
    assert list(shown.iloc[0])[2:5] == ["-0.01", "-0.01", "0.01"]
    assert "ms at 1,000" in shown.columns
    shown = _cells({"backend": ["redis-set-cluster"], "masters": [2], "shards": [4],
                    "runs": [2], "worker_cpu_per_pass": [0.43], "busy": [0.1234],
                    "passes_per_s@1": [763.26], "passes_per_s@4": [1400.7]}, "scale-out")
    assert shown.iloc[0]["busiest busy"] == "12%"
    assert list(shown.columns)[-4:] == [f"passes/s {TIMES}1", f"passes/s {TIMES}4",
                                        "worker CPU ms/pass", "busiest busy"]


def test_the_soak_s_summary_from_its_rows_is_what_it_wrote_when_it_ended() -> None:
    summary = lab.summary("soak", where=RESULTS)
    stores = json.loads((RESULTS / "soak.json").read_text())["stores"]
    compared = 0
    for r in summary.itertuples():
        store = r.backend if r.variant == "default" else f"{r.backend}, {r.variant}"
        said = stores[store]["summary"][r.metric]
        # the rows are written to six decimals
        assert [r.start, r.end, r.min, r.max] == pytest.approx(
            [said["start"], said["end"], said["min"], said["max"]], rel=1e-6)
        assert r.samples == said["samples"]
        assert r.slope_per_hour == pytest.approx(said["slope_per_hour_second_half"])
        compared += 1
    assert compared == sum(len(s["summary"]) for s in stores.values() if "summary" in s)
