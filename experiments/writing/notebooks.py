"""The notebooks, as source: `python -m experiments notebooks` writes `notebooks/*.ipynb` from
the cells below and executes each against `results/`, so they are committed with outputs and
read on a repository page without running anything. Each opens by naming the run it reads
(`PARAMETERS`) and saying so as its first line of output (`READS`).

A notebook is a reader's page: a question, the run it shows, a figure, a table, and an answer
whose numbers are computed from the frame above it (`say(f"...")`), never typed in. The
cells are kept here rather than edited in JupyterLab so that a change to a notebook is a
reviewable diff of Python, and the outputs are regenerated, never hand-kept.
"""

# ruff: noqa: E501  (the cells' prose is wrapped as it should read, not at the code's width)
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

__all__ = ["KERNEL", "NOTEBOOKS", "PARAMETERS", "READS", "book", "build", "save"]

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "notebooks"

Cell = tuple[str, str]  # ("md" | "code", source)

#: Every notebook's first cell, its parameter cell (tagged as papermill's), holds only the
#: run it reads: papermill puts the values it is given in a cell of their own after it, so
#: anything done with them must come after that, in `READS`.
PARAMETERS = """
RUN = {run!r}  # which run this reads: None, the reference run in results/; 'latest', your newest run under runs/; or a folder
"""
#: Every notebook's second cell: the readers pointed at `RUN`, and which run that is said as
#: the notebook's first line of output.
READS = """
import experiments as lab
from experiments import (blank, figure, frame, ms, overview, pick, prose, resampled, run_line, say, shown,
                         summary, table, times, versus)
lab.use(RUN)
lab.reads(hint='set `RUN` above, or call `lab.use(path)`')
"""


#: The kernel the notebooks name: the one ipykernel installs in `.venv`, named as it names
#: itself, so JupyterLab finds nothing to correct on opening one and saves it unchanged (a
#: "Python 3" here made every notebook opened a change to the checkout).
KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def md(text: str) -> Cell:
    return ("md", text.strip())


def code(text: str) -> Cell:
    return ("code", text.strip())


LATENCY: list[Cell] = [
    md("""
# Latency: how soon does a submitted workflow start?

An API process submits workflows (`arrive`) on an open-loop Poisson schedule, fixed in advance,
while one worker process (pool 16) runs a one-step body. The latency of a submission is the
worker's *pass started* event minus the moment just before the `arrive` call, both on the
host's wall clock. Every submission is a row; percentiles are computed here. Polled
schedulers also run at several poll intervals, since the poll is their floor.
"""),
    code("run_line('latency')"),
    code("figure('latency')"),
    code("""
t = summary('latency')
shown('latency', 'headline')
"""),
    code("""
def p(backend, column='p50', rate=20.0, poll=None, variant='default'):
    rows = t[(t.backend == backend) & (t.rate == rate) & (t.variant == variant)]
    rows = rows[rows.poll_ms.isna()] if poll is None else rows[rows.poll_ms == poll]
    return float(rows[column].iloc[0]) if len(rows) else float('nan')

say(f\"\"\"At 20 submissions a second the blocking and woken schedulers start a workflow in about
a millisecond: **redis-stream** {ms(p('redis-stream'))} at the median and {ms(p('redis-stream', 'p99'))}
at p99, **redis-set with its doorbell** {ms(p('redis-set'))} / {ms(p('redis-set', 'p99'))},
**postgres with notifications** {ms(p('postgres'))} / {ms(p('postgres', 'p99'))}, **sqlite** rung
across processes by its doorbell {ms(p('sqlite'))} / {ms(p('sqlite', 'p99'))}. Memory, the
same worker with no store in between, takes {ms(p('memory'))}: the rest is the store and the
hop between processes. The polled ones pay their poll: **redis-set-polled** (the design as
published, 50 ms) {ms(p('redis-set-polled'))} and **postgres-polled** {ms(p('postgres-polled'))}
at the median, about half a poll, with p99 near a whole one
({ms(p('redis-set-polled', 'p99'))}, {ms(p('postgres-polled', 'p99'))}). The stream's median over the
doorbelled set's is {times(versus('latency', 'redis-stream', 'redis-set'))}. The intervals here
are {resampled('latency', 'redis-stream', 'redis-set')}.\"\"\")
"""),
    md("## Against the arrival rate"),
    code("""
rates = t[t.poll_ms.isna() & (t.variant == 'default')].pivot_table(
    index='backend', columns='rate', values='p50', sort=False)
shown('latency', 'rates')
"""),
    code("""
top = max(rates.columns)
woken = [b for b in ('redis-stream', 'redis-set', 'postgres') if b in rates.index]
span = ', '.join(f'{b} {ms(rates.loc[b].min())} to {ms(rates.loc[b].max())}' for b in woken)
swamped = [b for b in rates.index if rates.loc[b, top] > 5 * rates.loc[b, 20.0]]
def started(b, rate):
    rows = t[(t.backend == b) & (t.rate == rate) & t.poll_ms.isna() & (t.variant == 'default')]
    short = rows[rows.n < rows.submitted]
    return (f' ({short.n.iloc[0]:,.0f} of {short.submitted.iloc[0]:,.0f} started in time, so even that'
            ' understates it)') if len(short) else ''

swamped_text = (
    f" Not everything keeps up at {top:g}/s; what does not queues: "
    + ', '.join(f'{b} {ms(rates.loc[b, top])} at the median{started(b, top)} against '
                f'{ms(rates.loc[b, 20.0])} at 20/s' for b in swamped) + '.'
) if swamped else ''
say(f\"\"\"From 5 to {top:g} submissions a second the woken schedulers' medians stay within a few
milliseconds ({span}); a busy worker is already awake, so the stream's and the set's fall as the
rate rises, while Postgres' rises at {top:g}/s, where each start costs a notification and a
transaction.{swamped_text} An open loop shows a scheduler that cannot keep up as a median that
climbs with the rate, not as a lower rate.\"\"\")
"""),
    md("## The doorbell against polling"),
    code("""
polls = t[t.poll_ms.notna()].pivot_table(index='backend', columns='poll_ms', values='p50',
                                          sort=False)
shown('latency', 'polls')
"""),
    code("""
fastest = polls.columns.min()
say(f\"\"\"A polled scheduler's median is about half its poll: redis-set-polled
{ms(p('redis-set-polled', poll=fastest))} at a {fastest:g} ms poll and
{ms(p('redis-set-polled', poll=polls.columns.max()))} at {polls.columns.max():g} ms. Polling faster
buys latency with idle requests (see `idle.ipynb`). The doorbell removes the trade: the same
sorted set, rung by the script that makes a member visible, starts a workflow in
{ms(p('redis-set'))}: the published design at its default poll takes
{times(versus('latency', 'redis-set-polled', 'redis-set'))} as long, while the doorbell adds nothing to
what an idle worker costs (see `idle.ipynb`).\"\"\")
"""),
    md("## Beside the job queues people would pick instead"),
    code("shown('latency', 'rivals')"),
    code("""
pairs = [('redis-stream', 'saq'), ('redis-stream', 'streaq'), ('postgres', 'pgqueuer'),
         ('postgres', 'procrastinate')]
present = [(a, b) for a, b in pairs if {a, b} <= set(t.backend)]
say('At 20 submissions a second, the median start of ours over theirs (each at its default '
    'settings):\\n\\n'
    + '\\n'.join(f'- **{a}** against **{b}**: {times(versus("latency", a, b))}, '
                  f'{resampled("latency", a, b)}' for a, b in present)
    + '\\n\\nA ratio from one run near 1 can read the other way on another day; repeats '
      '(`--repeat 3`) put that spread into its interval.')
"""),
]

