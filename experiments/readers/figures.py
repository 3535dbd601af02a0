"""Figures from results: each experiment module draws its own (`draw(frame) -> Figure`); this
module gives them one look and writes `results/figures/<experiment>.png`.

The look is a table, kept here only: each backend belongs to a family (ours on Redis, ours on
Postgres, SQLite, memory, each rival), a family has one hue, and its members are told apart by
shade, line style and marker. A name outside the table (a backend registered from a notebook)
is a family of its own (`look`). Where one axis would hold more series than a reader can
follow, a figure splits them into `panels` by family; a column with its interval beside it
gets that drawn too (`bounds`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.catalogue import EXPERIMENTS, module_name

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["CROWDED", "DRAWN", "FEW", "Look", "bounds", "colour", "counted", "draw", "family",
           "figure", "grid", "in_order", "label", "look", "marker", "measured_ticks", "nothing",
           "order", "panels", "plain_log", "redraw", "style"]

Dashes = str | tuple[float, tuple[float, ...]]


@dataclass(frozen=True, slots=True)
class Look:
    """How one series (a backend, in one of its variants) is drawn, in every figure."""

    name: str  # the legend's text: the backend, and its variant unless the default
    family: str
    colour: str
    dashes: Dashes
    marker: str
    hollow: bool = False  # a variant's markers are drawn open

    def line(self) -> dict[str, Any]:
        """Keyword arguments for `Axes.plot` / `Axes.errorbar` / `Axes.step`."""
        return {"color": self.colour, "linestyle": self.dashes, "marker": self.marker,
                "markerfacecolor": "white" if self.hollow else self.colour,
                "label": self.name}


#: The families in the order panels and bars show them, each with its shades, dark first.
_HUES: dict[str, tuple[str, ...]] = {
    "memory": ("#3a3a3a",),
    "ours on Redis": ("#b2182b", "#f0735a"),
    "ours on Postgres": ("#1f5fad", "#74a9dc"),
    "SQLite": ("#238b45",),
    "saq": ("#7b3fa0",),
    "arq": ("#e05fb0",),
    "streaq": ("#e69500",),
    "pgqueuer": ("#12a1a1",),
    "procrastinate": ("#8c6d31",),
}
#: Hues for backends outside the table, each as far from the families' as nine families
#: leave room for; such a backend also gets a marker no family uses.
_SPARE = ("#c9a227", "#76b82a", "#00acc1", "#000075")
_SPARE_MARKERS = "*Xhp"

#: backend: (family, shade, line style, marker), in the order every table and legend lists
#: them (`order`): ours by family (memory, the stream, the set, the clusters, Postgres,
#: SQLite), then the rivals. Stream dark, set light; polled dotted, cluster dashed, Redis 8.2
#: dash-dot (a rival's tuned setting: dashed, hollow markers, `look`).
_MEMBERS: dict[str, tuple[str, int, Dashes, str]] = {
    "memory": ("memory", 0, "-", "o"),
    "redis-stream": ("ours on Redis", 0, "-", "o"),
    "redis-stream-8.2": ("ours on Redis", 0, "-.", "v"),
    "redis-set": ("ours on Redis", 1, "-", "s"),
    "redis-set-polled": ("ours on Redis", 1, ":", "D"),
    "redis-stream-cluster": ("ours on Redis", 0, "--", "^"),
    "redis-set-cluster": ("ours on Redis", 1, "--", "P"),
    "postgres": ("ours on Postgres", 0, "-", "o"),
    "postgres-polled": ("ours on Postgres", 1, ":", "D"),
    "sqlite": ("SQLite", 0, "-", "o"),
    "saq": ("saq", 0, "-", "o"),
    "arq": ("arq", 0, "-", "s"),
    "streaq": ("streaq", 0, "-", "^"),
    "pgqueuer": ("pgqueuer", 0, "-", "o"),
    "procrastinate": ("procrastinate", 0, "-", "s"),
}

#: The panels a crowded figure splits into, by family; a family not named here gets "yours".
_PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ours on Redis", ("ours on Redis",)),
    ("ours on Postgres", ("ours on Postgres",)),
    ("SQLite and memory", ("SQLite", "memory")),
    ("rivals on Redis", ("saq", "arq", "streaq")),
    ("rivals on Postgres", ("pgqueuer", "procrastinate")),
)
_OTHERS = "yours"
#: More series than this on one axis and a figure splits them into panels.
CROWDED = 8


def _stable(name: str) -> int:
    # not hash(): Python salts it per process, and a colour must not change between runs
    return zlib.crc32(name.encode())


def family(backend: str) -> str:
    """The family a backend's series is drawn in: a name outside the table is its own."""
    known = _MEMBERS.get(backend)
    return known[0] if known else backend


