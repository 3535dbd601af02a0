"""`EXPERIMENTS`: every experiment the lab has, by module name, in the order a full run takes
them. Its own module so that the package's face and the modules under it can all read it
without importing each other."""

from __future__ import annotations

__all__ = ["EXPERIMENTS"]

EXPERIMENTS = ("latency", "idle", "growth", "takeover", "throughput", "scaling", "wakeups")