IDLE: list[Cell] = [
    md("""
# Idle cost: what does a worker with nothing to do cost its server?

One worker with `work()`'s defaults and an empty queue, measured over a window after start-up:
what the worker says it sent (`durable.traffic`), what the server counted (Redis `INFO
commandstats` on a server of its own; Postgres `pg_stat_statements` for the run's database),
and CPU seconds per second of worker and server.
"""),
    code("run_line('idle')"),
    code("figure('idle')"),
    code("t = summary('idle').set_index(['backend', 'variant'])\nshown('idle')"),
    code("""
def v(backend, column='worker_requests', variant='default'):
    try:
        return float(t.loc[(backend, variant), column])
    except KeyError:
        return float('nan')

woken = ['redis-stream', 'redis-set', 'postgres', 'sqlite']
say(f\"\"\"An idle worker on a blocking or woken scheduler sends at most {max(v(b) for b in woken):.2g} requests a second:
redis-stream {v('redis-stream'):.2g}/s, redis-set with its doorbell {v('redis-set'):.2g}/s,
postgres {v('postgres'):.2g}/s (by the worker's own count) and sqlite {v('sqlite'):.2g} statements
a second (its doorbell wakes it; a look now and then covers a missed ring), using
{v('redis-stream', 'worker_cpu') * 1000:.2g}, {v('redis-set', 'worker_cpu') * 1000:.2g},
{v('postgres', 'worker_cpu') * 1000:.2g} and {v('sqlite', 'worker_cpu') * 1000:.2g} ms of CPU a
second. A polled one pays its poll every second it waits: redis-set-polled
{v('redis-set-polled'):.0f}/s, postgres-polled {v('postgres-polled'):.0f}/s. The server's counts run higher than the
worker's on Redis because `INFO commandstats` counts the commands a script runs inside the
server too.\"\"\")
"""),
    md("Where an idle worker's requests go, by name (per second):"),
    code("""
from experiments.readers.figures import order
f = frame('idle')
named = f[f.metric == 'worker_request'].pivot_table(index='request', columns='backend',
                                                     values='value', aggfunc='median')
blank(named[order(named.columns)])
"""),
]

GROWTH: list[Cell] = [
    md("""
# Growth: how big does each queue get when workflows wake many times?

Workflows are submitted at a steady rate; each sleeps briefly many times, so every wakeup goes
through the queue again. The queue's `footprint()` (stream entries and sleepers, sorted-set
members, rows; and their bytes) is sampled throughout. The stream scheduler runs with trimming
(the worker's housekeeping) and without, on Redis 7 (a safe `MINID` trim) and 8.2
(`XTRIM ... ACKED`).
"""),
    code("run_line('growth')"),
    code("figure('growth')"),
    code("t = summary('growth')\nshown('growth')"),
    code("""
def g(backend, trimming, column='peak_entries'):
    rows = t[(t.backend == backend) & (t.trimming.astype(str) == str(trimming))]
    return float(rows[column].iloc[0]) if len(rows) else float('nan')

wakeups = float(t['wakeups'].max())
most = int(t['repeats'].max()) if 'repeats' in t else 1
runs = ("Each is one run's figure, with nothing to resample: no interval." if most == 1 else
        f"Each is the median of {most} runs; the table above gives its interval where the runs differ.")
ends = (g('redis-stream', True, 'final_entries'), g('redis-stream-8.2', True, 'final_entries'))
ended = ('ends empty on both' if ends == (0, 0) else
         f'ends at {ends[0]:,.0f} and {ends[1]:,.0f} entries')
say(f\"\"\"Untrimmed, the stream keeps every wakeup ever made: {g('redis-stream', False, 'final_entries'):,.0f}
entries at the end for {wakeups:,.0f} wakeups on Redis 7, and
{g('redis-stream-8.2', False, 'final_entries'):,.0f} on 8.2. Trimmed, it peaks at
{g('redis-stream', True):,.0f} on 7 and {g('redis-stream-8.2', True):,.0f} on 8.2 and {ended}:
the `MINID` trim this project runs where `XTRIM ... ACKED` is missing keeps Redis 7 as short as
8.2. The sorted set never holds more than one member per workflow (peak
{g('redis-set', ''):,.0f}); the SQL queues hold one row per workflow too (postgres
{g('postgres', ''):,.0f}, sqlite {g('sqlite', ''):,.0f}), though Postgres' table keeps its size
on disk ({g('postgres', '', 'final_kib'):,.0f} KiB at the end) until vacuum. {runs}\"\"\")
"""),
]

