"""The lab: experiments that compare every scheduler on the costs that decide a queue design.

    import experiments as lab
    frame = await lab.run("latency", backends=["memory", "sqlite"], quick=True)   # a notebook
    lab.use(frame.attrs["where"]); lab.table("latency")                           # read it
    lab.register("mine", "mypkg.mymod:open_store", like="sqlite")   # a scheduler of your own
    lab.conformance("mine")                                          # the store contract on it

The rest, and `python -m experiments`: the README's "The lab". Every agent process imports
this package, so importing it loads nothing heavy: the notebooks' readers come on first use.
"""

from typing import Any

# The package: one module per experiment (`EXPERIMENTS`), each a function from (backend,
# parameters) to tidy rows; the backends registered once (`backends.BACKENDS`; yours by
# `registry`, the store contract run on them by `conforming`); and the harness they share
# (agents, servers, isolation, counters, metadata) in `harness` and `servers`. The notebooks
# read a run's folder, or the reference run in `results/`, through `reading` (`use` says which).
from experiments.api import conformance, found, parameters, register, run, run_sync, use, where
from experiments.catalogue import EXPERIMENTS

#: The notebooks' readers, from `experiments.reading`, loaded (with pandas) when first asked.
_READERS = ("blank", "figure", "frame", "ms", "overview", "pick", "prose", "reads", "run_line",
            "say", "shown", "table", "times", "versus")

__all__ = ["EXPERIMENTS", "conformance", "found", "parameters", "register", "run", "run_sync",
           "use", "where", *_READERS]


def __getattr__(name: str) -> Any:
    if name in _READERS:
        from experiments import reading

        return getattr(reading, name)
    raise AttributeError(f"module 'experiments' has no attribute {name!r}")
