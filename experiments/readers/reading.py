"""What a notebook needs from `results/`, so a notebook is a few cells of reading, not wrangling.

    from experiments.readers.reading import figure, overview, run_line, say, table

The readers read one run's folder, `WHERE`: the reference run in `results/` unless
`LAB_RESULTS` names another, or `experiments.use(path)` (a notebook's first cell) points them
elsewhere; `reads()` says which, as a notebook's first line. `table(name)` is an experiment's
summary, `figure(name)` its figure, `run_line(name)` the run and command behind its rows,
`say(text)` a sentence shown as Markdown, `overview()` every scheduler against every measure.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
from pathlib import Path
from typing import Any

from experiments.catalogue import EXPERIMENTS, module_name
from experiments.refusals import BadInput
from experiments.results import RESULTS, find, is_reference, load, metadata, modes, runs

__all__ = ["DEFAULT", "READABLE", "Said", "blank", "compare", "figure", "frame", "ms", "overview",
           "pick", "prose", "reads", "resampled", "run_line", "say", "shown", "summary", "table",
           "times", "versus"]

#: Where notebooks read from unless told (`experiments.use`): the committed reference run, or
#: the folder `LAB_RESULTS` names (a quick run of your own, say).
DEFAULT = Path(os.environ.get("LAB_RESULTS") or RESULTS).resolve()
WHERE = DEFAULT
#: What the readers read: every experiment, and the soak (a fault run with a summary).
READABLE = (*EXPERIMENTS, "soak")
#: CPU calibrations further apart than this factor, in the runs behind one page, are flagged:
#: a number measured on a machine twice as slow is not the other's.
APART = 1.5


class Said:
    """Markdown a notebook shows as such, and a console or a script as plain text."""

    def __init__(self, markdown: str) -> None:
        self.markdown = markdown

    def _repr_markdown_(self) -> str:
        return self.markdown

    @property
    def data(self) -> str:
        """The Markdown, by the name IPython's `Markdown` gives it."""
        return self.markdown

    def __repr__(self) -> str:
        return self.markdown.replace("**", "").replace("`", "").replace("*", "")

    __str__ = __repr__


def _place(where: str | Path | None) -> Path:
    """The folder a reader reads: `WHERE`, or `where` found as `experiments.use` finds one
    (a string or a path, relative to the working directory or the checkout, or "latest")."""
    return WHERE if where is None else find(where)


def _named(name: str) -> str:
    if name not in READABLE:
        raise BadInput(f"no experiment {name!r}; choose from {', '.join(READABLE)}")
    return name


def _readable() -> None:
    """Tables shown whole: a cell of prose is not cut at 50 characters, nor a wide table
    folded into pieces."""
    try:
        import pandas
    except ImportError:  # the lab extra is not installed: nothing to show tables with
        return
    pandas.set_option("display.max_colwidth", None)
    pandas.set_option("display.width", 200)
    pandas.set_option("display.max_columns", 30)


_readable()


def blank(data: Any) -> Any:
    """`data` for reading: numbers as the report shows them (`tables.number`: 1,262 and
    18,270, 25.5, 0.944, 0.00028), missing cells empty rather than NaN."""
    from experiments.readers.tables import number

    return data.map(lambda value: value if isinstance(value, str) else number(value))


def frame(name: str, where: str | Path | None = None) -> Any:
    """An experiment's rows (one observation each), each with the `run` that made it; read
    once per version of its file."""
    return _rows(*_version(name, where)).copy()


def table(name: str, where: str | Path | None = None) -> Any:
    """An experiment's summary, shown as a reader needs it (`tables.readable`: the columns
    that answer, units in the headers, blank where a value does not apply) and computing as
    `summary` does, every column there."""
    from experiments.readers.tables import readable

    return readable(summary(name, where), name)


def summary(name: str, where: str | Path | None = None) -> Any:
    """An experiment's summary, every column (each statistic's interval as `_lo`, `_hi`),
    backends in the tables' order; computed once per version of its rows (the intervals in
    it take a moment)."""
    return _summary(*_version(name, where)).copy()


def _version(name: str, where: str | Path | None) -> tuple[str, Path, int]:
    """What the caches below are keyed by: the experiment, its folder, and when its rows and
    their metadata were last written (a new run there is read anew)."""
    folder = _place(where).resolve()
    stamps = [(folder / f"{_named(name)}{end}") for end in (".csv", ".json")]
    return name, folder, sum(p.stat().st_mtime_ns for p in stamps if p.exists())


@functools.lru_cache(maxsize=16)
def _rows(name: str, where: Path, stamp: int) -> Any:
    return load(name, where)