TAKEOVER: list[Cell] = [
    md("""
# Takeover: how long until a dead worker's workflow runs again?

Two worker processes share the queue. A workflow whose step holds the pass is submitted, and
whichever worker starts it is SIGKILLed: *mid-step* (a tick and a half into the step) or
*after-write* (the moment an earlier step's record landed). The takeover is the time from the
kill to the other worker's *pass started*; the design's bound is about lease + tick (tick is
a quarter of the lease, at most a second). Each trial starts from idle workers.
"""),
    code("run_line('takeover')"),
    code("figure('takeover')"),
    code("t = summary('takeover')\nshown('takeover')"),
    code("""
from experiments.readers.summaries.takeover import TYPICAL
# ours alone: a rival's kills (mid-job) are at its own settings, with no lease + tick bound
ours, rivals = t[t['phase'] != 'mid-job'], t[t['phase'] == 'mid-job']
worst = ours.sort_values('median_vs_bound', ascending=False).iloc[0]
best = ours.sort_values('median_vs_bound').iloc[0]
within = (ours['median_vs_bound'] <= 1.05).mean()
of_lease = ours['median'] / ours['lease_s']
never = rivals[rivals['taken_over'] == 0]
took = rivals[rivals['taken_over'] > 0].sort_values('median')
nowhere = ' or '.join(f'{r.backend} ({r.recovery})' for r in never.itertuples())
theirs = (f\" The last table is the rivals': each killed mid-job at its own settings made\"
          f\" from a {rivals.lease_s.iloc[0]:g} s lease, they take from\"
          f\" {took.iloc[0].backend}'s {took.iloc[0]['median']:.2f} s to\"
          f\" {took.iloc[-1].backend}'s {took.iloc[-1]['median']:.1f} s\"
          + (f\", and never at {nowhere}.\" if nowhere else \".\") if len(took) else \"\")
say(f\"\"\"The first table is the figure the overview and the design documents' table quote,
the **{TYPICAL}** (a kill can land at any moment of a pass); the two below split it by where
the kill landed. {within:.0%} of our configurations take over within lease + tick at the
median, and the median takeover is {of_lease.min():.2f} to {of_lease.max():.2f} times the
lease: the lease is what a dead worker costs, so choose it as the longest you can wait, not
the longest a step takes (a live worker renews it every tick). The slowest relative to its
bound is **{worst.backend}** at a {worst.lease_s:g} s lease ({worst.phase}): {worst['median']:.2f} s
({worst.median_lo:.2f} to {worst.median_hi:.2f}), {worst.median_vs_bound:.0%} of lease + tick; the
quickest **{best.backend}** ({best.lease_s:g} s, {best.phase}) at {best['median']:.2f} s. With
{ours['n'].min():.0f} kills a configuration the intervals are rough: most backends' cells overlap,
so the table ranks none of them above another.{theirs}\"\"\")
"""),
]

THROUGHPUT: list[Cell] = [
    md("""
# Throughput: how much work per second, and what does a pass cost?

The workflows are submitted first, then 1, 2 or 4 worker processes start together; the rate is
the workflows completed over the span from the first pass start to the last pass end. CPU per
pass is the workers' CPU over that span; requests and round trips per pass are the workers'
own counts (`durable.traffic`).
"""),
    code("run_line('throughput')"),
    code("figure('throughput')"),
    code("t = summary('throughput')\nshown('throughput', 'rates', 'costs')"),
    code("""
def r(backend, processes=1, column='passes_per_s', variant='default'):
    rows = t[(t.backend == backend) & (t.processes == processes) & (t.variant == variant)]
    return float(rows[column].iloc[0]) if len(rows) else float('nan')

lo = {n: r('redis-stream', n, 'passes_per_s_lo') for n in (1, 4)}
hi = {n: r('redis-stream', n, 'passes_per_s_hi') for n in (1, 4)}
apart = ('' if lo[1] > hi[4] or lo[4] > hi[1] else
         ', where the intervals of 1 and 4 overlap: not distinguishable at this sample size')
say(f\"\"\"One worker process completes {r('redis-stream'):,.0f} one-step workflows a second on
redis-stream, {r('redis-set'):,.0f} on redis-set, {r('postgres'):,.0f} on postgres and
{r('sqlite'):,.0f} on sqlite ({r('memory'):,.0f} in memory, the worker alone). A pass costs
{r('redis-stream', column='requests_per_pass'):.1f} requests on Redis in
{r('redis-stream', column='round_trips_per_pass'):.2f} round trips (a busy worker's scripts share
writes), and {r('postgres', column='requests_per_pass'):.2f} statements on Postgres in
{r('postgres', column='round_trips_per_pass'):.2f} round trips. On this 2-core machine more
processes mostly share the same two cores with the server: redis-stream goes
{r('redis-stream', 1):,.0f} → {r('redis-stream', 2):,.0f} → {r('redis-stream', 4):,.0f} with
1, 2 and 4 processes{apart}. Each figure is the median of {t['runs'].min():.0f} repeats; with so
few, its interval is about their range.\"\"\")
"""),
    md("## Beside the job queues people would pick instead"),
    code("shown('throughput', 'rivals')"),
    code("""
def best(backend):
    rows = t[(t.backend == backend) & (t.processes == 1)]
    return float(rows['passes_per_s'].max()) if len(rows) else float('nan')

def better(backend):
    rows = t[(t.backend == backend) & (t.processes == 1)]
    return rows.sort_values('passes_per_s').variant.iloc[-1] if len(rows) else 'default'

rivals = [b for b in ('saq', 'arq', 'streaq', 'pgqueuer', 'procrastinate') if b in set(t.backend)]
ahead = best('pgqueuer') > r('postgres')
size = frame('throughput').query("metric == 'passes'").value.median()
say(f\"\"\"From one process, each at its better variant (default or tuned):
{', '.join(f'**{b}** {best(b):,.0f}/s' for b in rivals)}. On Redis this project's stream
scheduler completes {times(versus('throughput', 'redis-stream', 'saq', variant=better('saq')))}
as many as saq ({better('saq')}) and
{times(versus('throughput', 'redis-stream', 'streaq', variant=better('streaq')))} as many as
streaq ({better('streaq')}), each pass with a checkpoint written. On Postgres, {'**pgqueuer outruns this project' + "'" + 's scheduler**' if ahead else
'this project' + "'" + 's scheduler outruns pgqueuer'}
({best('pgqueuer'):,.0f}/s against {r('postgres'):,.0f}/s, using
{r('pgqueuer', column='worker_cpu_per_pass'):.2f} ms of worker CPU a job against
{r('postgres', column='worker_cpu_per_pass'):.2f}){':' if ahead else ', though'} a pgqueuer job is a
row dequeued in batches with no checkpoint to claim, record and release, while procrastinate
({best('procrastinate'):,.0f}/s) takes one job per transaction. Postgres over pgqueuer ({better('pgqueuer')}):
{times(versus('throughput', 'postgres', 'pgqueuer', variant=better('pgqueuer')))}. Every
ratio here is at {size:,.0f} workflows preloaded per configuration, bootstrapped over
{t['runs'].min():.0f} repeats a side; a burst of another size may give another ratio (a
batching queue gains more from a deep one), and this run measures only the one.\"\"\")
"""),
]

