"""The lab's results on disk, and the one loader everything reads them through.

`results/<experiment>.csv` is tidy: one observation per row, with the backend, its scheduler,
the server it ran on and every parameter as columns, then `metric`, `value`, `unit`.
`results/<experiment>.json` is the run's metadata: git revision, versions, parameters, the
machine's cores and CPU calibration, when it started and how long it took, and what was
skipped and why. `load` gives a pandas frame; `metadata` the JSON; `describe` one line saying
which run a frame came from, for a notebook to print under its figures.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

__all__ = ["RESULTS", "describe", "load", "metadata", "write"]

RESULTS = Path(__file__).resolve().parent.parent / "results"
#: The columns every row starts with, in this order; parameters follow, then the observation.
LEADING = ("experiment", "backend", "scheduler", "store", "server", "server_version",
           "variant", "repeat")
TRAILING = ("metric", "value", "unit")


def write(experiment: str, rows: Iterable[Mapping[str, Any]], meta: Mapping[str, Any],
          where: Path = RESULTS) -> tuple[Path, Path]:
    """Write the rows (CSV) and the metadata (JSON) of one experiment; return both paths."""
    rows = list(rows)
    where.mkdir(parents=True, exist_ok=True)
    middle = sorted({k for row in rows for k in row} - set(LEADING) - set(TRAILING))
    columns = [*LEADING, *middle, *TRAILING]
    table = where / f"{experiment}.csv"
    with table.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _cell(row.get(k)) for k in columns})
    info = where / f"{experiment}.json"
    info.write_text(json.dumps(meta, indent=2, sort_keys=False, default=str) + "\n")
    return table, info


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return round(value, 6)
    return value


def load(experiment: str, where: Path = RESULTS) -> pandas.DataFrame:
    """One experiment's rows as a pandas frame (numbers as numbers, empty cells as NaN)."""
    import pandas

    path = where / f"{experiment}.csv"
    if not path.exists():
        raise FileNotFoundError(f"no results for {experiment!r} in {where}: run "
                                f"`python -m experiments run {experiment}` first")
    return pandas.read_csv(path, low_memory=False)


def metadata(experiment: str, where: Path = RESULTS) -> dict[str, Any]:
    path = where / f"{experiment}.json"
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def describe(experiment: str, where: Path = RESULTS) -> str:
    """Which run the results come from, in one line: revision, date, machine, mode, command."""
    meta = metadata(experiment, where)
    calibration = meta.get("cpu_calibration_seconds", {})
    return (
        f"{experiment}: revision {str(meta.get('git_revision', '?'))[:10]}, "
        f"{meta.get('started', '?')}, {meta.get('cores', '?')} cores, "
        f"CPU calibration {calibration.get('at_start', '?')} s, "
        f"{meta.get('mode', '?')} run; reproduce with `{meta.get('command', '?')}`"
    )
