"""The lab's results on disk, and the one loader everything reads them through.

`results/<experiment>.csv` is tidy, one observation per row (`write`), and
`results/<experiment>.json` the run's metadata (`metadata`). `load` gives a pandas frame;
`describe` one line saying which run a frame came from, for a notebook to print under its
figures.

`results/` holds the reference run the docs and the notebooks quote, so a run writes to a
folder of its own under `runs/` (`scratch`) unless it is told to write the reference, and
`guard` refuses a run that would leave one folder holding quick and full runs side by side.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.refusals import BadInput

if TYPE_CHECKING:
    import pandas

__all__ = ["RESULTS", "SCRATCH", "Refused", "describe", "find", "guard", "is_reference", "load",
           "metadata", "modes", "runs", "scratch", "write"]

RESULTS = Path(__file__).resolve().parent.parent / "results"
#: Where runs go unless told otherwise: a folder per run (`LAB_RUNS` moves them).
SCRATCH = Path(os.environ.get("LAB_RUNS") or Path(__file__).resolve().parent.parent / "runs")
#: The columns every row starts with, in this order; parameters follow, then the observation.
LEADING = ("experiment", "backend", "scheduler", "store", "server", "server_version",
           "variant", "repeat")
TRAILING = ("metric", "value", "unit")


def write(experiment: str, rows: Iterable[Mapping[str, Any]], meta: Mapping[str, Any],
          where: Path = RESULTS) -> tuple[Path, Path]:
    """Write the rows (CSV) and the metadata (JSON) of one experiment; return both paths. The
    CSV is tidy: one observation per row, with the backend, its scheduler, the server it ran on
    and every parameter as columns, then `metric`, `value`, `unit`."""
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
    frame = pandas.read_csv(path, low_memory=False)
    info = where / f"{experiment}.json"
    if "backend" in frame and info.exists():
        made = {backend: run["run"] for run in runs(metadata(experiment, where))
                for backend in run["backends"]}
        found = frame["backend"].map(made)
        frame.insert(1, "run", found.astype(object).where(found.notna(), ""))
    return frame


def runs(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every run a result's metadata holds, oldest first, each with its `run` id (when it
    started, `20261204-202650`), `command`, `started`, `git_revision`, `git_dirty`, CPU
    `calibration` (seconds at its start) and the `backends` whose rows it made: one for a run
    written whole, one per run merged into it (`--merge`), a later run's backends no longer
    an earlier one's."""
    listed = list(meta.get("runs") or []) or [meta]
    found: list[dict[str, Any]] = []
    for run in listed:
        started = str(run.get("started", ""))
        found.append({
            "run": started[:19].replace("-", "").replace(":", "").replace("T", "-"),
            "command": run.get("command", "?"), "started": started,
            "git_revision": run.get("git_revision", meta.get("git_revision", "?")),
            "git_dirty": bool(run.get("git_dirty", meta.get("git_dirty", False))),
            "calibration": (run.get("cpu_calibration_seconds") or {}).get("at_start"),
            "backends": list(run.get("backends") or meta.get("backends") or [])})
    for i, run in enumerate(found):
        later = {b for other in found[i + 1:] for b in other["backends"]}
        run["backends"] = [b for b in run["backends"] if b not in later]
    return found


def metadata(experiment: str, where: Path = RESULTS) -> dict[str, Any]:
    """One experiment's metadata (the JSON): git revision, versions, parameters, the machine's
    cores and CPU calibration, when the run started and how long it took, and what was
    skipped and why."""
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


class Refused(BadInput):
    """A run that would overwrite the reference unasked, or mix quick and full runs in one
    folder; raised before anything is started or written."""


def is_reference(where: Path) -> bool:
    return where.resolve() == RESULTS.resolve()


def scratch(names: Sequence[str], mode: str) -> Path:
    """A new folder for one run under `SCRATCH`, named for when it started and what it ran
    (not created: the first result written makes it)."""
    what = "-".join(names) if 0 < len(names) <= 3 else "all"
    base = SCRATCH / f"{datetime.now():%Y%m%d-%H%M%S}-{what}-{mode}"
    path, n = base, 2
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}"), n + 1
    return path


def modes(where: Path) -> dict[str, str]:
    """The mode (`quick`, `full`, a chaos profile) of each run whose results are in `where`."""
    found: dict[str, str] = {}
    for info in sorted(where.glob("*.json")) if where.is_dir() else []:
        try:
            meta = json.loads(info.read_text())
        except ValueError:
            continue
        if isinstance(meta, dict) and "mode" in meta:
            found[info.stem] = str(meta["mode"])
    return found


def guard(where: Path, names: Sequence[str], mode: str, *, reference: bool = False,
          merge: bool = False) -> None:
    """Refuse (`Refused`) a run of `names` in `mode` into `where` that would overwrite the
    reference run without `reference`, or leave `where` holding runs of another mode beside
    it (what it replaces whole does not count; with `merge` it keeps the rest, so it does)."""
    if is_reference(where) and not reference:
        raise Refused(f"{where} holds the reference run: write a run of your own to another "
                      "folder (the default, under runs/), or say --reference (reference=True) "
                      "to replace it")
    other = {name: found for name, found in modes(where).items()
             if found != mode and (merge or name not in names)}
    if other:
        held = ", ".join(f"{name} ({found})" for name, found in sorted(other.items()))
        raise Refused(f"{where} holds results of another mode: {held}; a {mode} run of "
                      f"{', '.join(names)} there would mix them (a notebook's overview would "
                      f"read both). Write it to a folder of its own (the default), or run it "
                      f"as the others were")


def find(run: str | Path) -> Path:
    """The folder of results `run` names: `"latest"` (the newest run under `SCRATCH`), or a
    path, absolute or relative to the working directory or the checkout. One that is not
    there, or holds no results, is `BadInput` saying where it looked."""
    if str(run) == "latest":
        made = sorted((p for p in SCRATCH.glob("*") if p.is_dir() and modes(p)),
                      key=lambda p: p.stat().st_mtime)
        if not made:
            raise BadInput(f"no runs in {SCRATCH} yet: `await lab.run(...)` makes one")
        return made[-1]
    given = Path(run).expanduser()
    tried = [given] if given.is_absolute() else [Path.cwd() / given, RESULTS.parent / given]
    found = [p for p in tried if p.is_dir()]
    if not found:
        raise BadInput(f"no folder {str(run)!r} (looked at {', '.join(str(p) for p in tried)})")
    if not modes(found[0]):
        raise BadInput(f"{found[0].resolve()} holds no results (no <experiment>.json)")
    return found[0].resolve()