SCALING: list[Cell] = [
    md("""
# Scaling: how does each cost grow as the work grows?

Measured inside one process against each store, no worker running: the read every pass pays
for its checkpoint (`claim` + `load` + `release`) against 10 to 10,000 records or inbox
entries, and a take (`take` + `finish`) and the timer's `wake_due` against 1,000 to 100,000
queued or sleeping workflows. The slope is that of log(cost) on log(size): about 0 is flat,
about 1 is linear in the size.
"""),
    code("run_line('scaling')"),
    code("figure('scaling')"),
    code("t = summary('scaling')\nshown('scaling')"),
    code("""
from experiments.readers.summaries.scaling import FLAT

def s(backend, dimension):
    rows = t[(t.backend == backend) & (t.dimension == dimension)]
    return float(rows['slope'].iloc[0]) if len(rows) else float('nan')

stores = [b for b in ('redis-stream', 'redis-set', 'postgres', 'sqlite') if b in set(t.backend)]
deepest = max(int(c.removeprefix('ms@').replace(',', '')) for c in t.columns if c.startswith('ms@'))

def big(backend, dimension='cancel'):
    rows = t[(t.backend == backend) & (t.dimension == dimension)]
    return float(rows[f'ms@{deepest:,}'].iloc[0]) if len(rows) else float('nan')
say(f\"\"\"A checkpoint is read whole on every pass, so that cost grows with it, nearly linearly
once the records dominate the round trip (slopes {', '.join(f'{b} {s(b, "records"):.2f}' for b in stores)}),
inbox entries alike: the documents' "an inbox has no bound" gap, measured. Taking work does
not grow with the queue (slopes {', '.join(f'{b} {s(b, "ready"):.2f}' for b in stores)}), and
neither does the timer's look at the sleepers on the server stores
({', '.join(f'{b} {s(b, "sleeping"):.2f}' for b in stores)}); the memory store's `wake_due`
walks every sleeper (slope {s('memory', 'sleeping'):.2f}), which is fine for tests and the
reason it is not a production store. Cancelling a queued workflow is where the stream pays for
being addressed by entry id: it reads the stream to find the workflow's entries (slope
{s('redis-stream', 'cancel'):.2f}, {ms(big('redis-stream'))} at {deepest:,.0f} queued), while the
set and the SQL queues delete one member or row ({ms(big('redis-set'))} and
{ms(big('postgres'))}): the design document's "cancelling costs a scan", measured. A slope
below 0 ({', '.join(f'{b} {d} {v:.2f}' for b, d, v in t[t.slope < 0][['backend', 'dimension', 'slope']].itertuples(index=False)) or 'none here'})
is noise, not a cost that shrinks: each size ran once, at its own moment, and the table reads
any slope under {FLAT} either way as flat.\"\"\")
"""),
]

