"""`backends` and `rivals`: what this machine has for the lab (each server found, or why not,
and each backend ready or skipped) and the rivals' virtualenv it needs (their drivers conflict
with ours, so they live apart in `.venv-rivals`).
"""

from __future__ import annotations

import subprocess
import sys

from experiments.harness.backends import BACKENDS
from experiments.harness.servers import KINDS

__all__ = ["backends", "make_rivals_venv"]


def backends(sources: tuple[str, ...] | None) -> int:
    from experiments.harness.lab import rivals_python
    from experiments.harness.servers import Servers

    with Servers(sources) if sources else Servers() as servers:
        for kind in KINDS:
            server = servers.get(kind)
            if server is None:
                print(f"{kind:<9} missing")
                for reason in servers.reasons.get(kind, []):
                    print(f"{'':<11}{reason}")
            else:
                print(f"{kind:<9} {server.source}: version {server.version}"
                      f"{' (private)' if server.private else ' (shared)'}")
        print()
        rivals = rivals_python()
        for backend in BACKENDS.values():
            need = backend.server
            if backend.rival is not None and rivals is None:
                state = "skipped: the rivals' virtualenv is missing (python -m experiments rivals)"
            elif need is None or servers.get(need) is not None:
                state = "ready"
            else:
                state = f"skipped: no {need} server"
            print(f"{backend.name:<22} {state}")
    return 0


def make_rivals_venv(timeout: float | None = None) -> int:
    """Create `.venv-rivals` with the rival queues (their drivers conflict with ours), or
    bring it up to `RIVALS`; a no-op when it already holds them. `timeout` bounds the pip run
    (seconds); the exit status is pip's (1 on a timeout)."""
    import hashlib
    import venv

    from experiments.harness.lab import RIVALS, RIVALS_VENV

    python = RIVALS_VENV / "bin" / "python"
    stamp = RIVALS_VENV / ".installed"
    wanted = hashlib.sha256("\n".join(RIVALS).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return 0
    if not python.exists():
        print(f"creating {RIVALS_VENV.name}/", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(RIVALS_VENV)
    try:
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", *RIVALS], timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"pip did not finish in {timeout:g} s", file=sys.stderr)
        return 1
    if done.returncode == 0:
        stamp.write_text(wanted)  # written last: a half-made virtualenv is made again
    return done.returncode
