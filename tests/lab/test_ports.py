"""Where the lab's private servers listen: ports no outgoing connection can take, and a cluster
that finds another range when one of its ports is taken before its node binds it."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from experiments.harness import clusters
from experiments.harness.servers import HOST, _ephemeral_floor, free_port


def test_ports_are_chosen_below_the_ephemeral_range_bus_ports_too() -> None:
    floor = _ephemeral_floor()
    for _ in range(50):
        assert free_port() < floor
        base = free_port(6, bus=True)
        assert base + 5 + 10000 < floor


@pytest.fixture
def taken() -> Iterator[socket.socket]:
    holder = socket.socket()
    holder.bind((HOST, free_port(6, bus=True) + 2))
    holder.listen()
    try:
        yield holder
    finally:
        holder.close()


@pytest.mark.slow
def test_a_cluster_whose_port_was_taken_starts_on_another_range(
        tmp_path: Path, taken: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("no redis-server and redis-cli on PATH")
    held = int(taken.getsockname()[1])
    offered = iter([held - 2])
    real = clusters.free_port
    monkeypatch.setattr(clusters, "free_port",
                        lambda span, bus=False: next(offered, None) or real(span, bus=bus))
    with clusters.replicated(tmp_path) as cluster:
        assert held not in cluster.ports
        assert sorted(cluster.roles().values()) == ["master"] * 3 + ["slave"] * 3
