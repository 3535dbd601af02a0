"""The lab: experiments that compare every scheduler on the costs that decide a queue design.

    import experiments as lab
    frame = await lab.run("latency", backends=["memory", "sqlite"], quick=True)   # a notebook
    lab.use(frame.attrs["where"]); lab.table("latency")                           # read it
    lab.register("mine", "mypkg.mymod:open_store", like="sqlite")   # a scheduler of your own
    lab.conformance("mine")                                          # the store contract on it

`python -m experiments`: `docs/lab.md`. Every agent process imports this package, so
importing it loads nothing heavy: the notebooks' readers come on first use.
"""

from typing import Any

# The map is the tree, each room's `__init__` saying what it holds: `measures/` (one module per
# experiment), the `harness/` they are made with, the `readers/` of what they wrote, the
# `faults/` runs, `conforming/`, `writing/` (the notebooks) and `commands/` above them all;
# `catalogue.py` and `results.py` are the floor both measuring and reading stand on.
from experiments.api import conformance, found, parameters, register, run, run_sync, use, where
from experiments.catalogue import EXPERIMENTS

#: The notebooks' readers, from `experiments/readers/reading.py`, loaded (with pandas) when
#: first asked.
_READERS = ("blank", "compare", "figure", "frame", "ms", "overview", "pick", "prose", "reads",
            "resampled", "run_line", "say", "shown", "summary", "table", "times", "versus")

__all__ = ["EXPERIMENTS", "conformance", "found", "parameters", "register", "run", "run_sync",
           "use", "where", *_READERS]


def __getattr__(name: str) -> Any:
    if name in _READERS:
        from experiments.readers import reading

        return getattr(reading, name)
    raise AttributeError(f"module 'experiments' has no attribute {name!r}")
