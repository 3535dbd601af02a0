"""The lab from Python, for a notebook or a script:

    import experiments as lab
    frame = await lab.run("latency", backends=["memory", "sqlite"], quick=True, rate=[5, 20])
    lab.use(frame.attrs["where"])     # the readers (lab.table, lab.figure...) read that run

`run` is the command line's `run` as a coroutine that returns the rows; `run_sync` the same for
a script, refusing (rather than failing halfway) where a loop already runs. A run writes to a
folder of its own; the reference in `results/` only with `reference=True`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.catalogue import EXPERIMENTS
from experiments.refusals import BadInput
from experiments.results import RESULTS, modes

if TYPE_CHECKING:
    import pandas

__all__ = ["conformance", "found", "parameters", "register", "run", "run_sync", "use", "where"]

ROOT = Path(__file__).resolve().parent.parent


def _names(names: str | Sequence[str] | None) -> list[str]:
    if names is None:
        return list(EXPERIMENTS)
    listed = names.split(",") if isinstance(names, str) else list(names)
    chosen = [n.strip() for n in listed if n.strip()]
    unknown = [n for n in chosen if n not in EXPERIMENTS]
    if unknown or not chosen:
        raise BadInput(f"no experiment {', '.join(map(repr, unknown)) or 'named'}; choose "
                       f"from {', '.join(EXPERIMENTS)}")
    return chosen


def _backends(backends: str | Sequence[str] | None) -> list[Any]:
    from experiments.harness.backends import select

    if isinstance(backends, str):
        backends = [b.strip() for b in backends.split(",") if b.strip()]
    return select(None if backends is None else list(backends))


def found(backends: str | Sequence[str] | None = None, *,
          sources: Sequence[str] = ("url", "port")) -> list[str]:
    """The backends named (all by default; names or `prefix*`) that can run here now: those
    needing no server, and those whose server answers where `sources` look (by default the
    URLs in the environment and the local ports, which start nothing). A rival needs its
    virtualenv too."""
    import shutil

    from experiments.commands.runner import skip_reason
    from experiments.harness.lab import Lab
    from experiments.harness.servers import Servers

    picked = _backends(backends)
    with Servers(tuple(sources)) as servers:
        lab = Lab(servers, quick=True)
        try:
            return [b.name for b in picked if skip_reason(lab, b) is None]
        finally:
            shutil.rmtree(lab.scratch, ignore_errors=True)


def register(name: str, opener: str | Callable[..., Any], **options: Any) -> Any:
    """Add backend `name` (a scheduler or a whole store of your own, opened by `opener`, its
    import path `"package.module:name"`) to every experiment, table and figure; see
    `experiments.harness.registry.register` for `like=`, `store=` and the rest. Returns the
    backend."""
    from experiments.harness import registry

    return registry.register(name, opener, **options)


def conformance(backend: str, **options: Any) -> Any:
    """Run the store conformance suite on `backend` (registered or ours) in a pytest of its
    own and return what it found (`experiments.conforming.check.Conformance`: true when nothing
    failed, shown as a table in a notebook), a bar showing the tests done as it goes;
    `select=` runs part of it (a pytest `-k`)."""
    from rich.console import Console

    from experiments.commands.progress import bars
    from experiments.conforming.check import check

    with bars(Console()) as progress:
        task: list[Any] = []
        told = [0]

        def seen(done: int, total: int) -> None:
            if not task:
                task.append(progress.add_task("", total=total, name="conformance",
                                              skipped=""))
            if done > told[0]:
                progress.advance(task[0], done - told[0])
                told[0] = done

        return check(backend, progress=seen, **options)


def parameters(name: str) -> dict[str, str]:
    """What `run(name, ...)` can be given for experiment `name`, each with its meaning or the
    values its configurations use."""
    from experiments.commands.overrides import allowed
    from experiments.commands.runner import module

    experiment = module(name)
    settings: dict[str, str] = getattr(experiment, "SETTINGS", {})
    found: dict[str, str] = {}
    for key, values in allowed(experiment).items():
        listed = ", ".join(map(str, values))
        if key in settings:
            found[key] = f"{settings[key]}: a positive number"
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            found[key] = f"a positive number or a list of them (the lab's: {listed})"
        else:
            found[key] = f"one of {listed}, or a list of them"
    return found


async def run(
    names: str | Sequence[str] | None = None,
    *,
    backends: str | Sequence[str] | None = None,
    quick: bool = False,
    repeat: int = 1,
    sources: Sequence[str] | None = None,
    where: str | Path | None = None,
    reference: bool = False,
    figures: bool = True,
    merge: bool = False,
    **overrides: Any,
) -> pandas.DataFrame:
    """Run experiments `names` (one, a list, or all) on `backends` (names, `prefix*`
    patterns; all by default) and return their rows, one observation each, as a frame whose
    `attrs` say `where` they were written and what `failed` or was `skipped`.

    Any other keyword overrides a parameter of the experiments that have it, given one value
    or a list (`rate=[5, 20]`, `lease_s=1`, `seconds=3`: see `parameters(name)`); the rows
    carry the values used. Results go to `where`, a new folder under `runs/` by default;
    `reference=True` writes the reference in `results/`, refused (`results.Refused`) if that
    would mix a quick run with full ones.

    An interrupt (Ctrl-C, the kernel's interrupt) cancels the run, whose cleanup stops every
    process and server it started, then raises `KeyboardInterrupt` here, so nothing is left
    pending."""
    from experiments.commands import runner
    from experiments.commands.overrides import check

    chosen = _names(names)
    picked = _backends(backends)
    if repeat < 1:
        raise BadInput("repeat must be at least 1")
    changed = check([runner.module(n) for n in chosen], overrides)
    folder = _place(where, reference, chosen, quick)
    shown = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
    command = (f"lab.run({chosen!r}, backends={[b.name for b in picked]!r}, quick={quick}"
               + (f", {shown}" if shown else "") + ")")
    # A backend of someone's own is part of what makes the rows again (the metadata's
    # `registered` says the rest of it).
    command = "".join(f"lab.register({b.name!r}, {b.opener!r}"
                      + (f", like={b.like!r}" if b.like else "") + "); "
                      for b in picked if b.registered) + command
    work = asyncio.ensure_future(runner.run(
        chosen, picked, quick=quick, repeat=repeat,
        sources=tuple(sources) if sources else None, where=folder, figures=figures,
        command=command, merge=merge, reference=reference, overrides=changed))
    interrupted: list[bool] = []

    def interrupt() -> None:
        interrupted.append(True)
        work.cancel()

    with _interrupts(interrupt):
        try:
            await work
        except asyncio.CancelledError:
            if not interrupted:
                raise
            raise KeyboardInterrupt("the run was interrupted; everything it started has been"
                                    " stopped") from None
    return _rows(chosen, folder)


def run_sync(names: str | Sequence[str] | None = None, **options: Any) -> pandas.DataFrame:
    """`run` for a script (no event loop running); in a notebook, `await lab.run(...)`."""
    from experiments.commands.runner import refuse_inside_a_loop

    refuse_inside_a_loop("lab.run_sync", "write `frame = await lab.run(...)` instead")
    return asyncio.run(run(names, **options))


def _place(where: str | Path | None, reference: bool, names: Sequence[str], quick: bool
           ) -> Path:
    from experiments.results import is_reference, scratch

    if where is None:
        return RESULTS if reference else scratch(names, "quick" if quick else "full")
    folder = Path(where).expanduser().resolve()
    if reference and not is_reference(folder):
        raise BadInput(f"reference=True writes {RESULTS}; where={where!r} names another "
                       "folder: give one or the other")
    return folder


def _rows(names: Sequence[str], folder: Path) -> pandas.DataFrame:
    import pandas

    from experiments.results import load, metadata

    frames, failed, skipped = [], {}, {}
    for name in names:
        if (folder / f"{name}.json").exists():
            meta = metadata(name, folder)
            failed.update({f"{name}: {k}": v for k, v in meta.get("failed", {}).items()})
            skipped.update({f"{name}: {k}": v for k, v in meta.get("skipped", {}).items()})
        if (folder / f"{name}.csv").exists():
            frames.append(load(name, folder))
    frame = pandas.concat(frames, ignore_index=True) if frames else pandas.DataFrame()
    frame.attrs.update(where=folder, failed=failed, skipped=skipped)
    return frame


@contextlib.contextmanager
def _interrupts(then: Callable[[], None]) -> Iterator[None]:
    """SIGINT calls `then` (on the running loop) inside the block, and whatever handled it
    before handles it again after. Where the loop cannot take a signal (not the main
    thread, not Unix), SIGINT stays as it was: a KeyboardInterrupt, which still unwinds."""
    loop = asyncio.get_running_loop()
    before = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, then)
    except (NotImplementedError, RuntimeError, ValueError):
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, before)


def use(run: str | Path | None = None) -> Path:
    """Point the readers (`table`, `figure`, `frame`, `overview`, the notebooks) at `run`: a
    folder of results (relative to the working directory or the checkout), `"latest"` (the
    newest under `runs/`), or None for the default (the reference run in `results/`, or what
    `LAB_RESULTS` names); return the folder. A folder holding no results is a `ValueError`."""
    from experiments.readers import reading
    from experiments.results import find

    folder = reading.DEFAULT if run is None else find(run)
    if not modes(folder):
        raise BadInput(f"{folder} holds no results (no <experiment>.json)")
    reading.WHERE = folder
    return folder


def where() -> Path:
    """The folder the readers read now."""
    from experiments.readers import reading

    return reading.WHERE
