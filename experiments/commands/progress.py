"""Progress a run shows: a bar per experiment with the configuration in hand, in a terminal
(rich) and in a notebook (HTML, updated in place).

rich draws a live display in Jupyter only through ipywidgets, and without them warns at every
refresh; an HTML output updated by its display id needs nothing beyond the kernel, renders in
JupyterLab, VS Code and a saved notebook alike, and so is what a notebook gets.
"""

from __future__ import annotations

import contextlib
import html
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["bars", "in_notebook"]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where output goes to a notebook, not a terminal)."""
    shell_of = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = shell_of() if shell_of is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


@contextlib.contextmanager
def bars(console: Any) -> Iterator[Any]:
    """Something with rich `Progress`'s `add_task(description, total=, name=, skipped=)`,
    `update(task, description=)` and `advance(task)`, shown where the run is watched."""
    if in_notebook():
        shown = NotebookBars()
        try:
            yield shown
        finally:
            shown.draw(final=True)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("[bold]{task.fields[name]:<10}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.description}"),
               TextColumn("[yellow]{task.fields[skipped]}"))
    with Progress(*columns, console=console, transient=False) as progress:
        yield progress


@dataclass
class _Bar:
    name: str
    total: int
    description: str = ""
    done: int = 0
    began: float = field(default_factory=time.monotonic)
    ended: float | None = None
    skipped: str = ""


class NotebookBars:
    """The bars as one HTML output, redrawn at most a few times a second."""

    EVERY_S = 0.25

    def __init__(self) -> None:
        from IPython.display import display

        self._bars: list[_Bar] = []
        self._drawn = 0.0
        self._handle = display(self._bundle(), raw=True, display_id=True)

    def add_task(self, description: str, total: int = 0, name: str = "", skipped: str = ""
                 ) -> int:
        self._bars.append(_Bar(name, total, description, skipped=skipped))
        self.draw()
        return len(self._bars) - 1

    def update(self, task: int, description: str | None = None) -> None:
        if description is not None:
            self._bars[task].description = description
        self.draw()

    def advance(self, task: int, by: int = 1) -> None:
        bar = self._bars[task]
        bar.done += by
        if bar.done >= bar.total and bar.ended is None:
            bar.ended, bar.description = time.monotonic(), ""
            self.draw(final=True)
        else:
            self.draw()

    def draw(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._drawn < self.EVERY_S:
            return
        self._drawn = now
        if self._handle is not None:
            self._handle.update(self._bundle(), raw=True)

    def _bundle(self) -> dict[str, str]:
        rows, lines = [], []
        for bar in self._bars:
            took = int((bar.ended or time.monotonic()) - bar.began)
            clock = f"{took // 60}:{took % 60:02d}"
            rows.append(
                f"<tr><td><b>{html.escape(bar.name)}</b></td>"
                f"<td><progress value='{bar.done}' max='{max(bar.total, 1)}' "
                f"style='width:14em'></progress></td>"
                f"<td>{bar.done}/{bar.total}</td><td>{clock}</td>"
                f"<td><code>{html.escape(bar.description)}</code></td>"
                f"<td style='color:#a15c00'>{html.escape(bar.skipped)}</td></tr>")
            lines.append(f"{bar.name:<10} {bar.done}/{bar.total} {clock} {bar.description}"
                         + (f" [{bar.skipped}]" if bar.skipped else ""))
        return {"text/html": f"<table>{''.join(rows)}</table>",
                "text/plain": "\n".join(lines) or "starting"}
