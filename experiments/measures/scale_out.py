"""`scale-out`: what each Redis Cluster node pays per pass as nodes and shards are added, and
how the load spreads over them.

Each configuration is a private local cluster of `masters` masters (`Servers.cluster`), a queue
of `shards` shards (`?shards=N`) and `throughput`'s saturated run at `processes` worker
processes; around it every master's `INFO commandstats` and `INFO cpu` are read, so each row
says what one node spent per pass. Without a `shards` option only `shards=1` runs (the rows'
`shards_option` says so).
"""

from __future__ import annotations

import asyncio
from typing import Any

from experiments.harness.backends import Backend
from experiments.harness.lab import Counters, Lab, Reading
from experiments.harness.servers import Server
from experiments.measures.throughput import saturate, workload

NAME = "scale-out"
TITLE = "per-node cost and load share as Redis Cluster nodes and shards are added"

#: Masters per cluster: one node, the two this machine has cores for (where a projection can
#: be checked against what two nodes do on two cores), and the 3 and 6 beyond them.
MASTERS = (1, 2, 3, 6)
SHARDS = (1, 2, 4, 8, 16)
PROCESSES = (1, 2, 4)
QUICK_MASTERS, QUICK_SHARDS, QUICK_PROCESSES = (1, 2, 3), (1, 4), (1, 2)
#: What a run may set beside the configurations' own parameters (`experiments.commands.overrides`).
SETTINGS = {"workflows": "workflows preloaded per configuration"}


def shards_option() -> bool:
    """Whether this checkout's Redis stores take `shards` (`?shards=N`); without it only the
    single-slot layout (`shards=1`, every key under one hash tag) can be measured."""
    from durability.redis import url

    return "shards" in getattr(url, "OPTIONS", ())


def configurations(backend: Backend, quick: bool) -> list[dict[str, Any]]:
    if backend.server != "cluster":  # the experiment is a cluster's nodes: nothing else has them
        return []
    shards = (QUICK_SHARDS if quick else SHARDS) if shards_option() else (1,)
    return [{"masters": m, "shards": s, "processes": n}
            for m in (QUICK_MASTERS if quick else MASTERS) for s in shards
            for n in (QUICK_PROCESSES if quick else PROCESSES)]


async def measure(lab: Lab, backend: Backend, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The busiest node's share of the nodes' CPU is what bounds the cluster once each node has a
    machine of its own: the summary's projection (readers/summaries/scale_out.py).
    """
    masters, shards = int(params["masters"]), int(params["shards"])
    processes = int(params["processes"])
    count = int(params.get("workflows") or workload(lab.quick))
    cluster = await asyncio.to_thread(lab.servers.cluster, masters)
    nodes = [Counters(node) for node in _nodes(cluster)]

    async def probe() -> list[Reading]:
        return list(await asyncio.gather(*(node.read() for node in nodes)))

    sharded = shards_option()
    async with lab.place(backend, cluster) as (place, _):
        window = await saturate(lab, backend, place, processes, count, probe=probe,
                                options=f"shards={shards}" if sharded else "")
    assert window.probed is not None
    passes = window.passes
    rows = window.rows()
    cpus, commands = [], []
    for i, (before, after) in enumerate(zip(*window.probed, strict=True)):
        counts, cpu = Counters.delta(before, after)
        cpus.append((cpu or 0.0) * 1000 / passes)
        commands.append(sum(counts.values()) / passes)
        rows += [{"metric": "node_cpu_per_pass", "node": i, "value": cpus[-1], "unit": "ms"},
                 {"metric": "node_commands_per_pass", "node": i, "value": commands[-1],
                  "unit": "1"}]
    busiest = max(range(masters), key=lambda i: cpus[i])
    rows += [
        {"metric": "nodes_cpu_per_pass", "value": sum(cpus), "unit": "ms"},
        {"metric": "busiest_cpu_per_pass", "node": busiest, "value": cpus[busiest],
         "unit": "ms"},
        {"metric": "busiest_share", "node": busiest,
         "value": cpus[busiest] / sum(cpus) if sum(cpus) else 1.0, "unit": "1"},
        {"metric": "busiest_commands_share", "node": busiest,
         "value": max(commands) / sum(commands) if sum(commands) else 1.0, "unit": "1"},
    ]
    return [{**row, "shards_option": sharded} for row in rows]


def _nodes(cluster: Server) -> list[Server]:
    """Each master of `cluster` as a server of its own, so its counters are its own."""
    from experiments.harness.servers import redis_cpu

    return [Server("redis7", url, cluster.source, cluster.version, private=True,
                   cpu=redis_cpu(url)) for url in cluster.nodes]
