"""Running experiments: every configuration of every backend that applies, with a progress bar,
rows stamped with what produced them, results and figures written, failures counted.

An experiment module offers `NAME`, `configurations(backend, quick) -> [params]` and
`measure(lab, backend, params) -> [rows]`; the runner stamps each row with what produced it
(`_stamp`), so a module returns only what it measured. A backend that cannot run here is
skipped with its reason (`skip_reason`); a configuration that raises is recorded as failed,
the run goes on, and the exit status says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import platform
import shutil
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from experiments.catalogue import EXPERIMENTS, module_name
from experiments.commands.overrides import apply
from experiments.commands.progress import bars
from experiments.harness.backends import Backend
from experiments.harness.lab import Lab, Skipped, cpu_calibration, rivals_python
from experiments.harness.provenance import git, rivals, versions
from experiments.harness.registry import described
from experiments.harness.servers import Servers, shown
from experiments.refusals import BadInput
from experiments.results import guard, metadata, scratch, write

__all__ = ["module", "run", "versions"]


def module(name: str) -> ModuleType:
    if name not in EXPERIMENTS:
        raise BadInput(f"no experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"experiments.measures.{module_name(name)}")


def skip_reason(lab: Lab, backend: Backend) -> str | None:
    """Why `backend` cannot run here (a server that cannot be had, or a rival without its
    virtualenv), or None. The runner skips it and records the reason in the metadata."""
    if backend.rival is not None and rivals_python() is None:
        return "the rivals' virtualenv is missing (python -m experiments rivals)"
    if backend.server is None:
        return None
    if lab.servers.get(backend.server) is not None:
        return None
    reasons = lab.servers.reasons.get(backend.server, [])
    return f"no {backend.server} server: " + "; ".join(reasons)


def _stamp(backend: Backend, lab: Lab, name: str, params: dict[str, Any], repeat: int,
           row: dict[str, Any]) -> dict[str, Any]:
    """`row` with what produced it: the backend, its scheduler, store, server and version, the
    parameters and the repeat."""
    server = lab.server(backend)
    return {
        "experiment": name,
        "backend": backend.name,
        "scheduler": backend.scheduler,
        "store": backend.store,
        "server": server.kind if server else ("in-process" if backend.in_process else "file"),
        "server_version": server.version if server else "",
        "repeat": repeat,
        **params,
        **row,
    }


async def run(
    names: Sequence[str],
    backends: Sequence[Backend],
    *,
    quick: bool,
    repeat: int = 1,
    sources: tuple[str, ...] | None = None,
    where: Path | None = None,
    figures: bool = True,
    command: str = "",
    merge: bool = False,
    reference: bool = False,
    overrides: Mapping[str, Mapping[str, tuple[Any, ...]]] | None = None,
) -> int:
    """Run `names` over `backends`; write results to `where` (a new folder under `runs/` by
    default; the reference `results/` only with `reference`); return the number of failed
    configurations. `overrides` (`experiments.commands.overrides.check`) replaces parameters'
    values, per experiment. `results.Refused` (`results.guard`) before anything starts if the folder
    is not one to write this run into."""
    from rich.console import Console

    console = Console(stderr=True)
    modules = [module(name) for name in names]
    mode = "quick" if quick else "full"
    if where is None:
        where = scratch(names, mode)
    guard(where, names, mode, reference=reference, merge=merge)
    # Relative to the checkout where inside it: what a notebook's output keeps names no machine.
    console.print(f"writing to {shown(where)}/", highlight=False)
    failures = 0
    servers = Servers(sources) if sources else Servers()
    with contextlib.suppress(Exception):
        from experiments.harness import containers

        containers.reap()
    lab: Lab | None = None
    try:
        lab = Lab(servers, quick)
        with bars(console) as progress:
            for experiment in modules:
                changed = (overrides or {}).get(experiment.NAME, {})
                failures += await _one(experiment, backends, lab, progress, repeat, where,
                                       figures, command, console, merge, changed)
    finally:
        await asyncio.to_thread(servers.close)
        if lab is not None:
            shutil.rmtree(lab.scratch, ignore_errors=True)  # the SQLite files of the run
    return failures


async def _one(experiment: ModuleType, backends: Sequence[Backend], lab: Lab, progress: Any,
               repeat: int, where: Path, figures: bool, command: str, console: Any,
               merge: bool, overrides: Mapping[str, tuple[Any, ...]]) -> int:
    name: str = experiment.NAME
    began, clock = datetime.now(UTC), time.perf_counter()
    calibration = await asyncio.to_thread(cpu_calibration)
    load = os.getloadavg()
    plan: list[tuple[Backend, dict[str, Any]]] = []
    skipped: dict[str, str] = {}
    # What this run picked by a selector (`--set arm=rate`): a merge replaces only those rows.
    selectors = tuple(getattr(experiment, "SELECTORS", ()))
    only = {key: overrides[key] for key in selectors if key in overrides}
    # A backend the experiment has no configuration for is not chosen, and so no server is
    # started for it (`contention` asks its questions of one store's own accounts); one it
    # leaves out is said to be, as one that cannot run here is: a run never drops a backend
    # without a word.
    chosen = [b for b in backends if b.applies(name)
              and experiment.configurations(b, lab.quick)]
    skipped.update({b.name: f"not in {name}: {b.left_out(name)}" for b in backends
                    if not b.applies(name)})
    for backend in chosen:
        reason = await asyncio.to_thread(skip_reason, lab, backend)
        if reason is not None:
            skipped[backend.name] = reason
            continue
        plan += [(backend, params) for params in
                 apply(experiment.configurations(backend, lab.quick), overrides, backend,
                       selectors)]
    left = f"skipped {', '.join(skipped)} (see attrs['skipped'])" if skipped else ""
    task = progress.add_task("", total=len(plan) * repeat, name=name, skipped=left)
    failed: dict[str, str] = {}
    servers_used: dict[str, dict[str, str]] = {}
    order = list(dict.fromkeys(b for b, _ in plan))
    for backend in order:
        server = lab.server(backend)
        if server is not None:
            servers_used[backend.name] = {"kind": server.kind, "source": server.source,
                                          "version": server.version}

    async def of(backend: Backend, lab: Lab, rounds: range) -> list[dict[str, Any]]:
        """Every configuration of `backend`, in order, once for each of `rounds`; its failures
        noted in `failed`."""
        found_rows: list[dict[str, Any]] = []
        async with lab.scope():  # what the backend's configurations share, closed after
            for params in (p for b, p in plan if b is backend):
                for r in rounds:
                    shown = ", ".join(f"{k}={v}" for k, v in params.items() if v is not None)
                    progress.update(task, description=f"{backend.name} {shown}")
                    try:
                        found = await experiment.measure(lab, backend, params)
                    except Skipped as why:  # a feature its store lacks: said, not failed
                        skipped[f"{backend.name} {shown}"] = str(why)
                    except Exception as error:
                        key = f"{backend.name} {shown} #{r}"
                        failed[key] = f"{type(error).__name__}: {error}"
                        console.print(f"[red]{name}: {key} failed:[/red] {failed[key]}")
                        console.print("".join(traceback.format_exception(error)[-3:]),
                                      markup=False)
                    else:
                        found_rows += [_stamp(backend, lab, name, params, r, row)
                                       for row in found]
                    progress.advance(task)
        return found_rows

    side_by_side = lab.quick and int(getattr(experiment, "SIDE_BY_SIDE", 1)) > 1
    rows: list[dict[str, Any]] = []
    if side_by_side:
        # A quick run of an experiment whose figures are counts and lease-bound waits (which
        # work beside it barely moves) runs a few backends at once, each on a branch of the
        # lab of its own; the rows still come out in backend order.
        room = asyncio.Semaphore(int(experiment.SIDE_BY_SIDE))

        async def beside(backend: Backend) -> list[dict[str, Any]]:
            async with room:
                return await of(backend, lab.branch(), range(repeat))

        for found in await asyncio.gather(*(beside(backend) for backend in order)):
            rows += found
    else:
        # Repeats go round every backend in turn rather than one backend at a time, so a spell
        # in which the machine runs slower (its speed moves by up to 2x) falls on each backend
        # in one of its repeats, not on all the repeats of a few backends.
        found_by: dict[str, list[dict[str, Any]]] = {backend.name: [] for backend in order}
        for r in range(repeat):
            for backend in order:
                found_by[backend.name] += await of(backend, lab, range(r, r + 1))
        for backend in order:
            rows += found_by[backend.name]
    for backend_name, reason in skipped.items():
        console.print(f"[yellow]{name}: skipped {backend_name}[/yellow]: {reason}")
    meta = {
        "experiment": name,
        "title": experiment.TITLE,
        "about": (experiment.__doc__ or "").strip(),
        "command": command or f"python -m experiments run {name}"
                              + (" --quick" if lab.quick else ""),
        "mode": "quick" if lab.quick else "full",
        "started": began.isoformat(timespec="seconds"),
        "elapsed_seconds": round(time.perf_counter() - clock, 1),
        "git_revision": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--", "durability", "experiments")),
        "cores": os.cpu_count(),
        "machine": platform.platform(),
        "load_average": {"at_start": load, "at_end": os.getloadavg()},
        "cpu_calibration_seconds": {
            "at_start": calibration,
            "at_end": await asyncio.to_thread(cpu_calibration),
            "what": "best of 3 runs of a 5M-step pure-Python loop (lower is faster)",
        },
        "versions": versions(),
        "rival_versions": rivals(),
        "servers": servers_used,
        "backends": [b.name for b in chosen],
        "skipped": skipped,
        "failed": failed,
        "repeat": repeat,
        "side_by_side": int(experiment.SIDE_BY_SIDE) if side_by_side else 1,
        "configurations": [{"backend": b.name, **p} for b, p in plan],
        "overrides": {key: list(values) for key, values in overrides.items()},
        # What a backend of someone's own was, so its rows say what made them.
        "registered": {b.name: described(b) for b in chosen if b.registered},
    }
    if merge and (where / f"{name}.csv").exists():
        rows, meta = _merged(name, where, rows, meta, {b.name for b in chosen}, only)
    if rows or not failed:
        write(name, rows, meta, where)
        if figures and rows:
            try:
                from experiments.readers import figures as drawing

                drawing.draw(name, where)
            except Exception as error:  # a figure that cannot be drawn is a failure too
                failed["figure"] = f"{type(error).__name__}: {error}"
                console.print(f"[red]{name}: the figure failed:[/red] {error}")
    return len(failed)


def _merged(name: str, where: Path, rows: list[dict[str, Any]], meta: dict[str, Any],
            ran: set[str], only: Mapping[str, tuple[Any, ...]] | None = None
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """This run's rows in place of the earlier rows of the backends it ran, the earlier rows of
    every other backend kept; the metadata lists both runs, and which backends each gave.
    With `only` (a selector's values: `{"arm": ("rate",)}`) it replaces only the earlier rows,
    skips and configurations of those backends that hold one of them."""
    import csv

    picked = {key: {str(v) for v in values} for key, values in (only or {}).items()}

    def replaced(backend: str | None, found: Mapping[str, Any]) -> bool:
        return backend in ran and all(str(found.get(k)) in v for k, v in picked.items())

    def skip_replaced(key: str) -> bool:
        """A skip's key is the backend, then its configuration as `k=v, ...` (runner.of)."""
        backend, _, shown = key.partition(" ")
        said = {k: v for k, eq, v in (p.partition("=") for p in shown.split(", ")) if eq}
        return replaced(backend, said) if shown or not picked else False

    with (where / f"{name}.csv").open(newline="") as table:
        earlier = [row for row in csv.DictReader(table) if not replaced(row.get("backend"), row)]
    kept = sorted({row["backend"] for row in earlier})
    before = metadata(name, where)
    runs = before.pop("runs", None) or [{
        key: before.get(key) for key in ("command", "mode", "started", "elapsed_seconds",
                                          "git_revision", "git_dirty", "cpu_calibration_seconds",
                                          "load_average")}]
    for run_ in runs:
        run_["backends"] = [b for b in run_.get("backends", kept) if b in kept]
    this = {key: meta.get(key) for key in ("command", "mode", "started", "elapsed_seconds",
                                            "git_revision", "git_dirty",
                                            "cpu_calibration_seconds", "load_average")}
    this["backends"] = sorted(ran)
    if picked:
        this["only"] = {key: sorted(values) for key, values in picked.items()}
    merged = dict(meta)
    merged["overrides"] = before.get("overrides", {}) if picked else meta.get("overrides", {})
    merged["runs"] = [r for r in runs if r["backends"]] + [this]
    merged["backends"] = sorted(set(kept) | ran)
    merged["servers"] = {**{b: s for b, s in before.get("servers", {}).items() if b in kept},
                         **meta.get("servers", {})}
    merged["skipped"] = {**{b: r for b, r in before.get("skipped", {}).items()
                            if not skip_replaced(b)}, **meta.get("skipped", {})}
    merged["configurations"] = [c for c in before.get("configurations", [])
                                if c.get("backend") in kept and not replaced(c["backend"], c)
                                ] + meta.get("configurations", [])
    return [*_typed(earlier), *rows], merged


def _typed(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """CSV text back to numbers where it is one (so merged rows write as they were read)."""
    out: list[dict[str, Any]] = []
    for row in rows:
        typed: dict[str, Any] = {}
        for key, text in row.items():
            if text == "":
                continue
            try:
                typed[key] = int(text)
            except ValueError:
                try:
                    typed[key] = float(text)
                except ValueError:
                    typed[key] = text
        out.append(typed)
    return out


class LoopRunning(RuntimeError):
    """A synchronous entry point called where an event loop already runs (a notebook)."""


def refuse_inside_a_loop(what: str, instead: str) -> None:
    """Raise `LoopRunning` saying to `instead` if an event loop runs in this thread: running
    another would fail, and leave a task behind whose warnings surface in later cells."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise LoopRunning(f"{what} cannot run inside a running event loop (a notebook's kernel "
                      f"runs one): {instead}")


def main_sync(coroutine: Any) -> int:
    """Run `coroutine` so that Ctrl-C or SIGTERM cancels it (its cleanup runs: agents are
    killed, servers and containers stopped) and the exit status says it was interrupted.
    `LoopRunning` (the coroutine closed unstarted) if an event loop already runs here."""
    import signal

    try:
        refuse_inside_a_loop("the lab's command line", "use `frame = await lab.run(...)` "
                             "after `import experiments as lab`")
    except LoopRunning:
        coroutine.close()
        raise
    loop = asyncio.new_event_loop()
    task = loop.create_task(coroutine)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return int(loop.run_until_complete(task) or 0)
    except asyncio.CancelledError:
        print("interrupted: everything the run started has been stopped", file=sys.stderr)
        return 130
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
