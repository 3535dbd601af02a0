"""The finish statement alone, side by side: each side's `finish_many_plain` (a839310's
`finish_many`) sent for batches of 32 fresh passes, the sides in turn batch by batch, on one
database migrated by the branch's schema (a superset: the old statements run on it unchanged).

    .venv/bin/python finbench.py URL BATCHES old=FILE main=FILE ...

Each FILE is the statement's text from that side's checkout (`statements('durable.sql')`).
Prints, per side, the median and lower quartile of a batch's time (client-measured: the same
round trip for every side); `perpass.py` in `../postgres-common-path/` counts the WAL.
Made to compare server work on a busy machine: a batch of each side runs within milliseconds
of the others', so load moves all sides alike.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

N = 32
VALUE = json.dumps({"state": "completed", "value": {"sku": "A-1", "done": True, "n": 1}})


def setup(conn: psycopg.Connection, queue: str, tag: str) -> list[dict[str, object]]:
    asked = []
    for i in range(N):
        workflow = f"{tag}-{i:02d}"
        conn.execute("INSERT INTO durability.claims (workflow, token, until, deadline)"
                     " VALUES (%s, 7, now() + interval '1 hour', now() + interval '1 hour')",
                     (workflow,))
        conn.execute("INSERT INTO durability.queue (queue, workflow, visible_at, receipt)"
                     " VALUES (%s, %s, now() + interval '1 hour', %s)", (queue, workflow, i))
        conn.execute("INSERT INTO durability.records (workflow, key, value)"
                     " VALUES (%s, 'order', '{\"sku\": \"A-1\"}')", (workflow,))
        asked.append({"workflow": workflow, "token": 7, "receipt": i, "state": "completed",
                      "detail": "{}", "ending_key": "engine:ended:000000",
                      "ending_value": VALUE, "held_key": None, "hold": None})
    return asked


def main() -> None:
    url, batches = sys.argv[1], int(sys.argv[2])
    sides = dict(arg.split("=", 1) for arg in sys.argv[3:])
    texts = {side: Path(path).read_text() for side, path in sides.items()}
    times: dict[str, list[float]] = {side: [] for side in sides}
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        for b in range(batches):
            order = list(sides)[b % len(sides):] + list(sides)[:b % len(sides)]
            for side in order:
                asked = setup(conn, queue, f"{side}-{b}-{uuid.uuid4().hex[:6]}")
                params = {"queue": queue, "channel": "bench_ready", "asked": json.dumps(asked),
                          "ended_channel": "bench_ended"}
                start = time.perf_counter()
                row = conn.execute(texts[side], params, prepare=True).fetchone()
                times[side].append(time.perf_counter() - start)
                assert row is not None and len(row[0]) == N, (side, row)
    for side, spent in times.items():
        spent.sort()
        print(f"{side}: median {statistics.median(spent) * 1000:.3f} ms a batch, lower quartile"
              f" {spent[len(spent) // 4] * 1000:.3f} ms, {len(spent)} batches")


if __name__ == "__main__":
    main()
