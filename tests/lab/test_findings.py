"""`python -m experiments findings`: the paragraphs of `docs/findings.md` written from a run's
rows, every comparison with its interval (or said to have none), "not distinguishable at this
sample size" where an interval allows the same, and what a run does not hold said rather than
guessed. From the committed reference and from rows made up here; nothing is run."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from experiments.__main__ import main
from experiments.readers.findings import SECTIONS, findings
from experiments.readers.reading import versus
from experiments.readers.tables import SAME
from experiments.readers.uncertainty import distinguishable
from experiments.results import RESULTS, write


def _reference() -> str:
    if not all((RESULTS / f"{n}.csv").exists() for needs, _ in SECTIONS.values() for n in needs):
        pytest.skip("the committed reference run is not all here")
    return findings(RESULTS)


def test_every_section_is_written_from_the_reference_with_its_intervals() -> None:
    text = _reference()
    paragraphs = text.split("\n\n")
    for title in ("Headline ratios", "Idle cost", "Growth", "Lost wakeups", "Scaling",
                  "The design documents' table", "Cancel and result"):
        assert any(p.startswith(f"**{title}**") for p in paragraphs), title
    assert "nan" not in text.lower().split() and "n/a" not in text
    assert max(len(line) for line in text.splitlines() if not line.startswith("|")) <= 95
    rows = [line for line in text.splitlines() if line.startswith("| redis-stream / saq")
            or line.startswith("| postgres / pgqueuer")]
    assert len(rows) == 2 and all(line.count("\N{EN DASH}") == 4 for line in rows)
    # Each paragraph says how sure it is: intervals, or why it has none.
    said = {p.split("**")[1]: " ".join(p.split()) for p in paragraphs if p.startswith("**")}
    assert "no interval" in said["Idle cost"] or "interval over them" in said["Idle cost"]
    assert "no interval" in said["Growth"] or "interval over the runs" in said["Growth"]
    assert "at most 1.3% each, at 95%" in said["Lost wakeups"]
    assert re.search(r"cancel|Cancelling", said["Scaling"]) and "at 95%" in said["Scaling"]
    assert "95% intervals" in said["Cancel and result"]
    assert "none had both or neither win" in said["Cancel and result"]
    # The stream against the doorbelled set: "not distinguishable" exactly when the interval
    # of the ratio the reference gives holds 1, and the interval said either way.
    alike = not distinguishable(versus("latency", "redis-stream", "redis-set", RESULTS))
    table = said["The design documents' table"]
    assert ("not distinguishable at this sample size" in table) == alike
    assert "at 95%" in table


def test_the_command_prints_the_sections_asked_for_and_refuses_unknown_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _reference()
    assert main(["findings", "wakeups", "--results", str(RESULTS)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**Lost wakeups**") and "**Growth**" not in out
    assert main(["findings", "nope"]) == 2
    assert "no finding 'nope'; choose from ratios, idle" in capsys.readouterr().err


def _throughput(where: Path, pgqueuer: float) -> None:
    draw = random.Random(7)
    rows: list[dict[str, Any]] = []
    for backend, rate in (("redis-stream", 9000.0), ("saq", 2000.0), ("postgres", 3000.0),
                          ("pgqueuer", pgqueuer)):
        for repeat in range(5):
            base = {"backend": backend, "variant": "default", "processes": 1,
                    "repeat": repeat}
            rows += [{**base, "metric": "passes_per_s",
                      "value": rate * draw.uniform(0.95, 1.05)},
                     {**base, "metric": "passes", "value": 4000}]
    write("throughput", rows, {"mode": "full", "command": "made up by a test"}, where)


def test_a_ratio_whose_interval_holds_one_is_marked_and_a_missing_run_is_said(
    tmp_path: Path,
) -> None:
    shutil.copy(RESULTS / "latency.csv", tmp_path / "latency.csv")
    shutil.copy(RESULTS / "latency.json", tmp_path / "latency.json")
    _throughput(tmp_path, pgqueuer=3000.0)  # Postgres and pgqueuer alike
    text = findings(tmp_path, ["ratios", "idle"])
    row = next(line for line in text.splitlines() if line.startswith("| postgres / pgqueuer"))
    assert row.rstrip(" |").endswith(SAME)
    stream = next(line for line in text.splitlines() if line.startswith("| redis-stream / saq"))
    assert not stream.rstrip(" |").endswith(SAME)  # 4.5 times, told apart
    assert "**idle**: not in this run (no idle.csv)" in text
