"""The harness every measure is made with, written once: nothing here measures anything.

`lab.py` (`Lab`: places, agents, counters; `Agent`, a process spoken to), `agent.py` (the agent
process, `python -m experiments.harness.agent`), `protocol.py` (what the two say), `bodies.py`
(the workflows agents run), `servers.py` and `containers.py` (where Redis and Postgres come
from; `images/`), `backends.py` (every scheduler compared), `registry.py` (one of your own),
`rivals/` (the job queues compared against, each an agent), `provenance.py` (what a run records).
"""
