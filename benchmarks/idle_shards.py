"""What an idle worker costs against the count of shards: the commands the servers ran a second
(`INFO commandstats`, every node summed, a script's own commands counted inside it), the
worker's round trips a second (its `durable.traffic`: one node only) and its CPU, for both
Redis schedulers, on one node and on a local three-master cluster, each a `redis-server` of
this run's own on free loopback ports (stopped after).

    python -m benchmarks.idle_shards --seconds 10 --shards 1,4,16

prints one row a configuration. The worker runs `work` in this process with nothing queued.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import redis as sync_redis

from durability import work
from durability.connect import open_durable
from durability.stepwise import Run

HOST = "127.0.0.1"


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _servers(count: int, first: int, cluster: bool) -> Iterator[list[int]]:
    """`count` fresh servers (a cluster of them with `cluster`), stopped on the way out."""
    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is not installed"
    home = Path(tempfile.mkdtemp(prefix="idle-shards-"))
    processes, ports, port = [], [], first
    try:
        while len(ports) < count:
            port += 1
            if not _free(port) or (cluster and not _free(port + 10000)):
                continue
            command = [binary, "--port", str(port), "--bind", HOST, "--dir", str(home),
                       "--save", "", "--appendonly", "no"]
            if cluster:
                command += ["--cluster-enabled", "yes", "--cluster-config-file", f"n{port}.conf"]
            processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
            ports.append(port)
        for port in ports:
            client = sync_redis.Redis(host=HOST, port=port)
            for _ in range(100):
                with contextlib.suppress(sync_redis.ConnectionError):
                    if client.ping():
                        break
                time.sleep(0.05)
        if cluster:
            subprocess.run(["redis-cli", "--cluster", "create", *(f"{HOST}:{p}" for p in ports),
                            "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, capture_output=True)
            client = sync_redis.Redis(host=HOST, port=ports[0], decode_responses=True)
            while client.cluster("INFO").get("cluster_state") != "ok":
                time.sleep(0.1)
            time.sleep(1)
        yield ports
    finally:
        for process in processes:
            process.terminate()
            process.wait()
        shutil.rmtree(home, ignore_errors=True)


def _requests(ports: list[int]) -> int:
    """Commands the servers ran, every node summed, leaving out the ones this count and the
    cluster's own gossip ask for."""
    total = 0
    for port in ports:
        stats = sync_redis.Redis(host=HOST, port=port).info("commandstats")
        total += sum(int(v["calls"]) for k, v in stats.items()
                     if k not in ("cmdstat_info", "cmdstat_cluster|info", "cmdstat_ping"))
    return total


async def _body(run: Run) -> None:
    return None


async def _idle(url: str, ports: list[int], seconds: float) -> tuple[float, float, float]:
    async with open_durable(url) as durable:
        worker = asyncio.create_task(work(durable, _body, pool=16))
        await asyncio.sleep(2)  # started, prepared, its first looks made
        traffic = getattr(durable, "traffic", None)
        sent = None if traffic is None else traffic.snapshot()
        requests, cpu = _requests(ports), time.process_time()
        await asyncio.sleep(seconds)
        requests, cpu = _requests(ports) - requests, time.process_time() - cpu
        trips = 0 if traffic is None or sent is None else (traffic.snapshot() - sent).round_trips
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    return requests / seconds, trips / seconds, cpu * 1000 / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--shards", default="1,4,16")
    parser.add_argument("--first-port", type=int, default=7650)
    args = parser.parse_args()
    counts = [int(n) for n in args.shards.split(",")]
    print("where    scheduler  shards  commands/s  round trips/s  worker CPU ms/s")
    for cluster in (False, True):
        with _servers(3 if cluster else 1, args.first_port, cluster) as ports:
            for kind in ("stream", "set"):
                for shards in counts:
                    namespace = f"idle-{uuid.uuid4().hex[:6]}"
                    url = (f"redis://{HOST}:{ports[0]}/0?namespace={namespace}&scheduler={kind}"
                           f"&shards={shards}" + ("&cluster=on" if cluster else ""))
                    rate, trips, cpu = asyncio.run(_idle(url, ports, args.seconds))
                    where = "cluster" if cluster else "node"
                    shown = "n/a" if cluster else f"{trips:.2f}"  # a cluster's are not counted
                    print(f"{where:8} {kind:9} {shards:6}  {rate:10.1f}  {shown:>13}"
                          f"  {cpu:15.2f}", flush=True)


if __name__ == "__main__":
    main()
