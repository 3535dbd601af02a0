"""`scale-out`: the lab starts clusters of any number of masters with every slot served, the
experiment reads each master's counters around a saturated run, and its summary turns the
busiest node's cost into the projected ceiling. Timings are never asserted: the test checks
what the rows say about the nodes (every pass counted, each node's share between 1/N and 1),
and the projection's arithmetic on rows made up here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from experiments.commands.runner import module
from experiments.harness.backends import BACKENDS
from experiments.harness.lab import Lab
from experiments.harness.servers import Servers
from experiments.readers.summaries.scale_out import check, nodes, summary


@pytest.fixture
def servers() -> Iterator[Servers]:
    found = Servers(("binary",))
    try:
        yield found
    finally:
        found.close()


def _masters(url: str) -> tuple[str, int]:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        info = client.cluster("INFO")
        return str(info["cluster_state"]), int(info["cluster_size"])
    finally:
        client.close()


@pytest.mark.slow
def test_a_cluster_of_one_or_two_masters_serves_every_slot(servers: Servers) -> None:
    one, two = servers.cluster(1), servers.cluster(2)
    assert servers.cluster(2) is two  # started once per run
    assert len(one.nodes) == 1 and len(two.nodes) == 2
    assert {_masters(url) for url in one.nodes} == {("ok", 1)}
    assert {_masters(url) for url in two.nodes} == {("ok", 2)}
    with pytest.raises(ValueError, match="at least one master"):
        servers.cluster(0)


@pytest.mark.slow
async def test_each_master_of_a_two_master_cluster_is_counted(servers: Servers) -> None:
    experiment = module("scale-out")
    backend = BACKENDS["redis-stream-cluster"]
    assert experiment.configurations(BACKENDS["redis-stream"], True) == []
    lab = Lab(servers, quick=True)
    rows = await experiment.measure(lab, backend, {"masters": 2, "shards": 1, "processes": 1,
                                                   "workflows": 40})
    by = {r["metric"]: r for r in rows if "node" not in r or r["metric"].startswith("busiest")}
    assert by["passes"]["value"] == 40  # every preloaded workflow completed
    cpu = [r for r in rows if r["metric"] == "node_cpu_per_pass"]
    commands = [r for r in rows if r["metric"] == "node_commands_per_pass"]
    assert sorted(r["node"] for r in cpu) == [0, 1] == sorted(r["node"] for r in commands)
    assert sum(r["value"] for r in commands) > 1  # a pass is several commands, all counted
    assert by["nodes_cpu_per_pass"]["value"] == pytest.approx(sum(r["value"] for r in cpu))
    assert 0.5 <= by["busiest_share"]["value"] <= 1.0
    busiest = max(cpu, key=lambda r: r["value"])
    assert by["busiest_cpu_per_pass"]["value"] == busiest["value"]
    assert all(r["shards_option"] == experiment.shards_option() for r in rows)


def _run(masters: int, shards: int, processes: int, repeat: int, costs: list[float],
         rate: float) -> list[dict[str, Any]]:
    """The rows one run of `scale-out` gives, for nodes costing `costs` ms a pass."""
    base = {"backend": "redis-stream-cluster", "masters": masters, "shards": shards,
            "processes": processes, "repeat": repeat, "shards_option": shards > 1}
    rows = [{**base, "metric": "passes_per_s", "value": rate},
            {**base, "metric": "worker_cpu_per_pass", "value": 0.5},
            {**base, "metric": "nodes_cpu_per_pass", "value": sum(costs)},
            {**base, "metric": "busiest_cpu_per_pass", "value": max(costs)},
            {**base, "metric": "busiest_share", "value": max(costs) / sum(costs)},
            {**base, "metric": "busiest_commands_share", "value": max(costs) / sum(costs)}]
    for node, cost in enumerate(costs):
        rows += [{**base, "metric": "node_cpu_per_pass", "node": node, "value": cost},
                 {**base, "metric": "node_commands_per_pass", "node": node, "value": 10 * cost}]
    return rows


def test_the_ceiling_is_the_busiest_nodes_cost_turned_into_a_rate() -> None:
    import pandas

    rows = []
    for processes in (1, 2, 4):
        rows += _run(1, 1, processes, 0, [0.25], 900.0)  # one node: 4,000 passes a second
        rows += _run(2, 1, processes, 0, [0.2, 0.05], 900.0)  # the queue's node does most
        rows += _run(2, 4, processes, 0, [0.125, 0.125], 880.0)  # spread evenly
    frame = pandas.DataFrame(rows)
    table = summary(frame).set_index(["masters", "shards"])
    assert table.loc[(1, 1), "ceiling"] == pytest.approx(4000)
    assert table.loc[(2, 1), "ceiling"] == pytest.approx(5000)
    assert table.loc[(2, 4), "ceiling"] == pytest.approx(8000)
    assert table.loc[(2, 4), "even"] == pytest.approx(8000)  # N times one node's
    assert table.loc[(2, 4), "busiest_share"] == pytest.approx(0.5)
    assert table.loc[(1, 1), "busy"] == pytest.approx(900 * 0.25 / 1000)
    ranked = nodes(frame).set_index(["masters", "shards", "rank"])
    assert ranked.loc[(2, 1, 1), "cpu_per_pass"] == pytest.approx(0.2)
    assert ranked.loc[(2, 1, 2), "commands_per_pass"] == pytest.approx(0.5)
    checked = check(frame).set_index("shards")
    assert checked.loc[1, "nodes_cpu"] == pytest.approx(1.0)  # splitting added no work
    assert checked.loc[1, "busiest_cpu"] == pytest.approx(0.8)
    assert checked.loc[1, "rate"] == pytest.approx(1.0)
    assert 4 not in checked.index  # no one-master run at 4 shards to hold it against


def test_the_report_shows_the_projection_each_node_and_the_check() -> None:
    import pandas

    from experiments.readers.tables import views

    rows = []
    for processes in (1, 2):
        rows += _run(1, 1, processes, 0, [0.25], 900.0)
        rows += _run(2, 1, processes, 0, [0.2, 0.05], 900.0)
    shown = {v.key: v for v in views("scale-out", pandas.DataFrame(rows))}
    assert list(shown) == ["ceiling", "rates", "nodes", "check"]
    ceiling = shown["ceiling"].table.reset_index()
    assert list(ceiling["ceiling a second, 95%"]) == ["4,000", "5,000"]
    assert any("no `shards` option" in note for note in shown["ceiling"].notes)
    assert len(shown["nodes"].table) == 2  # the two masters of the two-master runs, by rank