def look(backend: str, variant: object = "default") -> Look:
    """The same look for a backend (in a variant) in every figure. A backend outside the
    table gets a hue and marker picked from its name, so it too looks the same in every figure
    and every process; a variant other than the default (a rival's tuned setting) keeps its
    backend's hue, dashed, with hollow markers."""
    backend = str(backend)
    plain = variant is None or variant != variant or str(variant) in ("", "default")
    name = backend if plain else f"{backend} ({variant})"
    known = _MEMBERS.get(backend)
    if known is not None:
        kin, shade, dashes, mark = known
        hues = _HUES[kin]
        hue = hues[min(shade, len(hues) - 1)]
    else:
        kin, number = backend, _stable(backend)
        hue = _SPARE[number % len(_SPARE)]
        dashes = "-"
        mark = _SPARE_MARKERS[number // len(_SPARE) % len(_SPARE_MARKERS)]
    if not plain:  # a rival's tuned setting, a rerun: the same hue, told apart by line
        dashes = "--" if dashes == "-" else (0, (1.0, 1.5, 4.0, 1.5))
    return Look(name, kin, hue, dashes, mark, hollow=not plain)


def colour(backend: str) -> str:
    """The same colour for a backend in every figure (its family's hue, in its shade)."""
    return look(backend).colour


def marker(backend: str) -> str:
    """The same marker for a backend in every figure."""
    return look(backend).marker


def _rank(backend: str) -> tuple[int, int, str]:
    families = list(_HUES)
    kin = family(backend)
    members = list(_MEMBERS)
    return (families.index(kin) if kin in families else len(families),
            members.index(backend) if backend in members else len(members), backend)


def order(backends: Iterable[object]) -> list[str]:
    """Backends (each once) family by family, in the table's order; unknown ones last."""
    return sorted({str(b) for b in backends}, key=_rank)


def in_order(data: Any, column: str = "backend") -> Any:
    """A frame's rows with their backends in `order` (the rows of one backend as they were),
    so every table built from it by a `groupby(sort=False)` lists them so too."""
    import numpy

    if column not in data or not len(data):
        return data
    ranks = {b: i for i, b in enumerate(order(data[column].unique()))}
    return data.iloc[numpy.argsort(data[column].map(ranks).to_numpy(), kind="stable")]


def panels(backends: Iterable[object], series: int | None = None,
           most: int = CROWDED) -> list[tuple[str, list[str]]]:
    """The backends split into panels by family (title, backends), the empty ones dropped;
    one panel of them all where `series` (how many lines, default one a backend) is at most
    `most`, since splitting a few series only makes them harder to compare."""
    names = order(backends)
    if (series if series is not None else len(names)) <= most:
        return [("", names)] if names else []
    found: list[tuple[str, list[str]]] = []
    for title, families in _PANELS:
        chosen = [b for b in names if family(b) in families]
        if chosen:
            found.append((title, chosen))
    placed = {b for _, chosen in found for b in chosen}
    rest = [b for b in names if b not in placed]
    if rest:
        found.append((_OTHERS, rest))
    return found


def bounds(table: Any, column: str) -> tuple[Any, Any] | None:
    """The interval of `column` where the table carries one (`column_lo`, `column_hi`, as
    the lab's uncertainty estimates name them), else None: figures draw what they are given,
    so a summary column `c` with `c_lo` and `c_hi` beside it gets its interval drawn too."""
    lo, hi = f"{column}_lo", f"{column}_hi"
    if lo not in table or hi not in table or not (table[lo].notna().any()):
        return None
    return table[lo], table[hi]


def nothing(ax: Axes, text: str) -> None:
    """Say in an empty panel why it is empty, rather than leave blank axes."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666",
            wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def style() -> None:
    import matplotlib

    if "inline" not in matplotlib.get_backend():  # files, not a notebook's inline figures
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 110, "font.size": 10, "axes.titlesize": 11,
        "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 8, "legend.frameon": False,
        "lines.markersize": 5,
    })


def figure(columns: int = 1, rows: int = 1, width: float = 6.0, height: float = 4.0,
           **shared: Any) -> tuple[Figure, Any]:
    """A figure of `rows` by `columns` panels, each `width` by `height` inches (`shared`:
    `sharex`, `sharey` as for `plt.subplots`)."""
    style()
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows),
                             squeeze=False, layout="constrained", **shared)
    return fig, axes


def grid(count: int, most: int = 3) -> tuple[int, int]:
    """Columns and rows for `count` panels, at most `most` a row."""
    columns = max(1, min(count, most))
    return columns, max(1, -(-count // columns))


def label(ax: Axes, title: str, x: str, y: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(x)
    ax.set_ylabel(y)


def measured_ticks(ax: Axes, values: Sequence[float], axis: str = "x") -> None:
    """Ticks at the values measured, labelled as plain numbers (a log axis's own ticks are
    powers of ten, which a sweep of 5 … 100 or a single value falls between)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    chosen = sorted({float(v) for v in values})
    if not chosen:
        return
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(chosen))
    target.set_minor_locator(NullLocator())
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if len(chosen) == 1:  # one value: room either side, rather than a degenerate axis
        (ax.set_xlim if axis == "x" else ax.set_ylim)(chosen[0] / 2, chosen[0] * 2)