SCALE_OUT: list[Cell] = [
    md("""
# Scale-out: what does a Redis Cluster carry as nodes are added?

Both Redis schedulers on local clusters of 1, 2, 3 and 6 masters the lab starts, their queues
split over 1 to 16 shards (`?shards=N`: shard i's keys carry the hash tag `{ns:i}`, so the
shards land wherever their slots live). Around a saturated run (the throughput experiment's,
at 1, 2 and 4 worker processes) every master's `INFO commandstats` and `INFO cpu` are read:
what each node spends per pass, and the busiest node's share of it. This machine has two
cores, so more nodes cannot add throughput here; what carries to a cluster with one master
per machine is each node's cost per pass, and the busiest node is the one that saturates
first.
"""),
    code("run_line('scale-out')"),
    code("figure('scale-out')"),
    md("""
## The model

A Redis node runs commands on one thread, so a node with a machine of its own saturates when
it spends one CPU second a second. If the busiest node spends `b` CPU seconds a pass, the
cluster carries at most `X = 1 / b` passes a second. Write `C` for the nodes' CPU per pass
summed and `s` for the busiest node's share, so `b = s · C`. One node: `s = 1`, the ceiling
`1 / C`. Shards spread evenly over `N` nodes, at no extra cost per pass: `s = 1 / N`, the
ceiling `N / C`, the line marked N·X. The queue on one slot keeps its share of the work on one
node, so its ceiling stays near one node's; what leaves that node anyway (each workflow's
checkpoint keys carry the workflow's own tag) lifts it a little. The interval is a bootstrap
over each configuration's runs.
"""),
    code("t = table('scale-out')\nshown('scale-out', 'ceiling')"),
    code("""
def at(backend, masters, shards, column='ceiling'):
    rows = t[(t.backend == backend) & (t.masters == masters) & (t.shards == shards)]
    return float(rows[column].iloc[0]) if len(rows) else float('nan')

most, top = int(t.masters.max()), int(t.shards.max())
lines = []
for b in dict.fromkeys(t.backend):
    x = at(b, 1, 1)
    one_slot, spread = at(b, most, 1), at(b, most, top)
    line = (f'- **{b}**: one master saturates at {x:,.0f} passes a second '
            f'({at(b, 1, 1, "ceiling_lo"):,.0f} to {at(b, 1, 1, "ceiling_hi"):,.0f}); at {most} '
            f'masters the single-slot queue reaches {one_slot:,.0f} ({one_slot / x:.2f} times), '
            f'its busiest master doing {at(b, most, 1, "busiest_share"):.0%} of the nodes\\' work '
            f'and spending {at(b, most, 1, "busiest_cpu_per_pass"):.3f} ms a pass, against '
            f'{at(b, 1, 1, "busiest_cpu_per_pass"):.3f} ms on one master')
    if top > 1:
        line += (f', and {top} shards {spread:,.0f} ({spread / x:.2f} times, against {most} '
                 f'for N·X): the busiest master\\'s share falls to '
                 f'{at(b, most, top, "busiest_share"):.0%}, but the nodes\\' CPU per pass grows '
                 f'from {at(b, 1, 1, "nodes_cpu_per_pass"):.3f} ms to '
                 f'{at(b, most, top, "nodes_cpu_per_pass"):.3f} ms')
    lines.append(line + '.')
sharded = bool(t.shards_option.all()) if 'shards_option' in t else True
say('\\n'.join(lines) + ('' if sharded else '\\n\\nThe store this run measured had no `shards` '
    'option yet, so only the single-slot layout is here; the sharded lines come with a run '
    'of a store that has it.'))
"""),
    md("## What was measured here, and each node's load"),
    code("shown('scale-out', 'rates', 'nodes')"),
    md("## What two masters on two cores can check"),
    code("shown('scale-out', 'check')"),
    code("""
from experiments.readers.summaries.scale_out import ASSUMES, check
c = check(frame('scale-out'))
found = '\\n'.join(
    f'- **{r.backend}**, {r.shards} shard{"s" if r.shards > 1 else ""}: two masters spend '
    f'{r.nodes_cpu:.2f} times one master\\'s CPU per pass between them ({r.nodes_cpu_lo:.2f} to '
    f'{r.nodes_cpu_hi:.2f}), the busier of the two {r.busiest_cpu:.2f} times '
    f'({r.busiest_cpu_lo:.2f} to {r.busiest_cpu_hi:.2f}) against its share of {r.share_at_two:.2f}, '
    f'and the rate at {r.processes} worker processes is {r.rate:.2f} times one master\\'s.'
    for r in c.itertuples()) or 'This run has no two-master configuration to check against one.'
say(f\"\"\"{found}

The rate cannot check the projection on this machine: the workers and every master share
two cores, and no master was busy more than {t.busy.max():.0%} of a run at the most worker
processes, so the workers' CPU is what bounds it. What can be checked is what the projection
rests on: whether splitting a queue over nodes keeps the work per pass (the nodes' CPU ratio
near 1: where it is above, the N·X line is out of reach and the measured ceiling says by how
much) and moves the busiest node's share off it (the busier one's ratio near its share). The projection assumes {ASSUMES}.\"\"\")
"""),
]

OVERVIEW: list[Cell] = [
    md("""
# Choosing a scheduler: the whole comparison on one page

Every scheduler this project ships, and the job queues people would pick instead, measured by
the lab on one machine against every measure that decides a queue design. Each measure has a
notebook of its own: [latency](latency.ipynb), [idle cost](idle.ipynb),
[growth](growth.ipynb), [takeover](takeover.ipynb), [throughput](throughput.ipynb),
[scaling](scaling.ipynb), and past one node on a Redis Cluster [scale-out](scale-out.ipynb);
[choosing](choosing.ipynb) holds the design documents' own comparison table, reproduced with
numbers. An empty cell is a measure not taken for that backend (the rivals have no checkpoint
to scale, and no counting hook of ours).
"""),
    code("run_line('latency', 'idle', 'takeover', 'throughput', 'growth', 'scaling')"),
    md("## Speed and what waiting costs"),
    code("""
o = overview().set_index('backend')
took = [c for c in o.columns if c.startswith('takeover')]
blank(o[['p50 ms @20/s', 'p99 ms @20/s', 'idle req/s', 'idle CPU ms/s', *took]].dropna(how='all'))
"""),
    md("""
Latency is submit → first pass at 20 submissions a second; idle cost is one worker with
nothing to do (requests by the worker's own count where it has one, else the server's); the
takeover is the median of all kills (SIGKILLed mid-step and right after a write, pooled: the
same figure the design documents' table quotes), from the kill to another worker's pass; a
rival's is its kills mid-job at its own settings made from the same lease, by the first of its
recoveries in `takeover.ipynb` (its others, and those never taken over, are there).
"""),
    md("## Capacity, growth and how each cost grows"),
    code("""
capacity = [c for c in ['wf/s x1', 'wf/s x2', 'wf/s x4', 'peak queue', 'peak, untrimmed',
                        'slope records', 'slope ready', 'slope sleeping', 'slope cancel']
            if c in o.columns]
blank(o[capacity].dropna(how='all').round({c: 2 for c in capacity if c.startswith('slope')}))
"""),
    md("""
Workflows a second at saturation from 1, 2 and 4 worker processes; the queue's peak entries
while 5,000 wakeups go through it (the stream trimmed, and untrimmed); and the log-log slope of
a cost against its size (0: flat, 1: linear): a checkpoint's records, the workflows queued or
sleeping, and cancelling one of them; a slope under 0.2 either way is flat, and one below 0
is noise (see [scaling](scaling.ipynb)).
"""),
    code("figure('latency', rate=20)"),
    code("figure('throughput')"),
    md("## When to choose which"),
    code("""
def o_(backend, column):
    try:
        return float(o.loc[backend, column])
    except KeyError:
        return float('nan')

say(f\"\"\"- **Redis, stream scheduler**: the quickest start ({ms(o_('redis-stream', 'p50 ms @20/s'))}
  median), {o_('redis-stream', 'wf/s x1'):,.0f} workflows a second from one process, near-zero
  idle cost; it needs its trimmer (untrimmed it keeps
  every wakeup: {o_('redis-stream', 'peak, untrimmed'):,.0f} entries in the growth run), which
  this project runs on any Redis version.
- **Redis, sorted set with its doorbell**: the same start ({ms(o_('redis-set', 'p50 ms @20/s'))})
  with one member per workflow and nothing to trim: the simpler structure now costs no
  latency. Without the doorbell (the published design) it waits half a poll
  ({ms(o_('redis-set-polled', 'p50 ms @20/s'))}).
- **Postgres with notifications**: {ms(o_('postgres', 'p50 ms @20/s'))} to start and real commits,
  in the database you may already run; {o_('postgres', 'wf/s x1'):,.0f} workflows a second from one
  process.
- **SQLite**: no server at all; other processes on the file are rung by its doorbell
  ({ms(o_('sqlite', 'p50 ms @20/s'))} median start), and
  {o_('sqlite', 'wf/s x1'):,.0f} workflows a second from one process on one file.
- **A job queue instead** (no checkpoint: a job that fails half-way starts again from the top):
  saq starts a job in {ms(o_('saq', 'p50 ms @20/s'))} and runs {o_('saq', 'wf/s x1'):,.0f} a second
  from one process, below the Redis schedulers here on both; pgqueuer runs
  {o_('pgqueuer', 'wf/s x1'):,.0f} a second, {'more' if o_('pgqueuer', 'wf/s x1') >
  o_('postgres', 'wf/s x1') else 'less'} than this project's Postgres scheduler, with no
  checkpoint to claim, record and release.\"\"\")
"""),
    md("## How sure the headline comparisons are"),
    code("""
pairs = [(a, b) for a, b in (('redis-stream', 'saq'), ('postgres', 'pgqueuer')) if a in o.index and b in o.index]
say('Ours over theirs, each at its default settings, with 95% intervals (latency: '
    + resampled('latency', *[b for pair in pairs for b in pair]) + '; throughput: a bootstrap '
    'over the repeats):\\n\\n'
    + '\\n'.join(f'- **{a}** against **{b}**: median start {times(versus("latency", a, b))}; '
                  f'workflows a second from one process {times(versus("throughput", a, b))}'
                  for a, b in pairs)
    + '\\n\\nAn interval covers what moves within one run; the machine\\'s load moves a ratio '
      'between runs too, so one near 1 may read the other way on another day.')
"""),
]

