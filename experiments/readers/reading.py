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

from experiments.catalogue import module_name
from experiments.results import RESULTS, describe, is_reference, load, metadata, modes

__all__ = ["DEFAULT", "blank", "figure", "frame", "ms", "overview", "pick", "prose", "reads",
           "resampled", "run_line", "say", "shown", "table", "times", "versus"]

#: Where notebooks read from unless told (`experiments.use`): the committed reference run, or
#: the folder `LAB_RESULTS` names (a quick run of your own, say).
DEFAULT = Path(os.environ.get("LAB_RESULTS") or RESULTS).resolve()
WHERE = DEFAULT


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


def frame(name: str, where: Path | None = None) -> Any:
    """An experiment's rows (one observation each)."""
    return load(name, where or WHERE)


def table(name: str, where: Path | None = None) -> Any:
    """An experiment's summary table, the same `report` prints (computed once per version of
    its rows: the intervals in it take a few seconds)."""
    path = (where or WHERE).resolve() / f"{name}.csv"
    stamp = path.stat().st_mtime_ns if path.exists() else 0
    return _summary(name, path.parent, stamp).copy()


@functools.lru_cache(maxsize=32)
def _summary(name: str, where: Path, stamp: int) -> Any:
    module = importlib.import_module(f"experiments.readers.summaries.{module_name(name)}")
    return module.summary(load(name, where))


def shown(name: str, *which: str, where: Path | None = None) -> Any:
    """An experiment's tables as the report prints them (`tables.views`: pivots, intervals,
    flags), as Markdown: all of them, or those whose keys are `which` (a run without one, a
    quick run's single rate say, shows the rest)."""
    from IPython.display import Markdown

    from experiments.readers.tables import QUICK, views

    found = views(name, frame(name, where))
    quick = metadata(name, where or WHERE).get("mode") == "quick"
    parts = [f"*{QUICK}*"] if quick else []
    for view in [v for v in found if not which or v.key in which]:
        notes = "".join(f"\n\n*{note}*" for note in view.notes)
        parts.append(f"**{view.title}**\n\n{_markdown(view.table)}{notes}")
    return Markdown("\n\n".join(parts))


def _markdown(data: Any) -> str:
    """A table of text as Markdown: the key to the left, numbers to the right."""
    flat = data.reset_index()
    keys = {str(n) for n in data.index.names if n is not None}
    columns = [str(c) for c in flat.columns]

    def cell(value: Any) -> str:
        return "" if value != value else str(value).replace("|", "\\|")

    align = [":---" if c in keys or not all(
        str(v)[:1].isdigit() or str(v)[:1] == "-" for v in flat[c] if cell(v)) else "---:"
        for c in columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in flat.itertuples(index=False)]
    return "\n".join(lines)