def plain_log(ax: Axes, axis: str = "y") -> None:
    """Label a log axis (once its data is drawn) with plain numbers, 1, 2, 5 between powers of
    ten where it spans few decades: a narrow range (a quick run's) otherwise gets labels such
    as 6e0 written as a power, or none at all."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    low, high = ax.get_ylim() if axis == "y" else ax.get_xlim()
    decades = math.log10(high / low) if low > 0 and high > low else 0.0
    target = ax.yaxis if axis == "y" else ax.xaxis
    subs = ((1.0, 2.0, 3.0, 5.0, 7.0) if decades <= 1.2 else
            (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,))
    target.set_major_locator(LogLocator(subs=subs))
    target.set_minor_locator(LogLocator(subs=(2.0, 3.0, 5.0, 7.0)) if decades > 2.5
                             else NullLocator())
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


#: Fewer observations than this behind a series and its legend says how many.
FEW = 100


def counted(name: str, count: int) -> str:
    """A legend's name, with its sample size where the sample is small (a quick run's)."""
    return f"{name} (n={count})" if count < FEW else name


#: What has a figure: every experiment, and the soak.
DRAWN = (*EXPERIMENTS, "soak")


def redraw(where: Path, names: Sequence[str] = ()) -> list[Path]:
    """Draw again, from the rows in `where`, the figures named (all whose results are there
    when none are); a `ValueError` names what cannot be drawn and why."""
    for name in names:
        if name not in DRAWN:
            raise ValueError(f"no figure {name!r}; choose from {', '.join(DRAWN)}")
        if not (where / f"{name}.csv").exists():
            raise ValueError(f"no {name}.csv in {where} to draw {name} from")
    chosen = list(names) or [n for n in DRAWN if (where / f"{n}.csv").exists()]
    return [draw(name, where) for name in chosen]


def draw(experiment: str, where: Path) -> Path:
    """Draw `experiment`'s figure from its results in `where`; return the PNG's path."""
    import importlib

    import matplotlib.pyplot as plt

    from experiments.results import load

    module = importlib.import_module(
        f"experiments.readers.summaries.{module_name(experiment)}")
    frame = load(experiment, where)
    fig = module.draw(frame)
    out = where / "figures" / f"{experiment}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out
