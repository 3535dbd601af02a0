"""One-step workflows on the SQLite store, for deterministic counts (a copy of
`../issue32-common-path-3/one_step.py` over a SQLite file in a fresh temporary directory):

    PYTHONPATH=<tree> PYTHONHASHSEED=0 python one_step.py MODE [N]

| MODE | prints |
|---|---|
| `arrive` | nothing: only arrives N workflows (callgrind's baseline) |
| `work` | nothing: arrives N, then works them all through `work` in this process |
| `sql` | statements a pass by leading keyword, SQLite VM steps a pass, rows changed a pass |
| `calls` | Python calls a pass (cProfile's, builtins too): the loop's thread, each connection's |

Every count is taken while the N are worked (the arrivals and the opening aside). Garbage
collection is off. `sql` counts VM steps with a progress handler called every instruction,
on the connection's own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import pstats
import re
import sys
import tempfile
from collections import Counter

from durability import Event, Run, as_dict, work
from durability.connect import open_durable

#: A literal the trace spells out in place of a parameter, so each statement counts as one.
_LITERAL = re.compile(r"'[^']*'|\b\d+\b")


async def one_step(run: Run) -> object:
    return await run.step("charge", lambda: {"charged": True, "cents": 1250}, as_dict)


def _on(database: object, which: str, fn: object) -> object:
    """`fn(raw)` on the thread of the database's writer or reader connection."""
    connection = getattr(database, f"_{which}")
    raw = getattr(database, f"_{which}_raw")
    return database._run(connection, lambda: fn(raw))  # type: ignore[attr-defined]


async def main(mode: str, count: int, folder: str) -> None:
    async with open_durable(f"sqlite:///{folder}/one_step.db") as durable:
        for n in range(count):
            await durable.arrive(f"w{n}", "order", {"n": n})
        if mode == "arrive":
            return
        database = durable.checkpointer.database  # type: ignore[attr-defined]
        finished = asyncio.Event()
        ended = 0

        def observer(event: Event) -> None:
            nonlocal ended
            if event.kind == "outcome":
                ended += 1
                if ended >= count:
                    finished.set()

        statements: dict[str, Counter[str]] = {"writer": Counter(), "reader": Counter()}
        steps = {"writer": 0, "reader": 0}
        # VM steps by the statement they ran in (its text's first words, parameters cut off)
        current = {"writer": "", "reader": ""}
        by_statement: Counter[str] = Counter()
        runs: Counter[str] = Counter()
        changes: dict[str, int] = {}
        profiles = {name: cProfile.Profile() for name in ("loop", "writer", "reader")}
        for which in ("writer", "reader"):
            if mode == "sql":
                def hooks(raw: object, which: str = which) -> None:
                    def traced(sql: str) -> None:
                        space = sql.find(" ")
                        statements[which][(sql if space < 0 else sql[:space]).upper()] += 1
                        words = _LITERAL.sub("?", " ".join(sql.split()))
                        current[which] = words[:48]
                        runs[current[which]] += 1

                    def step() -> int:
                        steps[which] += 1
                        by_statement[current[which]] += 1
                        return 0

                    raw.set_trace_callback(traced)  # type: ignore[attr-defined]
                    raw.set_progress_handler(step, 1)  # type: ignore[attr-defined]
                    changes[which] = raw.total_changes  # type: ignore[attr-defined]

                await _on(database, which, hooks)
            elif mode == "calls":
                await _on(database, which, lambda raw, w=which: profiles[w].enable())
        if mode == "calls":
            profiles["loop"].enable()
        task = asyncio.create_task(work(durable, one_step, observer=observer))
        await finished.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if mode == "calls":
            profiles["loop"].disable()
            for which in ("writer", "reader"):
                await _on(database, which, lambda raw, w=which: profiles[w].disable())
            total = 0.0
            for name, profile in profiles.items():
                stats = pstats.Stats(profile)
                calls = sum(row[1] for row in stats.stats.values())  # type: ignore[attr-defined]
                total += calls / count
                print(f"{name}: {calls / count:.1f} calls a pass")
                if len(sys.argv) > 3:
                    stats.sort_stats("ncalls").print_stats(int(sys.argv[3]))
            print(f"all: {total:.1f} calls a pass")
        elif mode == "sql":
            for which in ("writer", "reader"):
                def unhook(raw: object, which: str = which) -> None:
                    raw.set_trace_callback(None)  # type: ignore[attr-defined]
                    raw.set_progress_handler(None, 1)  # type: ignore[attr-defined]
                    changes[which] = raw.total_changes - changes[which]  # type: ignore[attr-defined]

                await _on(database, which, unhook)
            every = statements["writer"] + statements["reader"]
            print(f"statements a pass: {sum(every.values()) / count:.2f}")
            for keyword, n in sorted(every.items()):
                print(f"  {keyword}: {n / count:.2f}")
            for which in ("writer", "reader"):
                print(f"{which}: {sum(statements[which].values()) / count:.2f} statements,"
                      f" {steps[which] / count:.1f} VM steps, {changes[which] / count:.2f} rows"
                      " changed a pass")
            print("each statement: runs a pass, VM steps a run")
            for words, n in sorted(runs.items(), key=lambda item: -item[1]):
                print(f"  {n / count:5.2f} {by_statement[words] / n:7.1f}  {words}")


if __name__ == "__main__":
    gc.disable()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000, folder))
