"""The notebooks that run the lab, not only read it: `your-own-scheduler` (write a scheduler,
check it against the contract, register it, measure it beside ours) and `run-your-own` (a quick
run on the backends found here, against the reference, and one parameter varied).

`python -m experiments workbooks` writes them to `notebooks/` from the cells below and executes
them (a minute or two: they run experiments), so they are committed with outputs like the
reading notebooks (`notebooks.py`, beside this), and `tests/lab/test_workbooks.py` executes
them again. Each starts with a parameter cell; the test sets it to the quick slice CI can afford.
"""

# ruff: noqa: E501  (the cells' prose is wrapped as it should read, not at the code's width)
from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.writing.notebooks import HERE, Cell, book, code, md, save

__all__ = ["PARAMETERS", "WORKBOOKS", "build"]

#: Each workbook's first cell: what a run of it may change (a papermill-style parameter cell,
#: holding only values, since papermill puts the ones it is given in a cell after it). `RUN`
#: is the run it reads, which the cell after says as the workbook's first line of output.
PARAMETERS: dict[str, str] = {
    "your-own-scheduler": """
RUN = None       # None: measure here, now (a quick run, in a new folder under runs/); or a folder, or 'latest', holding sqlite and sqlite-steady rows to read instead
CONTRACT = None  # None: the whole conformance suite; or a pytest -k expression, 'Scheduler' say
SECONDS = 2      # how long each latency configuration submits
POLLS = [5, 25, 50]  # the poll intervals latency sweeps, in ms
""",
    "run-your-own": """
RUN = None       # the run yours are drawn against: None, the reference run in results/; 'latest'; or a folder
BACKENDS = None  # None: every backend found here (no server is started); or 'memory,sqlite'
LEASES = [0.5, 1, 2]  # the takeover's leases, in seconds
""",
}

