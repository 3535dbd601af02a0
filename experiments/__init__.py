"""The lab: experiments that compare every scheduler on the costs that decide a queue design.

    import experiments as lab
    frame = await lab.run("latency", backends=["memory", "sqlite"], quick=True)   # a notebook
    lab.use(frame.attrs["where"]); lab.table("latency")                           # read it
    lab.register("mine", "mypkg.mymod:open_store", like="sqlite")   # a scheduler of your own
    lab.conformance("mine")                                          # the store contract on it

    python -m experiments run [NAME ...] [--backends ...] [--quick] [--repeat N]
    python -m experiments report        the comparison tables from a run's folder
    python -m experiments figures       draw a run's figures again from its rows
    python -m experiments findings      the README's findings, computed from a run's rows
    python -m experiments backends      what was found, how, and why the rest was not
    python -m experiments images        build local container images where no registry answers
    python -m experiments workbooks     write and execute the notebooks that run the lab

One module per experiment (`EXPERIMENTS`), each a function from (backend, parameters) to tidy
rows; the backends are registered once (`backends.BACKENDS`; yours by `registry`, the
contract run on them by `conforming`); the harness they share
(agents, servers, isolation, counters, metadata) is `harness` and `servers`. A run's results
land in a folder of its own under `runs/` (`<experiment>.csv` and `.json`, figures in
`figures/`); the reference run is `results/`, written only when asked (`--reference`). The
notebooks read either through `reading` (`use` says which). This package is imported by
every agent process, so importing it loads nothing heavy: the readers come on first use.
"""

from typing import Any

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
