"""`python -m experiments`: the lab's command line (see `experiments/__init__.py`)."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from experiments.catalogue import EXPERIMENTS
from experiments.harness.backends import BACKENDS, select
from experiments.harness.servers import KINDS, SOURCES
from experiments.results import RESULTS, SCRATCH


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments",
                                     description="compare every scheduler, side by side")
    commands = parser.add_subparsers(dest="command", required=True)
    where = (f"written to a new folder of the run's own under {_shown(SCRATCH)}/ (LAB_RUNS "
             f"moves it) unless --results or --reference says otherwise")
    run = commands.add_parser(
        "run", help="run experiments; " + where,
        description=f"Run experiments. Results are {where}; the reference run in "
        f"{_shown(RESULTS)}/ is replaced only with --reference (or --results {_shown(RESULTS)}"
        " --force), and never by a run of another mode than what it holds (quick beside full).")
    run.add_argument("names", nargs="*", metavar="NAME",
                     help=f"experiments to run (default: all of {', '.join(EXPERIMENTS)})")
    run.add_argument("--backends", help="comma-separated backends (prefix* allowed); default all:"
                     f" {', '.join(BACKENDS)}")
    run.add_argument("--quick", action="store_true", help="short runs, fewer configurations")
    run.add_argument("--repeat", type=int, default=1,
                     help="run each configuration N times, going round every backend per repeat")
    run.add_argument("--sources", help=f"where servers may come from, in order (default "
                     f"{','.join(SOURCES)}; e.g. container,binary for private servers only)")
    _destination(run, "the folder to write",
                 "refused if it would mix a quick run with the full ones there")
    run.add_argument("--set", action="append", default=[], metavar="NAME=VALUE[,VALUE]",
                     help="override a parameter of the experiments that have it (rate=5,20;"
                     " lease_s=1; seconds=3); repeat for several")
    run.add_argument("--register", action="append", default=[],
                     metavar="NAME=MODULE:OPENER[?like=BACKEND&...]",
                     help="add a backend of your own, opened by OPENER (open_durable's "
                     "signature), in the place of ours LIKE gives; repeat for several")
    run.add_argument("--no-figures", action="store_true", help="write no figures")
    run.add_argument("--merge", action="store_true",
                     help="replace only these backends' rows in existing results (the metadata"
                     " then lists each run and the backends it gave)")
    chaos = commands.add_parser(
        "chaos", help="kill workers, cut connections, restart servers under load; audit; "
        "exit 1 on any loss")
    chaos.add_argument("--quick", action="store_true", help="the quick profile (a minute or so"
                       " per store)")
    chaos.add_argument("--profile", choices=("ci", "quick", "full"),
                       help="how big (default full; --quick is --profile quick)")
    chaos.add_argument("--backends", help="comma-separated: redis-stream, redis-set, postgres,"
                       " sqlite, or one Redis persistence (redis-set/none); default all")
    chaos.add_argument("--workflows", type=int, help="override the profile's workflow count")
    _destination(chaos, "the folder to write chaos.csv/json",
                 "a full profile only, if full runs are there")
    chaos.add_argument("--merge", action="store_true", help="keep the earlier results of the "
                       "configurations this run does not give")
    soak = commands.add_parser(
        "soak", help="one worker per store, steady arrivals and a fault a minute for an hour;"
        " sample its RSS, descriptors, connections and queue length")
    soak.add_argument("--minutes", type=float, default=60.0, help="how long (default 60)")
    soak.add_argument("--backends", default="redis-stream,redis-set,postgres,sqlite",
                      help="comma-separated, run side by side (default all four)")
    soak.add_argument("--rate", type=float, default=50.0, help="workflows a second (default 50)")
    soak.add_argument("--fault-every", type=float, default=60.0,
                      help="seconds between faults (default 60)")
    soak.add_argument("--sample-every", type=float, default=5.0,
                      help="seconds between samples (default 5)")
    _destination(soak, "the folder to write soak.csv/json",
                 "an hour or more only, if hour-long runs are there")
    soak.add_argument("--no-figures", action="store_true", help="draw no figure")
    report = commands.add_parser("report", help="print the comparison tables from results/")
    report.add_argument("names", nargs="*", metavar="NAME",
                        help=f"which experiments (default: all of {', '.join(EXPERIMENTS)})")
    report.add_argument("--results", default=str(RESULTS),
                        help=f"the run's folder (default: the reference, {_shown(RESULTS)}/)")
    report.add_argument("--width", type=int, default=120,
                        help="the widest a table may be, in columns (default 120)")
    report.add_argument("--figures", action="store_true",
                        help="also draw each experiment's figure again from its rows")
    drawing = commands.add_parser("figures", help="draw a run's figures again from its rows,"
                                  " running nothing")
    drawing.add_argument("names", nargs="*", metavar="NAME", help="which figures (default: every"
                         " one whose results are in the folder)")
    drawing.add_argument("--results", default=str(RESULTS),
                         help=f"the run's folder (default {_shown(RESULTS)}/)")
    said = commands.add_parser("findings", help="print the README's findings, their numbers "
                               "and intervals computed from a run's rows, as Markdown")
    said.add_argument("names", nargs="*", metavar="NAME", help="which sections (default: all of"
                      " ratios, idle, growth, wakeups, scaling, design)")
    said.add_argument("--results", default=str(RESULTS),
                      help=f"the run's folder (default: the reference, {_shown(RESULTS)}/)")
    found = commands.add_parser("backends", help="what was found, how, and why not")
    found.add_argument("--sources", help="as for run")
    commands.add_parser("images", help="build local container images (Debian archive)")
    commands.add_parser("rivals", help="make the rivals' virtualenv (.venv-rivals)")
    books = commands.add_parser("notebooks", help="write notebooks/ and execute them on results/")
    books.add_argument("names", nargs="*", help="which notebooks (default: all)")
    books.add_argument("--results", help="execute them on this run's folder instead, and write "
                       "them into its notebooks/ (the committed ones stay on the reference)")
    books = commands.add_parser("workbooks", help="write the notebooks that run experiments "
                                "(your-own-scheduler, run-your-own) and execute them")
    books.add_argument("names", nargs="*", help="which (default: both)")
    return parser


def _shown(path: Path) -> str:
    """`path` relative to the working directory where it is under it (help reads shorter)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _destination(parser: argparse.ArgumentParser, what: str, reference_rule: str) -> None:
    """--results / --reference / --force, as every command that writes results takes them
    (`_where` reads them)."""
    parser.add_argument("--results", help=f"{what} (default: a new one under {_shown(SCRATCH)}/)")
    parser.add_argument("--reference", action="store_true",
                        help=f"write the reference in {_shown(RESULTS)}/ ({reference_rule})")
    parser.add_argument("--force", action="store_true",
                        help=f"let --results name the reference folder {_shown(RESULTS)}/")