YOUR_OWN: list[Cell] = [
    code("""
import experiments as lab
from experiments import ms, say
if RUN is not None:
    lab.use(RUN)
lab.reads() if RUN is not None else say(
    "*Reading the run this notebook makes below: a quick one, in a new folder under `runs/` (the "
    "reference in `results/` is left alone). Set `RUN` above to read one made before instead.*")
"""),
    md("""
# Your own scheduler, beside ours

A scheduler of your own, written in a module, checked against the store contract, registered
with the lab and measured beside the one it varies, in every table and figure. The example is
`experiments/examples/steady_sqlite.py`: SQLite's queue with one thing changed, how an idle
reader waits. Ours looks without the write lock, is woken by the doorbell the processes on the
file ring, and otherwise looks when the earliest hidden row shows; this one tries a take under
the write lock every 10 ms, the first design anyone writes. Change the module (or write one of
your own with the same `open_store`) and run the notebook again.
"""),
    md("## The scheduler"),
    code("""
import inspect
from IPython.display import Markdown
from experiments.examples import steady_sqlite

Markdown(f"```python\\n{inspect.getsource(steady_sqlite.SteadySqliteScheduler)}```")
"""),
    md("""
What opens it is a function with `open_durable`'s signature, `open_store(url, *, lease, poll,
housekeeping)`, an async context manager yielding a `Durable`. The lab calls it in each of its
agent processes with the URL of a place it made for the run (here a fresh SQLite file).
"""),
    md("""
## Register it

By import path, because the stores are opened in the lab's agents, which are other processes:
each imports the module as this kernel did. `like='sqlite'` gives it SQLite's place in every
experiment (a file of its own, a poll sweep in `latency`, takeover and growth as SQLite has).
"""),
    code("""
lab.register('sqlite-steady', 'experiments.examples.steady_sqlite:open_store', like='sqlite',
             scheduler='SteadySqliteScheduler', about='SQLite, a take every poll')
"""),
    md("""
## Does it keep the contract?

`lab.conformance` runs `durability.testing`'s conformance suite on the store the opener opens:
the scheduler's contract (deliveries, lost wakeups, sleepers, leases), the durable's (arrive,
deliver, delete, `work` over it, failures, status and listing), the checkpointer's (claims,
fencing, records, the inbox, and effects performed as they are recorded, counted by an effect
kit of SQLite's) and the bounds' (every refusal comes before any I/O, shown on the store with
its connections closed under it), each test on a place of its own. It runs in a pytest of its
own, since the kernel's event loop is already running. The table says what was skipped, and
what is never run from here, and why.
"""),
    code("""
checked = lab.conformance('sqlite-steady', select=CONTRACT)
checked
"""),
    code("""
say(f\"\"\"{checked.count('passed')} of the contract's {len(checked.outcomes)} tests pass
({checked.count('failed')} failed, {checked.count('skipped')} skipped): the new wait keeps every
promise the old one made, as it should, since a wait decides when a row is taken, never what is
taken.\"\"\"
    if checked else f"**It does not conform**: {checked}")
"""),
    md("""
## Measured beside SQLite's own

A quick run of `latency` (at SQLite's default poll and at the `POLLS` above) and `idle` on
both; the rows come back as a frame, and the run is
written to a folder of its own under `runs/` (the reference in `results/` is left alone).
"""),
    code("""
if RUN is None:  # measure now; else read the run named above
    frame = await lab.run(['latency', 'idle'], backends=['sqlite', 'sqlite-steady'], quick=True,
                          seconds=SECONDS, poll_ms=POLLS)
    lab.use(frame.attrs['where'])
else:
    frame = lab.frame('latency')
frame[frame.metric == 'submit_to_first_pass'].groupby('backend')['value'].describe().round(2)
"""),
    code("lab.figure('latency')"),
    code("""
t = lab.summary('latency')
lab.table('latency')
"""),
    code("""
idle = lab.summary('idle').set_index('backend')
windows = lab.frame('idle').query("metric == 'window'")['value']
window = float(windows.median()) if len(windows) else float('nan')
(idle[['worker_requests', 'worker_cpu']] * [1, 1000]).round(2).rename(
    columns={'worker_requests': 'worker req/s', 'worker_cpu': 'worker CPU ms/s'})
"""),
    code("""
def p50(backend):
    return float(t[(t.backend == backend) & t.poll_ms.isna()]['p50'].iloc[0])

say(f\"\"\"At 20 submissions a second **sqlite-steady** starts a workflow in
{ms(p50('sqlite-steady'))} at the median against {ms(p50('sqlite'))} for SQLite's own
scheduler, and idle it sends {idle.loc['sqlite-steady', 'worker_requests']:,.0f} requests a
second against {idle.loc['sqlite', 'worker_requests']:,.2g}, counted over a {window:,.0f} s window: a
take every poll pays about half a poll in latency, and a write transaction every poll while
there is nothing to do, which is what the doorbell and the unlocked look remove. A quick run is
a few dozen submissions and a short idle window, which the worker's start-up can still fall in
(`idle.ipynb` reads the reference's, two minutes after a settling pause): run it longer
(`quick=False`, or `seconds=`) before quoting it.\"\"\")
"""),
]

