"""The soak at a few seconds' size: SQLite and the Redis stream side by side, one fault each,
samples taken from outside the worker, everything submitted completed, tidy rows.

Redis runs on a private server started from the local `redis-server` (never the shared one:
the soak reads the server's counters and cuts its connections); without it the test skips.
No timing is asserted: the run's length only decides how many samples there are.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from experiments.faults.soak import FAULTS, Settings, slope_per_hour, soak
from experiments.readers.figures import draw
from experiments.results import LEADING, TRAILING


@pytest.mark.slow
async def test_a_short_soak_samples_faults_and_completes_everything(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH")
    settings = Settings(minutes=0.15, rate=20.0, fault_every_s=4.0, sample_s=2.0,
                        drain_s=60.0, lock_hold_s=6.0)
    bad = await soak(settings, ["redis-stream", "sqlite"], where=tmp_path)
    assert bad == 0
    meta = json.loads((tmp_path / "soak.json").read_text())
    assert meta["finished"] is True
    for name, store in (("redis-stream", "redis"), ("sqlite", "sqlite")):
        outcome = meta["stores"][name]
        assert outcome["submitted"] > 0
        assert outcome["completed"] == outcome["submitted"]
        assert outcome["gave_up"] == 0 and outcome["stopped_working"] is None
        faults = outcome["faults"]
        assert faults and faults[0]["kind"] == FAULTS[store][0]
        assert not any(f["detail"].startswith("failed") for f in faults), faults
        summary = outcome["summary"]
        assert summary["rss"]["samples"] >= 3 and summary["rss"]["start"] > 0
        assert summary["fds"]["end"] > 0
        assert outcome["after_drain"]["queue"] == 0
        assert summary["vm_data"]["start"] > 0
        trimmed = outcome["trim"]  # the worker gave its allocator's free memory back
        assert trimmed is not None and 0 < trimmed["rss_after"] <= trimmed["rss_before"]
    # The worker's own sockets to its Redis were found (and cut: the fault says how many).
    assert meta["stores"]["redis-stream"]["summary"]["connections"]["max"] >= 1
    assert "CLIENT KILL of" in meta["stores"]["redis-stream"]["faults"][0]["detail"]
    with (tmp_path / "soak.csv").open(newline="") as opened:
        reader = csv.DictReader(opened)
        rows = list(reader)
        columns = reader.fieldnames or []
    assert columns[:len(LEADING)] == list(LEADING)
    assert columns[-len(TRAILING):] == list(TRAILING)
    assert {"t_s", "fault"} <= set(columns)
    metrics = {(r["backend"], r["metric"]) for r in rows}
    for name in ("redis-stream", "sqlite"):
        assert {(name, m) for m in ("rss", "fds", "queue", "completed", "fault")} <= metrics
    assert {("redis-stream", "connections"), ("redis-stream", "redis_lag")} <= metrics
    assert ("sqlite", "connections") not in metrics  # a file has no server to connect to
    assert draw("soak", tmp_path).exists()


def test_the_slope_is_per_hour_and_flat_for_a_flat_line() -> None:
    assert slope_per_hour([(0.0, 5.0), (60.0, 5.0), (120.0, 5.0)]) == 0.0
    rising = slope_per_hour([(0.0, 0.0), (1800.0, 1.0), (3600.0, 2.0)])
    assert rising is not None and abs(rising - 2.0) < 1e-9
    assert slope_per_hour([(0.0, 1.0), (1.0, 2.0)]) is None  # too few points to say
