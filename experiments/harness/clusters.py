"""`Replicated`: a private Redis Cluster of masters with a replica each, on loopback, whose
masters the chaos run may SIGKILL (a replica is promoted by the cluster's own failover) and
start again (the old master comes back as a replica of the one that replaced it).

Each node is a `redis-server` on a free port (and its bus port) with no persistence: a node
started again comes back empty and takes its data from its new master. `cluster-node-timeout`
is short, so a failover takes a second or two, not fifteen.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from experiments.harness.protocol import die_with_parent
from experiments.harness.servers import HOST, Server, answered, free_port, redis_version

__all__ = ["NODE_TIMEOUT_MS", "Replicated", "replicated"]

#: How long a master may be silent before its replica takes over (the cluster's own setting).
NODE_TIMEOUT_MS = 1000


class Replicated:
    """The nodes of one cluster: `masters` of them, each with one replica."""

    def __init__(self, home: Path, masters: int = 3) -> None:
        binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if binary is None or cli is None:
            raise RuntimeError("a cluster needs redis-server and redis-cli on PATH")
        self.home, self.binary, self.cli = home, binary, cli
        base = free_port(2 * masters, bus=True)
        self.ports = [base + i for i in range(2 * masters)]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.url = f"redis://{HOST}:{self.ports[0]}/0"

    def start(self, port: int) -> None:
        """Start the node of `port` (again: with its cluster config, so it rejoins)."""
        home = self.home / str(port)
        home.mkdir(parents=True, exist_ok=True)
        command = [self.binary, "--port", str(port), "--bind", HOST, "--dir", str(home),
                   "--save", "", "--appendonly", "no", "--loglevel", "warning",
                   "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                   "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
        self.processes[port] = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent)
        # A node that exits (its port taken) says so at once: `replicated` tries another range.
        answered(lambda: redis_version(f"redis://{HOST}:{port}/0", 0.5), self.processes[port],
                 f"redis on {port}")

    def create(self) -> None:
        for port in self.ports:
            self.start(port)
        done = subprocess.run(
            [self.cli, "--cluster", "create", *(f"{HOST}:{p}" for p in self.ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stderr[:160]}")
        self.settled()

    @property
    def server(self) -> Server:
        return Server("cluster", self.url, f"binary redis-server x{len(self.ports)}",
                      redis_version(self.url), private=True)

    def roles(self) -> dict[int, str]:
        """Each live node's role as it says (`master` or `slave`)."""
        import redis

        found = {}
        for port, process in self.processes.items():
            if process.poll() is not None:
                continue
            client = redis.Redis(host=HOST, port=port, socket_timeout=2, decode_responses=True)
            try:
                found[port] = str(client.info("replication")["role"])
            except redis.RedisError:
                continue
            finally:
                client.close()
        return found

    def replica_of(self, port: int) -> int | None:
        """The port of the replica the master on `port` has, if it has one linked."""
        import redis

        client = redis.Redis(host=HOST, port=port, socket_timeout=2, decode_responses=True)
        try:
            found = client.info("replication").get("slave0")
        finally:
            client.close()
        return int(found["port"]) if isinstance(found, dict) else None

    def pause(self, port: int, *, paused: bool) -> None:
        """Stop the node of `port` where it stands (SIGSTOP), or let it go on (SIGCONT)."""
        self.processes[port].send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def kill(self, port: int) -> int:
        """SIGKILL the node of `port`; the moment, in ns."""
        at = time.time_ns()
        process = self.processes[port]
        process.kill()
        process.wait(10)
        return at

    def settled(self, within: float = 60.0) -> None:
        """Wait until every live node says the cluster is ok, every slot has a master, and
        every master has a replica linked and in step."""
        import redis

        def ok() -> bool:
            masters, linked = 0, 0
            for port, process in self.processes.items():
                if process.poll() is not None:
                    raise ConnectionError(f"node {port} is down")
                client = redis.Redis(host=HOST, port=port, socket_timeout=2,
                                     decode_responses=True)
                try:
                    if client.cluster("INFO").get("cluster_state") != "ok":
                        raise ConnectionError(f"node {port} sees the cluster not ok")
                    info = client.info("replication")
                    if info["role"] == "master":
                        masters += 1
                    elif info.get("master_link_status") == "up" and \
                            not int(info.get("master_sync_in_progress", 0)):
                        linked += 1
                finally:
                    client.close()
            if masters != len(self.ports) // 2 or linked != masters:
                raise RuntimeError(f"{masters} masters, {linked} replicas in step")
            return True

        answered(ok, None, "the cluster settling", within)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)


@contextlib.contextmanager
def replicated(scratch: Path, masters: int = 3) -> Iterator[Replicated]:
    """A new cluster of `masters` masters with a replica each, stopped after the block."""
    for attempt in range(3):  # a port taken between the look and the start: another range
        cluster = Replicated(scratch / f"try-{attempt}", masters)
        try:
            cluster.create()
        except RuntimeError:  # a node exited, or the create failed
            cluster.stop()
            if attempt == 2:
                raise
            continue
        except BaseException:
            cluster.stop()
            raise
        break
    try:
        yield cluster
    finally:
        cluster.stop()