@functools.lru_cache(maxsize=32)
def _summary(name: str, where: Path, stamp: int) -> Any:
    from experiments.readers.figures import in_order

    module = importlib.import_module(f"experiments.readers.summaries.{module_name(name)}")
    return in_order(module.summary(in_order(_rows(name, where, stamp)))).reset_index(drop=True)


@functools.lru_cache(maxsize=32)
def _views(name: str, where: Path, stamp: int) -> Any:
    from experiments.readers.tables import views

    return views(name, _rows(name, where, stamp), _summary(name, where, stamp))


def shown(name: str, *which: str, where: str | Path | None = None) -> Said:
    """An experiment's tables as the report prints them (`tables.views`: pivots, intervals,
    flags), as Markdown: all of them, or those whose keys are `which` (a run without one, a
    quick run's single rate say, shows the rest)."""
    from experiments.readers.tables import QUICK

    found = _views(*_version(name, where))
    quick = metadata(name, _place(where)).get("mode") == "quick"
    parts = [f"*{QUICK}*"] if quick else []
    for view in [v for v in found if not which or v.key in which]:
        notes = "".join(f"\n\n{_note(note)}" for note in view.notes)
        parts.append(f"**{view.title}**\n\n{_markdown(view.table)}{notes}")
    return Said("\n\n".join(parts))


def _note(note: str) -> str:
    """A table's note in italics, its own asterisks (a flag) escaped so the emphasis holds."""
    return "*" + note.replace("*", "\\*") + "*"


def _markdown(data: Any) -> str:
    """A table of text as Markdown: the key to the left, numbers to the right."""
    flat = data.reset_index()
    keys = {str(n) for n in data.index.names if n is not None}
    columns = [str(c) for c in flat.columns]

    def cell(value: Any) -> str:
        return "" if value != value else str(value).replace("|", "\\|").replace("*", "\\*")

    align = [":---" if c in keys or not all(
        str(v)[:1].isdigit() or str(v)[:1] == "-" for v in flat[c] if cell(v)) else "---:"
        for c in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in flat.itertuples(index=False)]
    return "\n".join(lines)


def figure(name: str, where: str | Path | None = None, **choices: Any) -> Any:
    """An experiment's figure, drawn from its rows, as a matplotlib `Figure` to restyle or
    save (`fig.savefig(...)`), shown once by a notebook. `choices` go to the experiment's
    drawing: `rate=` picks latency's rate (every rate of the run by default)."""
    import inspect

    import matplotlib.pyplot as plt

    module = importlib.import_module(
        f"experiments.readers.summaries.{module_name(_named(name))}")
    takes = set(inspect.signature(module.draw).parameters)
    accepted = takes - {"frame", "table"}
    unknown = sorted(set(choices) - accepted)
    if unknown:
        raise BadInput(f"figure({name!r}) takes no {', '.join(unknown)}; it takes "
                       f"{', '.join(sorted(accepted)) or 'no choice'}")
    from experiments.readers.figures import in_order

    if "table" in takes:  # the summary already made, rather than made again to draw it
        choices["table"] = summary(name, where)
    drawn = module.draw(in_order(frame(name, where)), **choices)
    # closed to pyplot: the notebook shows the figure returned, not pyplot's copy as well
    plt.close(drawn)
    return drawn


def run_line(*names: str, where: str | Path | None = None) -> Said:
    """Which runs each experiment's rows come from, and the command that made each, as
    Markdown: every run merged into a result its own line, revisions with uncommitted
    changes said, and CPU calibrations flagged where they differ by more than `APART`."""
    place = _place(where)
    metas = {name: metadata(_named(name), place) for name in names}
    servers = sorted({f"{s['kind']} {s['version']} ({s['source'].split()[0]})"
                      for meta in metas.values() for s in meta.get("servers", {}).values()})
    pythons = sorted({str(m.get("versions", {}).get("python", "?")) for m in metas.values()})
    made = {name: runs(meta) for name, meta in metas.items()}
    speeds = [r["calibration"] for found in made.values() for r in found if r["calibration"]]
    apart = bool(speeds) and max(speeds) > APART * min(speeds)
    lines = ["| experiment | run | revision | CPU calibration | backends | reproduce with |",
             "|---|---|---|---|---|---|"]
    for name, found in made.items():
        for run in found:
            revision = str(run["git_revision"])[:10]
            if run["git_dirty"]:
                revision += " **(uncommitted changes)**"
            speed = run["calibration"]
            flag = " **⚠**" if apart and speed in (max(speeds), min(speeds)) else ""
            backends = ", ".join(run["backends"]) if len(found) > 1 else "all"
            lines.append(f"| {name} | {run['run']} | {revision} | "
                         f"{speed if speed else '?'} s{flag} | {backends} | "
                         f"`{run['command']}` |")
    modes_ = sorted({str(m.get("mode", "?")) for m in metas.values()})
    notes = [f"{' and '.join(modes_)} runs. Python {', '.join(pythons)}; servers: "
             f"{', '.join(servers) or 'none'}."]
    if apart:
        notes.append(f"⚠ the CPU calibrations (a fixed pure-Python loop, lower is faster) run "
                     f"from {min(speeds)} to {max(speeds)} s: the machine ran that much "
                     "faster in one run than another, so compare numbers across them with "
                     "care.")
    return Said("\n".join(lines) + "\n\n" + " ".join(f"*{n}*" for n in notes))