RUN_YOUR_OWN: list[Cell] = [
    code("""
import experiments as lab
from experiments import ms, run_line, say, table
lab.use(RUN)
lab.reads()
"""),
    md("""
# Run the lab yourself

The reading notebooks show a run of the lab, the reference in `results/` unless told another.
This one makes runs of its own: a quick `latency` run on the backends this machine has, drawn
against the run above (`RUN`), then one parameter varied, the takeover's lease (on SQLite,
which needs no server). Every run writes a folder of its own under `runs/`; nothing here
touches `results/`.
"""),
    code("""
here = lab.found(BACKENDS)
say(f"Found here: {', '.join(here)} (a server the lab would have to start is left out).")
"""),
    md("## A quick latency run, beside the reference"),
    code("""
frame = await lab.run('latency', backends=here, quick=True)
frame.head()
"""),
    code("""
mine = table('latency', where=frame.attrs['where'])
reference = table('latency')  # the run RUN names

def at20(t, label):
    rows = t[(t.rate == 20) & t.poll_ms.isna() & (t.variant == 'default')]
    return rows.set_index('backend')[['p50', 'p99']].add_prefix(f'{label} ')

side = at20(mine, 'yours').join(at20(reference, 'reference'))
side.round(2)
"""),
    code("""
from experiments.readers.figures import colour, figure, label, marker

fig, axes = figure(width=7, height=3.6)
ax = axes[0][0]
for i, backend in enumerate(side.index):
    for column, filled in (('reference p50', False), ('yours p50', True)):
        ax.scatter([side.loc[backend, column]], [i], s=60, marker=marker(backend),
                   color=colour(backend) if filled else 'none', edgecolors=colour(backend),
                   label=None if i else ('yours (filled)' if filled else 'reference (hollow)'))
ax.set_yticks(range(len(side)), side.index)
ax.set_xscale('log')
label(ax, 'p50 at 20 submissions/s: your quick run against the reference', 'milliseconds', '')
ax.legend(loc='lower right');
"""),
    code("""
apart = (side['yours p50'] / side['reference p50']).dropna()
moved = [b for b in apart.index if not 0.5 <= apart[b] <= 2]
said = ', '.join(f'{b} {ms(side.loc[b, "yours p50"])} against {ms(side.loc[b, "reference p50"])}'
                 for b in moved)
say(f\"\"\"Of {len(apart)} backends measured in both, {len(apart) - len(moved)} have a median
within a factor of two of the reference's{f'; {said} moved further' if moved else ''}. A quick
run is a few dozen submissions on whatever else this machine is doing and the reference
thousands, so read a factor of two as the same; a bigger move is this machine's load, or code
changed since the reference ran (`run_line('latency')` names its revision):
run `quick=False` before saying which.\"\"\")
"""),
    md("""
## One parameter varied: the lease

The lease is how long a dead worker's workflow waits before another worker may take it over,
so the takeover should follow it: about lease + tick at most (tick: a quarter of the lease).
Any parameter an experiment has can be given a list (`lab.parameters('takeover')` lists them);
each value is a configuration of its own, and the rows carry it.
"""),
    code("lab.parameters('takeover')"),
    code("""
leases = await lab.run('takeover', backends='sqlite', quick=True, lease_s=LEASES, phase='mid-step',
                       figures=False)  # drawn below, lease by lease
took = table('takeover', where=leases.attrs['where'])
took[['backend', 'lease_s', 'n', 'median', 'lease_plus_tick', 'median_vs_bound']].round(3)
"""),
    code("""
fig, axes = figure(width=6, height=3.6)
ax = axes[0][0]
for backend, rows in took.groupby('backend', sort=False):
    ax.plot(rows.lease_s, rows['median'], marker=marker(backend), color=colour(backend),
            label=f'{backend}: measured')
ax.plot(took.lease_s, took.lease_plus_tick, linestyle='--', color='grey', label='lease + tick')
label(ax, 'takeover after a SIGKILL mid-step', 'lease (s)', 'seconds to the next pass')
ax.legend();
"""),
    code("""
ratio = took['median'] / took['lease_s']
say(f\"\"\"From a {took.lease_s.min():g} s lease to a {took.lease_s.max():g} s one the takeover
goes from {took['median'].iloc[0]:.2f} s to {took['median'].iloc[-1]:.2f} s, {ratio.min():.2f} to
{ratio.max():.2f} times the lease, {'every one' if (took.median_vs_bound <= 1.05).all() else 'not every one'}
within lease + tick: the lease is the price of a dead worker, so choose it as the longest you
can wait.\"\"\")
"""),
]

WORKBOOKS: dict[str, list[Cell]] = {"your-own-scheduler": YOUR_OWN, "run-your-own": RUN_YOUR_OWN}


def cells(name: str, parameters: str | None = None) -> list[Cell]:
    """Workbook `name`'s cells, its parameter cell first (`parameters` in its place if given)."""
    return [code(parameters or PARAMETERS[name]), *WORKBOOKS[name]]


def build(names: list[str] | None = None, *, execute: bool = True, where: Path = HERE,
          timeout: int = 600) -> list[Path]:
    """Write the workbooks (and execute them, saving their outputs); return their paths. A
    name that is no workbook is a `ValueError`."""
    return save("workbook", WORKBOOKS, notebook, names, execute=execute, where=where,
                timeout=timeout)


def notebook(name: str, parameters: str | None = None) -> Any:
    """Workbook `name` as an unexecuted notebook (`parameters` in place of its first cell)."""
    return book(cells(name, parameters))