def _where(args: argparse.Namespace, names: list[str], mode: str) -> Path:
    """The folder a run writes, from --results / --reference / --force; `Refused` (before
    anything starts) where that would overwrite or mix what it should not."""
    from experiments.results import Refused, guard, is_reference, scratch

    if args.reference and args.results and not is_reference(Path(args.results)):
        raise Refused(f"--reference writes {_shown(RESULTS)}/; --results {args.results} names"
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
        print(f"writing to {_shown(where)}/", file=sys.stderr)
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


def _sources(text: str | None) -> tuple[str, ...] | None:
    if not text:
        return None
    return tuple(s.strip() for s in text.split(",") if s.strip())


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "chaos":
        return _chaos(args)
    if args.command == "soak":
        return _soak(args)
    if args.command == "report":
        from experiments.readers.report import report

        unknown = [n for n in args.names if n not in EXPERIMENTS]
        if unknown:
            print(f"unknown experiment(s) {unknown}; choose from {', '.join(EXPERIMENTS)}",
                  file=sys.stderr)
            return 2
        names = args.names or list(EXPERIMENTS)
        print(report(Path(args.results), names, width=args.width))
        if args.figures:
            from experiments.readers.figures import draw

            for name in names:
                if (Path(args.results) / f"{name}.csv").exists():
                    print(f"drew {draw(name, Path(args.results))}")
        return 0
    if args.command == "figures":
        from experiments.readers.figures import redraw

        return _listed("drew", lambda: redraw(Path(args.results), args.names))
    if args.command == "findings":
        from experiments.readers.findings import findings

        try:
            print(findings(Path(args.results).resolve(), args.names))
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
        return 0
    if args.command == "backends":
        return _backends(_sources(args.sources))
    if args.command == "images":
        from experiments.harness.containers import build_images

        print("built:", ", ".join(build_images()) or "nothing (all present)")
        return 0
    if args.command == "rivals":
        return make_rivals_venv()
    if args.command == "notebooks":
        from experiments.writing.notebooks import HERE, build

        run = str(Path(args.results).resolve()) if args.results else None
        return _listed("wrote", lambda: build(args.names or None, run=run,
                                              where=Path(run) / "notebooks" if run else HERE))
    if args.command == "workbooks":
        from experiments.writing import workbooks

        return _listed("wrote", lambda: workbooks.build(args.names or None))
    return 2


def _listed(verb: str, make: Callable[[], list[Path]]) -> int:
    """What figures, notebooks and workbooks do with the files `make()` writes: each named on a
    line after `verb`, exit 0; or its `ValueError` (a name it does not know) said, exit 2."""
    try:
        made = make()
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    for path in made:
        print(f"{verb} {_shown(path)}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from experiments.commands.overrides import check
    from experiments.commands.runner import module, run
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
        overrides = check([module(n) for n in names], _settings(args.set))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2

    def said(where: Path, failures: int) -> int:
        print(report(where, names))
        print(f"results in {_shown(where)}/; in a notebook: "
              f"lab.use({_shown(where)!r})" + ("" if args.reference else
                                              " (the reference in results/ is untouched)"))
        if failures:
            print(f"{failures} configuration(s) failed: see the messages above and "
                  f"{_shown(where)}/<experiment>.json", file=sys.stderr)
            return 1
        return 0

    return _write(args, names, "quick" if args.quick else "full",
                  lambda where, command: run(
                      names, chosen, quick=args.quick, repeat=args.repeat,
                      sources=_sources(args.sources), where=where, figures=not args.no_figures,
                      command=command, merge=args.merge, reference=args.reference or args.force,
                      overrides=overrides),
                  said, announce=False)


def _chaos(args: argparse.Namespace) -> int:
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
                  f"{_shown(where)}/chaos.json", file=sys.stderr)
            return 1
        return 0

    return _write(args, [NAME], profile.name,
                  lambda where, command: main_async(profile, names, where, command, args.merge),
                  said)


def _soak(args: argparse.Namespace) -> int:
    from experiments.faults.soak import STORES, Settings, soak
    from experiments.readers.figures import draw
    from experiments.readers.summaries.soak import table
    from experiments.results import metadata

    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [n for n in names if n not in STORES]
    if unknown or not names or len(set(names)) != len(names):
        print(f"--backends takes distinct names from {', '.join(STORES)}; got {args.backends!r}",
              file=sys.stderr)
        return 2
    for option, value in (("--minutes", args.minutes), ("--rate", args.rate),
                          ("--fault-every", args.fault_every),
                          ("--sample-every", args.sample_every)):
        if not value > 0:
            print(f"{option} must be positive, not {value:g}", file=sys.stderr)
            return 2
    settings = Settings(minutes=args.minutes, rate=args.rate, fault_every_s=args.fault_every,
                        sample_s=args.sample_every)

    def said(where: Path, bad: int) -> int:
        print(table(metadata("soak", where)))
        if not args.no_figures:
            print(f"drew {draw('soak', where)}")
        return 1 if bad else 0

    return _write(args, ["soak"], "quick" if settings.minutes < 60 else "full",
                  lambda where, command: soak(settings, names, where=where, command=command),
                  said)


def _backends(sources: tuple[str, ...] | None) -> int:
    from experiments.harness.lab import rivals_python
    from experiments.harness.servers import Servers

    with Servers(sources) if sources else Servers() as servers:
        for kind in KINDS:
            server = servers.get(kind)
            if server is None:
                print(f"{kind:<9} missing")
                for reason in servers.reasons.get(kind, []):
                    print(f"{'':<11}{reason}")
            else:
                print(f"{kind:<9} {server.source}: version {server.version}"
                      f"{' (private)' if server.private else ' (shared)'}")
        print()
        rivals = rivals_python()
        for backend in BACKENDS.values():
            need = backend.server
            if backend.rival is not None and rivals is None:
                state = "skipped: the rivals' virtualenv is missing (python -m experiments rivals)"
            elif need is None or servers.get(need) is not None:
                state = "ready"
            else:
                state = f"skipped: no {need} server"
            print(f"{backend.name:<22} {state}")
    return 0


def make_rivals_venv(timeout: float | None = None) -> int:
    """Create `.venv-rivals` with the rival queues (their drivers conflict with ours), or
    bring it up to `RIVALS`; a no-op when it already holds them. `timeout` bounds the pip run
    (seconds); the exit status is pip's (1 on a timeout)."""
    import hashlib
    import venv

    from experiments.harness.lab import RIVALS, RIVALS_VENV

    python = RIVALS_VENV / "bin" / "python"
    stamp = RIVALS_VENV / ".installed"
    wanted = hashlib.sha256("\n".join(RIVALS).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return 0
    if not python.exists():
        print(f"creating {RIVALS_VENV.name}/", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(RIVALS_VENV)
    try:
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", *RIVALS], timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"pip did not finish in {timeout:g} s", file=sys.stderr)
        return 1
    if done.returncode == 0:
        stamp.write_text(wanted)  # written last: a half-made virtualenv is made again
    return done.returncode

if __name__ == "__main__":
    sys.exit(main())
