"""`run`, `chaos` and `soak` from the command line: the folder each writes (`--results`,
`--reference`, `--force`; refused before anything starts where it would overwrite or mix what
it should not), the command line kept in its metadata, and the exit status it ends with.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from experiments.catalogue import EXPERIMENTS
from experiments.harness.backends import select
from experiments.results import RESULTS

__all__ = ["chaos", "run", "shown", "soak", "sources"]


def shown(path: Path) -> str:
    """`path` relative to the working directory where it is under it (help reads shorter)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _where(args: argparse.Namespace, names: list[str], mode: str) -> Path:
    """The folder a run writes, from --results / --reference / --force; `Refused` (before
    anything starts) where that would overwrite or mix what it should not."""
    from experiments.results import Refused, guard, is_reference, scratch

    if args.reference and args.results and not is_reference(Path(args.results)):
        raise Refused(f"--reference writes {shown(RESULTS)}/; --results {args.results} names"
                      " another folder: give one or the other")
    where = RESULTS if args.reference else Path(args.results) if args.results else None
    where = where if where is not None else scratch(names, mode)
    guard(where, names, mode, reference=args.reference or args.force,
          merge=getattr(args, "merge", False))
    return where


def _write(args: argparse.Namespace, names: list[str], mode: str,
           start: Callable[[Path, str], Coroutine[Any, Any, int]],
           said: Callable[[Path, int], int], *, announce: bool = True) -> int:
    """What run, chaos and soak do around their run: the folder (`_where`; refused with exit 2
    before anything starts), the command line for the metadata, the run `start(where, command)`
    (130 if it was interrupted), then `said(where, failures)` reports and gives the exit status."""
    from experiments.commands.runner import main_sync
    from experiments.results import Refused

    try:
        where = _where(args, names, mode)
    except Refused as error:
        print(error, file=sys.stderr)
        return 2
    if announce:  # `run` says where itself, as it does when called from a notebook
        print(f"writing to {shown(where)}/", file=sys.stderr)
    command = "python -m experiments " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    failures = main_sync(start(where, command))
    if failures == 130:
        return 130
    return said(where, failures)


def _settings(given: list[str]) -> dict[str, Any]:
    """`--set rate=5,20 --set phase=mid-step` as {"rate": [5, 20], "phase": ["mid-step"]}."""
    found: dict[str, Any] = {}
    for text in given:
        name, equals, values = text.partition("=")
        if not equals or not name.strip() or not values.strip():
            raise ValueError(f"--set {text!r}: write NAME=VALUE or NAME=VALUE,VALUE")
        found[name.strip()] = [_value(v.strip()) for v in values.split(",") if v.strip()]
    return found


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def sources(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(s.strip() for s in text.split(",") if s.strip())


def run(args: argparse.Namespace) -> int:
    from experiments.commands import runner
    from experiments.commands.overrides import check
    from experiments.readers.report import report

    names = args.names or list(EXPERIMENTS)
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        print(f"unknown experiment(s) {unknown}; choose from {', '.join(EXPERIMENTS)}",
              file=sys.stderr)
        return 2
    try:
        from experiments.harness.registry import parse, register

        for text in args.register:
            name, given = parse(text)
            register(name, given.pop("opener"), **given)
        chosen = select(None if not args.backends else [b.strip() for b in
                                                         args.backends.split(",") if b.strip()])
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    if args.repeat < 1:
        print("--repeat must be at least 1", file=sys.stderr)
        return 2
    try:
        overrides = check([runner.module(n) for n in names], _settings(args.set))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2

    def said(where: Path, failures: int) -> int:
        print(report(where, names))
        print(f"results in {shown(where)}/; in a notebook: "
              f"lab.use({shown(where)!r})" + ("" if args.reference else
                                              " (the reference in results/ is untouched)"))
        if failures:
            print(f"{failures} configuration(s) failed: see the messages above and "
                  f"{shown(where)}/<experiment>.json", file=sys.stderr)
            return 1
        return 0

    return _write(args, names, "quick" if args.quick else "full",
                  lambda where, command: runner.run(
                      names, chosen, quick=args.quick, repeat=args.repeat,
                      sources=sources(args.sources), where=where, figures=not args.no_figures,
                      command=command, merge=args.merge, reference=args.reference or args.force,
                      overrides=overrides),
                  said, announce=False)


def chaos(args: argparse.Namespace) -> int:
    import dataclasses

    from experiments.faults.chaos import CONFIGURATIONS, NAME, PROFILES, main_async

    profile = PROFILES[args.profile or ("quick" if args.quick else "full")]
    if args.workflows is not None:
        if args.workflows < 1:
            print("--workflows must be at least 1", file=sys.stderr)
            return 2
        profile = dataclasses.replace(profile, workflows=args.workflows)
    names = None
    if args.backends:
        names = [b.strip() for b in args.backends.split(",") if b.strip()]
        known = {b for b, _ in CONFIGURATIONS} | {f"{b}/{p}" for b, p in CONFIGURATIONS
                                                   if p != "-"}
        unknown = [n for n in names if n not in known]
        if unknown:
            print(f"no chaos run for {unknown}; choose from {', '.join(sorted(known))}",
                  file=sys.stderr)
            return 2

    def said(where: Path, failures: int) -> int:
        if failures:
            print(f"{failures} chaos configuration(s) lost something: see the lines above and "
                  f"{shown(where)}/chaos.json", file=sys.stderr)
            return 1
        return 0

    return _write(args, [NAME], profile.name,
                  lambda where, command: main_async(profile, names, where, command, args.merge),
                  said)


def soak(args: argparse.Namespace) -> int:
    from experiments.faults import soak as soaking
    from experiments.readers.figures import draw
    from experiments.readers.summaries.soak import table
    from experiments.results import metadata

    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [n for n in names if n not in soaking.STORES]
    if unknown or not names or len(set(names)) != len(names):
        print(f"--backends takes distinct names from {', '.join(soaking.STORES)}; got "
              f"{args.backends!r}", file=sys.stderr)
        return 2
    for option, value in (("--minutes", args.minutes), ("--rate", args.rate),
                          ("--fault-every", args.fault_every),
                          ("--sample-every", args.sample_every)):
        if not value > 0:
            print(f"{option} must be positive, not {value:g}", file=sys.stderr)
            return 2
    settings = soaking.Settings(minutes=args.minutes, rate=args.rate,
                                fault_every_s=args.fault_every, sample_s=args.sample_every)

    def said(where: Path, bad: int) -> int:
        print(table(metadata("soak", where)))
        if not args.no_figures:
            print(f"drew {draw('soak', where)}")
        return 1 if bad else 0

    return _write(args, ["soak"], "quick" if settings.minutes < 60 else "full",
                  lambda where, command: soaking.soak(settings, names, where=where,
                                                      command=command),
                  said)
