"""Figures from results: each experiment module draws its own (`draw(frame) -> Figure`); this
module gives them one look (labelled axes with units, legends, readable sizes, one colour per
backend in every figure, and one marker, so lines that lie on each other can still be told
apart) and writes `results/figures/<experiment>.png`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.backends import BACKENDS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["colour", "draw", "figure", "marker", "style"]

_PALETTE = ["#1f77b4", "#d62728", "#ff7f0e", "#2ca02c", "#98df8a", "#9467bd", "#c5b0d5",
            "#8c564b", "#17becf", "#9edae5", "#e377c2", "#f7b6d2", "#7f7f7f", "#bcbd22",
            "#dbdb8d", "#c49c94"]


def colour(backend: str) -> str:
    """The same colour for a backend in every figure."""
    names = list(BACKENDS)
    index = names.index(backend) if backend in names else len(names) + hash(backend) % 4
    return _PALETTE[index % len(_PALETTE)]


#: Related backends share a hue (a scheduler and its polled variant), so each has a marker too.
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*", "d", "8", "H", "o"]


def marker(backend: str) -> str:
    """The same marker for a backend in every figure."""
    names = list(BACKENDS)
    index = names.index(backend) if backend in names else len(names) + hash(backend) % 4
    return _MARKERS[index % len(_MARKERS)]


def style() -> None:
    import matplotlib

    if "inline" not in matplotlib.get_backend():  # files, not a notebook's inline figures
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 110, "font.size": 10, "axes.titlesize": 11,
        "axes.grid": True, "grid.alpha": 0.3, "legend.fontsize": 8, "legend.frameon": False,
    })


def figure(columns: int = 1, rows: int = 1, width: float = 6.0, height: float = 4.0
           ) -> tuple[Figure, Any]:
    style()
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows),
                             squeeze=False, layout="constrained")
    return fig, axes


def label(ax: Axes, title: str, x: str, y: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(x)
    ax.set_ylabel(y)


def draw(experiment: str, where: Path) -> Path:
    """Draw `experiment`'s figure from its results in `where`; return the PNG's path."""
    import importlib

    import matplotlib.pyplot as plt

    from experiments.results import load

    module = importlib.import_module(f"experiments.{experiment}")
    frame = load(experiment, where)
    fig = module.draw(frame)
    out = where / "figures" / f"{experiment}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out
