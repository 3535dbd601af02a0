"""Where a run's numbers came from: the packages' versions, the revision, the rivals' pins."""

from __future__ import annotations

import contextlib
import platform
import subprocess

from experiments.harness.lab import RIVALS, ROOT

__all__ = ["git", "rivals", "versions"]


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("durability", "redis", "hiredis", "psycopg", "psycopg-pool", "aiosqlite",
                    "testcontainers", "pandas", "matplotlib"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            found[package] = version(package)
    import sqlite3

    found["sqlite"] = sqlite3.sqlite_version
    return found


def rivals() -> list[str]:
    """The rivals' pinned versions (their virtualenv is built from exactly these)."""
    return list(RIVALS)


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()
