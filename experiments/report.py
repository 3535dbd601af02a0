"""`python -m experiments report`: the comparison tables, from whatever is in `results/`.

Each experiment module summarises its own rows (`summary(frame)`); this module prints them,
one table per experiment, under the line that says which run they came from.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from experiments.catalogue import EXPERIMENTS
from experiments.results import RESULTS, describe, load

__all__ = ["report"]


def report(where: Path = RESULTS, names: Sequence[str] = EXPERIMENTS) -> str:
    import pandas

    parts: list[str] = []
    with pandas.option_context("display.width", 160, "display.max_columns", 30,
                               "display.max_rows", 400, "display.float_format", "{:,.3g}".format):
        for name in names:
            if not (where / f"{name}.csv").exists():
                continue
            module = importlib.import_module(f"experiments.{name}")
            frame = load(name, where)
            if frame.empty:
                parts.append(f"== {name}: no rows ==")
                continue
            table = module.summary(frame)
            parts.append(f"== {name}: {module.TITLE} ==\n{describe(name, where)}\n"
                         f"{table.to_string(index=False)}")
    return "\n\n".join(parts) if parts else f"no results in {where}"