CHOOSING: list[Cell] = [
    md("""
# The design documents' comparison, with numbers

The Redis design document ends with a table of six rows comparing `RedisStreamScheduler` and
`RedisSetScheduler` (as published: polling). Here each cell is backed by a measurement or a
count from the lab, with two more columns: this project's sorted set *with its doorbell*, and
Postgres with notifications. Below each row: whether the measurement confirms the document,
refutes it, or changes the answer. A seventh row is this project's own, not the document's:
what a cancel and a waited-for result cost each design.
"""),
    code("run_line('latency', 'idle', 'growth', 'takeover', 'throughput', 'wakeups', "
         "'lifecycle', 'policies')"),
    code("""
import pandas
from experiments.readers.choosing import comparison
rows, verdicts = comparison()
prose(rows)
"""),
    code("say('\\n'.join(f'- **{row}**: {text}' for row, text in verdicts.items()))"),
    md("## The core document's claims the lab can measure"),
    code("""
from experiments.readers.choosing import claims
prose(claims(), index=False)
"""),
    md("""
## What each design pays for schedules, priorities and limits

From [policies](policies.ipynb): a schedule's median firing delay at the most worker processes
and its duplicate firings; urgent work's median start behind a backlog with a priority and
without; a limit's overshoot (must be 0) and its rate at a limit of 16 over none; the common
path's throughput and median start over the reference `throughput` and `latency` runs.
"""),
    code("""
from experiments.readers.summaries.policies import pays
prose(pays(frame('policies'), lab.where()))
"""),
]

POSTGRES_BOUNDS: list[Cell] = [
    md("""
# What bounds one Postgres at this workload?

Postgres alone, on a private server started for each configuration, so its WAL and its waits
are this run's. Two phases: **arrive**, one client submitting the workflows 64 at a time (each
an `arrive`: a record, a queue row and a NOTIFY in one transaction), then **work**, 1, 2 or 4
worker processes draining them (a pass, a sleep whose `wake_at` notifies, a second pass). Per
operation: the statements the server ran (`pg_stat_statements`), the WAL written, the
transactions that wrote, the server's CPU, and what its backends waited on, sampled every 20 ms
(`pg_stat_activity`, `pg_locks`: the lock a committing NOTIFY holds apart). Two more arms: the
same store with its `pg_notify` calls shadowed by a no-op (*silent*: the statements unchanged,
nothing sent), and the queue table hash-partitioned by workflow into four (*partitioned*).
"""),
    code("run_line('contention')"),
    code("figure('contention')"),
    code("t = summary('contention')\nshown('contention', 'bounds')"),
    code("""
def c(arm, processes, phase, column='rate'):
    rows = t[(t.arm == arm) & (t.processes == processes) & (t.phase == phase)]
    return float(rows[column].iloc[0]) if len(rows) else float('nan')

most = int(t.processes.max())
say(f\"\"\"**NOTIFY is the bound under many writers.** With 64 writers, arrivals run at
{c('notify', 1, 'arrive'):,.0f} a second as the store is, {c('silent', 1, 'arrive'):,.0f} with
NOTIFY silenced ({c('silent', 1, 'arrive') / c('notify', 1, 'arrive'):.1f} times): the same statements,
the same WAL ({c('notify', 1, 'arrive', 'wal_bytes_per_op'):,.0f} against
{c('silent', 1, 'arrive', 'wal_bytes_per_op'):,.0f} bytes an arrival), but
{c('notify', 1, 'arrive', 'notify_waits'):.1f} backends on average wait for the lock a
committing NOTIFY holds, one commit at a time for the whole server. Draining, with a `wake_at`
that notifies in every other pass, one worker process runs {c('notify', 1, 'work'):,.0f} passes a
second against {c('silent', 1, 'work'):,.0f} silenced
({c('silent', 1, 'work') / c('notify', 1, 'work'):.1f} times), and at {most} processes
{c('notify', most, 'work'):,.0f} against {c('silent', most, 'work'):,.0f}
({c('silent', most, 'work') / c('notify', most, 'work'):.1f} times), with
{c('notify', most, 'work', 'notify_waits'):.1f} backends waiting on that lock. {most} worker processes
and the server share 2 cores, and the server's CPU per pass grows from
{c('notify', 1, 'work', 'server_cpu_per_op'):.2f} ms at one process to
{c('notify', most, 'work', 'server_cpu_per_op'):.2f} ms at {most} as the store is
({c('silent', 1, 'work', 'server_cpu_per_op'):.2f} to {c('silent', most, 'work', 'server_cpu_per_op'):.2f}
ms silenced): on this machine more processes are not faster (from 2 to {most}, as the
store is {c('notify', 2, 'work'):,.0f} then {c('notify', most, 'work'):,.0f} passes a second,
silenced {c('silent', 2, 'work'):,.0f} then {c('silent', most, 'work'):,.0f}). Row locks
barely show ({c('notify', most, 'work', 'row_waits'):.2f} backends): `SKIP LOCKED` keeps the
takers apart. The run line above names the server the lab found first; every configuration ran
on one of its own, started from the local binaries.\"\"\")
"""),
    md("## Would a queue partitioned by workflow help?"),
    code("""
p = 'partitioned'
say(f\"\"\"**No.** At {most} processes the hash-partitioned queue runs
{c(p, most, 'work'):,.0f} passes a second against {c('notify', most, 'work'):,.0f} unpartitioned
({c(p, most, 'work') / c('notify', most, 'work'):.2f} times), with statements a pass
{c(p, most, 'work', 'statements_per_op'):.2f} against {c('notify', most, 'work', 'statements_per_op'):.2f},
WAL {c(p, most, 'work', 'wal_bytes_per_op'):,.0f} against
{c('notify', most, 'work', 'wal_bytes_per_op'):,.0f} bytes, writing transactions
{c(p, most, 'work', 'writes_per_op'):.2f} against {c('notify', most, 'work', 'writes_per_op'):.2f},
backends waiting on rows {c(p, most, 'work', 'row_waits'):.2f} against
{c('notify', most, 'work', 'row_waits'):.2f}, on the NOTIFY lock
{c(p, most, 'work', 'notify_waits'):.1f} against {c('notify', most, 'work', 'notify_waits'):.1f}, and
deadlocks {c(p, most, 'work', 'deadlocks'):.1f} a run against {c('notify', most, 'work', 'deadlocks'):.0f}.
A take asks for the earliest visible rows of the whole queue, so it reads every partition and
cannot stay in one. What bounds this workload is the NOTIFY commit lock and the server's CPU,
neither of which partitioning the table touches, so the Postgres queue gets no `shards` option:
hash partitions would help only a reader confined to its own partitions, which
gives up the queue's one global order of visibility.\"\"\")
"""),
    md("## What one pass costs the server"),
    code("shown('contention', 'statements')"),
]