def reads(where: str | Path | None = None, hint: str = "call `lab.use(path)`") -> Said:
    """Which run the readers read, in a line: the folder, whether it is the reference, and
    the mode of its runs (saying so loudly when quick and full are mixed); `hint` how to
    read another (a notebook with a `RUN` cell names it)."""
    place = _place(where)
    try:
        shown = f"{place.resolve().relative_to(RESULTS.parent)}/"
    except ValueError:
        shown = f"{place}/"
    found = modes(place)
    kinds = sorted(set(found.values()))
    what = ("the reference run" if is_reference(place) else "another run") + (
        f", {kinds[0]}" if len(kinds) == 1 else "")
    line = f"Reading {what}: `{shown}` ({', '.join(found) or 'no results'})."
    if len(kinds) > 1:
        held = "; ".join(f"{k}: {', '.join(n for n, m in found.items() if m == k)}"
                         for k in kinds)
        line += f" **It mixes runs of different modes ({held})**: compare with care."
    return Said(f"*{line} To read another, {hint}.*")


def say(text: str) -> Said:
    """`text` shown as Markdown (write it as an f-string over the numbers above), so prose
    whose numbers come from the frame above reads as prose."""
    return Said(text)


def prose(data: Any, index: bool = True) -> Said:
    """A table of sentences as a Markdown table, left-aligned so that it reads (an HTML table
    right-aligns its cells, and neither JupyterLab nor a repository page keeps a notebook's
    styles)."""
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    columns = ([str(data.index.name or "")] if index else []) + [str(c) for c in data.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(":---" for _ in columns) + "|"]
    for key, row in data.iterrows():
        cells = ([f"**{cell(key)}**"] if index else []) + [cell(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return Said("\n".join(lines))


def compare(run: Any, reference: str | Path | None = None) -> Any:
    """`run` (a folder, or the frame `lab.run` returned) against `reference` (the committed
    reference by default): each headline measure's ratio, run over reference, with its
    interval, backend by backend (`comparing.compare`)."""
    from experiments.readers.comparing import compare as compared

    return compared(run, reference)


def versus(name: str, mine: str, theirs: str, where: str | Path | None = None, **at: Any
           ) -> Any:
    """`mine`'s median over `theirs'` in experiment `name` (latency: p50 at `rate`, with
    `variant` for theirs; throughput: workflows a second at `processes`; scaling: the cost in
    `dimension` at `size`, the largest both measured unless given), as an
    `uncertainty.Interval` over both sides' samples."""
    from experiments.readers.uncertainty import nested_ratio, ratio

    rows = frame(name, where)
    variant = at.pop("variant", "default")
    if name == "latency":
        from experiments.readers.summaries.latency import samples

        rate = float(at.pop("rate", 20.0))
        return nested_ratio(samples(rows, mine, rate),
                            samples(rows, theirs, rate, variant))
    if name == "throughput":
        from experiments.readers.summaries.throughput import rates

        processes = int(at.pop("processes", 1))
        return ratio(rates(rows, mine, processes), rates(rows, theirs, processes, variant))
    if name == "scaling":
        dimension = str(at.pop("dimension", "cancel"))
        costs = rows[(rows["metric"] == "cost") & (rows["dimension"] == dimension)]
        sides = [costs[costs["backend"] == b] for b in (mine, theirs)]
        shared = set(sides[0]["size"]) & set(sides[1]["size"])
        size = float(at.pop("size", max(shared, default=math.nan)))
        return ratio(*(side[side["size"] == size]["value"].to_numpy() for side in sides))
    raise ValueError(f"no ratio between schedulers for {name!r}: latency, throughput or "
                     "scaling")


def times(found: Any) -> str:
    """A ratio (`versus`) as prose: "0.47 times (0.46 to 0.48 at 95%)", and "not
    distinguishable at this sample size" where its interval holds 1."""
    from experiments.readers.tables import number
    from experiments.readers.uncertainty import LEVEL, distinguishable

    if found.estimate != found.estimate:
        return "n/a"
    if found.lo != found.lo:
        return f"{number(found.estimate)} times (one sample: no interval)"
    said = (f"{number(found.estimate)} times ({number(found.lo)} to {number(found.hi)} at "
            f"{LEVEL:.0%})")
    return said if distinguishable(found) else f"{said}, not distinguishable at this sample size"


def resampled(name: str, *backends: str, where: str | Path | None = None) -> str:
    """How the intervals of `backends` (all, when none is named) in experiment `name` were
    drawn, as a phrase: over the repeats and then the samples within each where each backend
    has several, else over one run's samples, which leaves out what another run would move."""
    from experiments.readers.tables import resampling

    found = summary(name, where)  # computed once per version of the rows, and it counts them
    if "repeats" in found.columns:
        counts = found.groupby("backend", sort=False)["repeats"].max()
    else:
        rows = frame(name, where)
        if "repeat" not in rows.columns:
            return resampling({})
        counts = rows.groupby("backend", sort=False)["repeat"].nunique()
    if backends:
        counts = counts[counts.index.isin(backends)]
    return resampling({str(b): int(n) for b, n in counts.items()},
                      "submissions" if name == "latency" else "samples")


def pick(data: Any, column: str, **where: Any) -> float:
    """The one value of `column` in the rows matching `where` (NaN if none match): a cell
    read by what it means rather than where it is."""
    rows = data
    for key, wanted in where.items():
        rows = rows[rows[key] == wanted]
    if len(rows) == 0:
        return math.nan
    return float(rows[column].iloc[0])


def ms(value: float, digits: int = 2) -> str:
    """A duration in milliseconds as prose: '0.58 ms', '26 ms', 'n/a'."""
    if value != value:  # NaN
        return "n/a"
    if value >= 10:
        return f"{value:,.0f} ms"
    return f"{value:.{digits}g} ms" if value < 1 else f"{value:.{digits + 1}g} ms"


def overview(where: str | Path | None = None) -> Any:
    """Every scheduler against every measure: one row per backend (default variant)."""
    import pandas

    rows: dict[str, dict[str, Any]] = {}

    def put(backend: str, column: str, value: float) -> None:
        rows.setdefault(backend, {"backend": backend})[column] = value

    latency = summary("latency", where)
    plain = latency[(latency["rate"] == 20.0) & latency["poll_ms"].isna()
                    & (latency["variant"] == "default")]
    for _, row in plain.iterrows():
        put(row["backend"], "p50 ms @20/s", row["p50"])
        put(row["backend"], "p99 ms @20/s", row["p99"])
    idle = summary("idle", where)
    for _, row in idle[idle["variant"] == "default"].iterrows():
        own = row.get("worker_requests")
        server = row.get("server_requests")
        put(row["backend"], "idle req/s", own if own == own else server)
        put(row["backend"], "idle CPU ms/s", row.get("worker_cpu", math.nan) * 1000)
    growth = summary("growth", where)
    for _, row in growth.iterrows():
        column = "peak queue" if row["trimming"] in ("", True, "True") else "peak, untrimmed"
        put(row["backend"], column, row["peak_entries"])
    everything = frame("takeover", where)
    # A run's lease here is chosen from ours alone, or a quick run's 0.5 s would give way to
    # the rivals' 1 s and vanish. A rival's kills are at its own settings made from a lease,
    # by one of its recoveries (`RECOVERIES`): at that lease, its first, the one that takes
    # a job over, is its figure here (the others, and "never", are in takeover's tables).
    rival = (everything["phase"] == "mid-job") if "phase" in everything else None
    takeover = everything[~rival] if rival is not None else everything
    kills = takeover[takeover["metric"] == "takeover"]
    if len(kills):
        from experiments.catalogue import RECOVERIES
        from experiments.readers.summaries.takeover import typical

        lease = 1.0 if (kills["lease_s"] == 1.0).any() else float(kills["lease_s"].min())
        column = f"takeover s (median kill, lease {lease:g} s)"
        for backend in kills["backend"].unique():  # the statistic named in the column
            put(backend, column, typical(takeover, backend, lease).estimate)
        theirs = everything[rival] if rival is not None else everything.iloc[:0]
        for backend in theirs["backend"].unique():
            first = next(iter(RECOVERIES.get(str(backend), {})), "")
            found = typical(theirs, backend, lease, first).estimate
            if found == found:
                put(backend, column, found)
    throughput = summary("throughput", where)
    for _, row in throughput[throughput["variant"] == "default"].iterrows():
        put(row["backend"], f"wf/s x{int(row['processes'])}", row["passes_per_s"])
    scaling = summary("scaling", where)
    for _, row in scaling.iterrows():
        put(row["backend"], f"slope {row['dimension']}", row["slope"])
    from experiments.readers.figures import order

    return pandas.DataFrame([rows[b] for b in order(rows)])
