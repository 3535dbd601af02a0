"""The lab: experiments that compare every scheduler on the costs that decide a queue design.

    python -m experiments run [NAME ...] [--backends ...] [--quick] [--repeat N]
    python -m experiments report        the comparison tables from results/
    python -m experiments backends      what was found, how, and why the rest was not
    python -m experiments images        build local container images where no registry answers

One module per experiment (`EXPERIMENTS`), each a function from (backend, parameters) to tidy
rows; the backends are registered once (`backends.BACKENDS`); the harness they share
(agents, servers, isolation, counters, metadata) is `harness` and `servers`. Results land in
`results/<experiment>.csv` and `.json`, figures in `results/figures/`, and notebooks read them
back through `results.load`. This package is not part of the `durability` distribution.
"""

#: Every experiment, in the order a full run takes them.
EXPERIMENTS = ("latency", "idle", "growth", "takeover", "throughput", "scaling")