POLICIES: list[Cell] = [
    md("""
# Schedules, priorities and limits: what each scheduler design pays

Four things a real workload asks of its queue, asked of every scheduler and of the rivals
that have them (saq's, arq's, streaq's and procrastinate's cron; pgqueuer's, streaq's and
procrastinate's priorities; pgqueuer's per-entrypoint limit and procrastinate's `lock`):

- **a schedule** fires every 100 ms (a rival's cron every second) while 1 to 4 worker
  processes race to start it: each firing must start exactly one workflow (duplicates 0,
  missing 0), and its delay is the firing's time to its workflow's first pass;
- **urgent work** (20 a second, priority 10) arrives while a worker drains a backlog of
  default-priority work (each pass holding 10 ms): its start with a priority and without;
- **a concurrency limit** of 1, 4 or 16 on workflows that hold their slot 5 ms, worked by 1
  to 4 processes of 32 slots each: the most holders seen at once, counted inside the bodies
  (above the limit is an overshoot, which must be 0), and its rate against no limit;
- **a rate limit** of 10 or 100 starts a second on a queue of four seconds' work, worked by 1
  or 2 processes of 32 slots: the most starts counted inside the bodies in any second (less a
  50 ms slack for a body's start after its take; above the limit is an overshoot, which must
  be 0), and the rate achieved after the first second's burst against the one allowed;
- **the common path** (none of them): one-step throughput and submit → start at 20 a
  second, set against the `throughput` and `latency` rows of the same folder.

What the rivals lack, from their own documentation, is listed as skipped with the reason: streaq
shares no concurrency limit across workers (its `concurrency` bounds one process) and has no
rate limit; procrastinate's `lock` runs the jobs sharing it one at a time, a limit of 1 and no
other, and it has no rate limit.
An arm whose store lacked the feature when the run was made is listed as skipped, not drawn.
"""),
    code("run_line('policies')"),
    code("figure('policies')"),
    code("""
p = frame('policies')
t = summary('policies')
from experiments.readers.summaries.policies import skipped
left = skipped(lab.where())
say('This run skipped, the store lacking the feature then: ' + '; '.join(
    f'{feature} on {", ".join(names)}' for feature, names in left.items()) + '.' if left else
    'This run skipped no arm: every store took every feature.')
"""),
    md("## A schedule fired by several workers"),
    code("shown('policies', 'schedule')"),
    code("""
fired = t[t.arm == 'schedule']
most = int(fired.processes.max())
at_most = fired[fired.processes == most]
from experiments.readers.tables import RIVALS
crons = fired.backend.isin([rival for _, rival in RIVALS])
ours = fired[~crons]
theirs = fired[crons].groupby('backend', sort=False)[['firings', 'duplicates', 'missing']].sum()
rivals = ''.join(f' {b}: {r.firings:,.0f} firings, {r.duplicates:,.0f} run twice, {r.missing:,.0f} missed.'
                 for b, r in theirs.iterrows())
say(f\"\"\"Of our {ours.firings.sum():,.0f} firings, {ours.duplicates.sum():,.0f} started a second
workflow and {ours.missing.sum():,.0f} were missed: a firing is taken by a compare-and-set of the
schedule's record, and its workflow id is the firing's, so a second starter finds the first's
workflow.{rivals} With {most} processes racing, the median delay from a firing's time to its
pass is {', '.join(f'**{r.backend}** {ms(r.p50)}' for r in at_most.itertuples())}.\"\"\")
"""),
    md("## Urgent work behind a backlog"),
    code("shown('policies', 'priority')"),
    code("""
urgent = t[t.arm == 'priority']
def u(backend, ordering):
    rows = urgent[(urgent.backend == backend) & (urgent.ordering == ordering)]
    return float(rows.p50.iloc[0]) if len(rows) else float('nan')
lines = [f'- **{b}**: ' + (f'{ms(u(b, "priority"))} with a priority, ' if u(b, 'priority') == u(b, 'priority') else 'no priority in this run, ')
         + f'{ms(u(b, "none"))} without' for b in dict.fromkeys(urgent.backend)]
say('Median start of the urgent work:\\n\\n' + '\\n'.join(lines) + '\\n\\nWithout a priority an '
    'urgent workflow waits for the backlog ahead of it; with one it waits at most for a slot to '
    'free (a pass holds 10 ms) and the take.')
"""),
    md("## A concurrency limit under contention"),
    code("shown('policies', 'limit')"),
    code("""
from experiments.readers.summaries.policies import limits
held = limits(t)
held = held[held.at_most > 0]
if len(held):
    text = (f\"\"\"Across {len(held)} limited configurations the most holders seen at once passed
the limit by {held.overshoot.sum():,.0f} in all. A limit of 1 runs at
{', '.join(f'**{r.backend}** {r.of_ceiling:.2f}' for r in held[held.at_most == 1].groupby('backend', sort=False).tail(1).itertuples())}
of its ceiling (one 5 ms hold at a time) at the most processes: what a freed slot costs before
the next holder starts.\"\"\")
else:
    text = 'No store in this run took a limit yet: the rows above are the unlimited baseline.'
say(text)
"""),
    md("## A rate limit"),
    code("shown('policies', 'rate')"),
    code("""
from experiments.readers.summaries.policies import rates
rated = rates(t)
if len(rated):
    top = rated[rated.at_most == rated.at_most.max()]
    text = (f\"\"\"Across {len(rated)} rate-limited configurations the most starts counted in a
window passed the limit by {rated.overshoot.sum():,.0f} in all. At {top.ceiling_per_s.max():,.0f}
starts a second allowed, the rate achieved after the first second's burst was
{', '.join(f'**{r.backend}** {r.of_ceiling:.2f}' for r in top.groupby('backend', sort=False).tail(1).itertuples())}
of it at the most processes, {rated.never_started.sum():,.0f} workflows in all still queued after
four times the windows their work should take: a rate limit holds a queue back by the clock, not
by its holders, so what it costs is how late the next take comes once the window has room.\"\"\")
else:
    text = 'No rate limit was measured in this run (its arm came after it was made).'
say(text)
"""),
    md("## The common path, before and after"),
    code("""
from experiments.readers.summaries.policies import common
c = common(p, lab.where())
blank(c.set_index('backend'))
"""),
    code("""
from experiments.readers.summaries.policies import told
if c.attrs.get('source') == 'one sitting':
    runs = c.attrs['runs']
    text = (f\"\"\"From the one-sitting A/B in `results/ab/common-path-quiet/` ({runs['before']} runs
before the policies, {runs['after']} after, interleaved), after over before: one process's one-step
throughput {told(c, 'rate')}; median start at 20/s {told(c, 'p50')}.\"\"\")
elif 'rate_ratio' in c:
    k = c.attrs.get('calibrations', {})
    text = (f\"\"\"Against the reference `throughput` and `latency` runs, another sitting: one
process's one-step throughput {told(c, 'rate')}; median start at 20/s {told(c, 'p50')}. Their
machine ran a 5M-step loop in {k.get('throughput', 0):.3f} s, this run's in {k.get('policies', 0):.3f} s: the
machine's speed is in these ratios as much as the code is.\"\"\")
else:
    text = 'This folder has no `throughput` rows to set the common path against.'
say(text)
"""),
    md("## What each design pays"),
    code("""
from experiments.readers.summaries.policies import pays
prose(pays(p, lab.where()))
"""),
]

