"""`python -m experiments report [NAME ...]`: the comparison tables of one run's folder, as text.

Each experiment's tables come from `tables.views` (pivots, intervals, flags); this module only
lays them out: under the line that says which run they came from, a title, the table, and its
notes, each table no wider than `WIDTH` — one too wide is cut into parts by columns, each part
repeating the row's key, rather than wrapped by the terminal into something unreadable.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.catalogue import EXPERIMENTS
from experiments.results import RESULTS, describe, load, metadata

__all__ = ["WIDTH", "render", "report"]

WIDTH = 120
_GAP = "  "


def report(where: Path = RESULTS, names: Sequence[str] = EXPERIMENTS, width: int = WIDTH
           ) -> str:
    """Every experiment of `names` with results in `where`, its tables as text."""
    from experiments.readers.tables import QUICK, views

    parts: list[str] = []
    for name in names:
        if not (where / f"{name}.csv").exists():
            continue
        frame = load(name, where)
        if frame.empty:
            parts.append(f"== {name}: no rows ==")
            continue
        # The title the run wrote with its rows: a reader reads what was measured, never the
        # module that measures it.
        meta = metadata(name, where)
        title = f"{name}: {meta['title']}" if meta.get("title") else name
        lines = [f"== {title} ==", _wrapped(describe(name, where), width)]
        if meta.get("mode") == "quick":
            lines.append(_wrapped(QUICK, width))
        for view in views(name, frame):
            lines += ["", view.title, render(view.table, width)]
            lines += [_wrapped(note, width, "  ") for note in view.notes]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) if parts else f"no results in {where}"


def _wrapped(text: str, width: int, indent: str = "") -> str:
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent + "  ")


def render(table: Any, width: int = WIDTH) -> str:
    """`table` (cells as text, the index as the rows' key) laid out in columns no wider than
    `width` in all: the key on the left, numbers right-aligned, and the columns that do not
    fit carried into further parts below, each with the key again."""
    if len(table) == 0:
        return "(no rows)"
    flat = table.reset_index() if any(n is not None for n in table.index.names) else table
    keys = [str(n) for n in table.index.names if n is not None]
    cells = {str(c): ["" if v is None or v != v else str(v) for v in flat[c]]
             for c in flat.columns}
    sizes = {c: max(len(c), *(len(v) for v in values)) for c, values in cells.items()}
    left = {c for c, values in cells.items() if c in keys or not all(
        v[:1].isdigit() or v[:1] in "-∞" for v in values if v)}
    rest = [c for c in cells if c not in keys]
    fixed = sum(sizes[k] for k in keys) + len(_GAP) * max(0, len(keys) - 1)
    groups: list[list[str]] = []
    for column in rest:
        used = fixed + sum(sizes[c] + len(_GAP) for c in groups[-1]) if groups else width + 1
        if used + len(_GAP) + sizes[column] > width and (not groups or groups[-1]):
            groups.append([])
        groups[-1].append(column)
    blocks = []
    for group in groups or [[]]:
        shown = [*keys, *group]
        lines = [_GAP.join(_aligned(c, sizes[c], c in left) for c in shown).rstrip()]
        for i in range(len(flat)):
            lines.append(_GAP.join(_aligned(cells[c][i], sizes[c], c in left)
                                   for c in shown).rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _aligned(text: str, size: int, left: bool) -> str:
    """Keys and words to the left, numbers to the right."""
    return text.ljust(size) if left else text.rjust(size)
