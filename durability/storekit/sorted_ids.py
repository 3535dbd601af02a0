"""`SortedIds`: a set of ids kept in code point order, for a listing that pages by id (the
memory store's per-state indexes)."""

from __future__ import annotations

import bisect

__all__ = ["SortedIds"]


class SortedIds:
    """A set of ids kept in code point order, as short sorted runs: adding or removing one is a
    bisection and a move within its run (not of every id, as one flat list would be), and
    `page` is a bisection and a slice. Runs split past `RUN` ids and go when emptied."""

    RUN = 512

    __slots__ = ("_lasts", "_runs")

    def __init__(self) -> None:
        self._runs: list[list[str]] = []
        self._lasts: list[str] = []  # each run's greatest id, for the bisection between runs

    def _run_of(self, workflow: str) -> int:
        return min(bisect.bisect_left(self._lasts, workflow), len(self._runs) - 1)

    def add(self, workflow: str) -> None:
        if not self._runs:
            self._runs.append([workflow])
            self._lasts.append(workflow)
            return
        n = self._run_of(workflow)
        run = self._runs[n]
        at = bisect.bisect_left(run, workflow)
        if at < len(run) and run[at] == workflow:
            return
        run.insert(at, workflow)
        if len(run) > 2 * self.RUN:
            self._runs[n : n + 1] = [run[: self.RUN], run[self.RUN :]]
            self._lasts[n : n + 1] = [run[self.RUN - 1], run[-1]]
        else:
            self._lasts[n] = run[-1]

    def discard(self, workflow: str) -> None:
        if not self._runs:
            return
        n = self._run_of(workflow)
        run = self._runs[n]
        at = bisect.bisect_left(run, workflow)
        if at == len(run) or run[at] != workflow:
            return
        del run[at]
        if run:
            self._lasts[n] = run[-1]
        else:
            del self._runs[n], self._lasts[n]

    def count(self, prefix: str) -> int:
        """How many ids start with `prefix` (all of them for "")."""
        if not prefix:
            return sum(len(run) for run in self._runs)
        n = bisect.bisect_left(self._lasts, prefix)
        found = 0
        while n < len(self._runs):
            run = self._runs[n]
            at = bisect.bisect_left(run, prefix)
            inside = [w for w in run[at:] if w.startswith(prefix)]  # a run is at most 2*RUN
            found += len(inside)
            if len(inside) < len(run) - at:
                break
            n += 1
        return found

    def page(self, low: str, inclusive: bool, limit: int) -> list[str]:
        """Up to `limit` ids from `low` on (`low` itself only if `inclusive`), in order."""
        find = bisect.bisect_left if inclusive else bisect.bisect_right
        n = find(self._lasts, low)
        found: list[str] = []
        while n < len(self._runs) and len(found) < limit:
            run = self._runs[n]
            at = find(run, low) if not found else 0
            found += run[at : at + limit - len(found)]
            n += 1
        return found
