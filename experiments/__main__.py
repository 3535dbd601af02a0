"""`python -m experiments <command>`, the lab's command line: every command and its options
(`_parser`), and `main`, which hands each to what does it: `run`, `chaos` and `soak` to
`commands/runs.py`, `backends` and `rivals` to `commands/machine.py`, the readers' commands
(`report`, `figures`, `findings`) to `readers/`, `notebooks` and `workbooks` to `writing/`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from experiments.catalogue import EXPERIMENTS
from experiments.commands import machine, runs
from experiments.commands.runs import shown
from experiments.harness.backends import BACKENDS
from experiments.harness.servers import SOURCES
from experiments.results import RESULTS, SCRATCH

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments",
                                     description="compare every scheduler, side by side")
    commands = parser.add_subparsers(dest="command", required=True)
    where = (f"written to a new folder of the run's own under {shown(SCRATCH)}/ (LAB_RUNS "
             f"moves it) unless --results or --reference says otherwise")
    run = commands.add_parser(
        "run", help="run experiments; " + where,
        description=f"Run experiments. Results are {where}; the reference run in "
        f"{shown(RESULTS)}/ is replaced only with --reference (or --results {shown(RESULTS)}"
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
                       " sqlite, redis-stream-cluster, or one configuration (redis-set/none,"
                       " redis-stream-cluster/wait); default all")
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
                        help=f"the run's folder (default: the reference, {shown(RESULTS)}/)")
    report.add_argument("--width", type=int, default=120,
                        help="the widest a table may be, in columns (default 120)")
    report.add_argument("--figures", action="store_true",
                        help="also draw each experiment's figure again from its rows")
    drawing = commands.add_parser("figures", help="draw a run's figures again from its rows,"
                                  " running nothing")
    drawing.add_argument("names", nargs="*", metavar="NAME", help="which figures (default: every"
                         " one whose results are in the folder)")
    drawing.add_argument("--results", default=str(RESULTS),
                         help=f"the run's folder (default {shown(RESULTS)}/)")
    said = commands.add_parser("findings", help="print the findings page's paragraphs, their "
                               "numbers and intervals computed from a run's rows, as Markdown")
    said.add_argument("names", nargs="*", metavar="NAME", help="which sections (default: all of"
                      " ratios, idle, growth, wakeups, scaling, design)")
    said.add_argument("--results", default=str(RESULTS),
                      help=f"the run's folder (default: the reference, {shown(RESULTS)}/)")
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


def _destination(parser: argparse.ArgumentParser, what: str, reference_rule: str) -> None:
    """--results / --reference / --force, as every command that writes results takes them
    (`commands/runs.py` reads them)."""
    parser.add_argument("--results", help=f"{what} (default: a new one under {shown(SCRATCH)}/)")
    parser.add_argument("--reference", action="store_true",
                        help=f"write the reference in {shown(RESULTS)}/ ({reference_rule})")
    parser.add_argument("--force", action="store_true",
                        help=f"let --results name the reference folder {shown(RESULTS)}/")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "run":
        return runs.run(args)
    if args.command == "chaos":
        return runs.chaos(args)
    if args.command == "soak":
        return runs.soak(args)
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
        return machine.backends(runs.sources(args.sources))
    if args.command == "images":
        from experiments.harness.containers import build_images

        print("built:", ", ".join(build_images()) or "nothing (all present)")
        return 0
    if args.command == "rivals":
        return machine.make_rivals_venv()
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
        print(f"{verb} {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
