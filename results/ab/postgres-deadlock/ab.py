"""A/B of the plain batched take (take_up_to on a plain queue), main against this branch.

Usage: python ab.py MAIN_TREE BRANCH_TREE [rounds]. Each round runs both arms in alternating
order, each in its own process with its tree first on sys.path: 400 ready workflows in a fresh
queue, taken 8 at a time until none is left; the arm's time per take_up_to statement (ms).
"""
from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import timedelta

URL = "postgresql://postgres@127.0.0.1:5432/test"


async def _child() -> None:
    # The tree asked for, not the one installed in editable mode (a finder ahead of sys.path).
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path.insert(0, os.environ["AB_TREE"])
    import durability

    assert durability.__file__.startswith(os.environ["AB_TREE"]), durability.__file__
    from psycopg_pool import AsyncConnectionPool

    from durability.postgres import (
        PostgresCheckpointer,
        PostgresDurable,
        PostgresScheduler,
        migrate,
    )

    async with AsyncConnectionPool(URL, min_size=2, max_size=2,
                                   kwargs={"autocommit": True}) as pool:
        await migrate(pool)
        scheduler = PostgresScheduler(pool=pool, lease=timedelta(seconds=60),
                                      queue=f"ab-{uuid.uuid4().hex}")
        durable = PostgresDurable(PostgresCheckpointer(pool=pool), scheduler)
        for n in range(400):
            await scheduler.make_ready(f"w{n}")
        short, budget = timedelta(milliseconds=10), timedelta(seconds=60)
        calls, start = 0, time.perf_counter()
        while True:
            taken = await durable.take_up_to(lambda: 8, short, budget, budget)
            calls += 1
            if len(taken) < 8:
                break
        print((time.perf_counter() - start) * 1000 / calls)
        await scheduler.close()


def main() -> None:
    trees, rounds = sys.argv[1:3], int(sys.argv[3]) if len(sys.argv) > 3 else 8
    times: dict[str, list[float]] = {"A": [], "B": []}
    for r in range(rounds):
        order = [("A", trees[0]), ("B", trees[1])][:: 1 if r % 2 == 0 else -1]
        for arm, tree in order:
            out = subprocess.run([sys.executable, __file__, "--child"], capture_output=True,
                                 text=True, check=True, env={**os.environ, "AB_TREE": tree})
            times[arm].append(float(out.stdout.split()[-1]))
    ratios = sorted(b / a for a, b in zip(times["A"], times["B"], strict=True))
    for arm, got in times.items():
        print(arm, "ms/take median", round(statistics.median(got), 3), [round(t, 3) for t in got])
    print("B/A ratio median", round(statistics.median(ratios), 3),
          "range", round(ratios[0], 3), "-", round(ratios[-1], 3))


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        asyncio.run(_child())
    else:
        main()