def figure(name: str, where: Path | None = None) -> Any:
    """An experiment's figure, drawn from its rows, as an image a notebook shows once."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image

    module = importlib.import_module(f"experiments.readers.summaries.{module_name(name)}")
    drawn = module.draw(frame(name, where))
    buffer = io.BytesIO()
    drawn.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(drawn)
    return Image(data=buffer.getvalue(), format="png")


def run_line(*names: str, where: Path | None = None) -> Any:
    """Which run each experiment's rows come from, and the command that makes them again, as
    Markdown: one line for one experiment, a table for several (what they share said once)."""
    from IPython.display import Markdown

    place = where or WHERE
    metas = {name: metadata(name, place) for name in names}
    servers = sorted({f"{s['kind']} {s['version']} ({s['source'].split()[0]})"
                      for meta in metas.values() for s in meta.get("servers", {}).values()})
    pythons = sorted({str(m.get("versions", {}).get("python", "?")) for m in metas.values()})
    shared = f"Python {', '.join(pythons)}; servers: {', '.join(servers) or 'none'}."
    if len(names) == 1:
        return Markdown(f"*{describe(names[0], place)}. {shared}*")
    lines = ["| experiment | revision | started | cores | CPU calibration | reproduce with |",
             "|---|---|---|---|---|---|"]
    for name, meta in metas.items():
        revision = str(meta.get("git_revision", "?"))[:10]
        if meta.get("git_dirty"):
            revision += " (uncommitted changes)"
        calibration = meta.get("cpu_calibration_seconds", {}).get("at_start", "?")
        lines.append(f"| {name} | {revision} | {str(meta.get('started', '?'))[:16]} | "
                     f"{meta.get('cores', '?')} | {calibration} s | "
                     f"`{meta.get('command', '?')}` |")
    return Markdown("\n".join(lines) + f"\n\n*{meta.get('mode', '?')} runs. {shared}*")


def reads(where: Path | None = None) -> Any:
    """Which run the readers read, in one line of Markdown: the folder, whether it is the
    reference, and the mode of its runs (saying so loudly when quick and full are mixed)."""
    from IPython.display import Markdown

    place = where or WHERE
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
    return Markdown(f"*{line} Set `RUN` above, or call `lab.use(path)`, to read another.*")


def say(text: str) -> Any:
    """`text` shown as Markdown (write it as an f-string over the numbers above), so prose
    whose numbers come from the frame above reads as prose."""
    from IPython.display import Markdown

    return Markdown(text)


def prose(data: Any, index: bool = True) -> Any:
    """A table of sentences as a Markdown table, left-aligned so that it reads (an HTML table
    right-aligns its cells, and neither JupyterLab nor a repository page keeps a notebook's
    styles)."""
    from IPython.display import Markdown

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    columns = ([str(data.index.name or "")] if index else []) + [str(c) for c in data.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(":---" for _ in columns) + "|"]
    for key, row in data.iterrows():
        cells = ([f"**{cell(key)}**"] if index else []) + [cell(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return Markdown("\n".join(lines))


def versus(name: str, mine: str, theirs: str, where: Path | None = None, **at: Any) -> Any:
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


def resampled(name: str, *backends: str, where: Path | None = None) -> str:
    """How the intervals of `backends` (all, when none is named) in experiment `name` were
    drawn, as a phrase: over the repeats and then the samples within each where each backend
    has several, else over one run's samples, which leaves out what another run would move."""
    from experiments.readers.tables import resampling

    summary = table(name, where)  # computed once per version of the rows, and it counts them
    if "repeats" in summary.columns:
        counts = summary.groupby("backend", sort=False)["repeats"].max()
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


def overview(where: Path | None = None) -> Any:
    """Every scheduler against every measure: one row per backend (default variant)."""
    import pandas

    rows: dict[str, dict[str, Any]] = {}

    def put(backend: str, column: str, value: float) -> None:
        rows.setdefault(backend, {"backend": backend})[column] = value

    latency = table("latency", where)
    plain = latency[(latency["rate"] == 20.0) & latency["poll_ms"].isna()
                    & (latency["variant"] == "default")]
    for _, row in plain.iterrows():
        put(row["backend"], "p50 ms @20/s", row["p50"])
        put(row["backend"], "p99 ms @20/s", row["p99"])
    idle = table("idle", where)
    for _, row in idle[idle["variant"] == "default"].iterrows():
        own = row.get("worker_requests")
        server = row.get("server_requests")
        put(row["backend"], "idle req/s", own if own == own else server)
        put(row["backend"], "idle CPU ms/s", row.get("worker_cpu", math.nan) * 1000)
    growth = table("growth", where)
    for _, row in growth.iterrows():
        column = "peak queue" if row["trimming"] in ("", True, "True") else "peak, untrimmed"
        put(row["backend"], column, row["peak_entries"])
    takeover = frame("takeover", where)
    # A rival's kills are at its own settings, made from a 1 s lease and one of its several
    # recoveries, some never taken over: not a lease of ours, nor one figure a backend. Its
    # row and "never" are in the takeover's own tables; and a run's lease here is chosen from
    # ours alone, or a quick run's 0.5 s would give way to the rivals' 1 s and vanish.
    if "phase" in takeover:
        takeover = takeover[takeover["phase"] != "mid-job"]
    kills = takeover[takeover["metric"] == "takeover"]
    if len(kills):
        from experiments.readers.summaries.takeover import typical

        lease = 1.0 if (kills["lease_s"] == 1.0).any() else float(kills["lease_s"].min())
        for backend in kills["backend"].unique():  # the statistic named in the column
            put(backend, f"takeover s (median kill, lease {lease:g} s)",
                typical(takeover, backend, lease).estimate)
    throughput = table("throughput", where)
    for _, row in throughput[throughput["variant"] == "default"].iterrows():
        put(row["backend"], f"wf/s x{int(row['processes'])}", row["passes_per_s"])
    scaling = table("scaling", where)
    for _, row in scaling.iterrows():
        put(row["backend"], f"slope {row['dimension']}", row["slope"])
    order = list(dict.fromkeys(list(plain["backend"]) + list(rows)))
    return pandas.DataFrame([rows[b] for b in order if b in rows])