NOTEBOOKS: dict[str, list[Cell]] = {
    "overview": OVERVIEW,
    "choosing": CHOOSING,
    "latency": LATENCY,
    "idle": IDLE,
    "growth": GROWTH,
    "takeover": TAKEOVER,
    "throughput": THROUGHPUT,
    "scaling": SCALING,
    "postgres-bounds": POSTGRES_BOUNDS,
    "scale-out": SCALE_OUT,
    "policies": POLICIES,
}


def build(names: list[str] | None = None, *, execute: bool = True, where: Path = HERE,
          timeout: int = 300, run: str | None = None) -> list[Path]:
    """Write the notebooks (and execute them, saving their outputs) reading `run` (None: the
    reference run); return their paths. A name that is no notebook is a `ValueError`. The
    command line's `--results DIR` gives `run` and writes them into `DIR/notebooks/`
    (`where`), executed on that run, so the committed ones stay on the reference."""
    first = [code(PARAMETERS.format(run=run)), code(READS)]
    return save("notebook", NOTEBOOKS, lambda name: book([*first, *NOTEBOOKS[name]]), names,
                execute=execute, where=where, timeout=timeout)


def book(cells: Sequence[Cell]) -> Any:
    """A notebook of `cells`, the first tagged as its parameter cell (papermill's tag)."""
    import nbformat

    made = []
    for i, (kind, source) in enumerate(cells):
        cell = (nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell)(
            source)
        if i == 0:
            cell.metadata["tags"] = ["parameters"]
        made.append(cell)
    return nbformat.v4.new_notebook(cells=made, metadata={
        "kernelspec": KERNEL,
        "language_info": {"name": "python"},
    })


def save(kind: str, known: Collection[str], make: Callable[[str], Any],
         names: Sequence[str] | None, *, execute: bool, where: Path, timeout: int) -> list[Path]:
    """Write `names` (all of `known` when None), each the notebook `make(name)` builds, into
    `where` as `<name>.ipynb`, executed first (in a kernel started in the checkout) when
    `execute`; return their paths. A name not in `known` is a `ValueError` naming the choices,
    raised before anything is written."""
    import nbformat
    from nbclient import NotebookClient

    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise ValueError(f"no {kind} {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(known)}")
    where.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(known):
        made = make(name)
        if execute:
            NotebookClient(made, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(ROOT)}}).execute()
        path = where / f"{name}.ipynb"
        nbformat.write(made, path)
        written.append(path)
    return written
