"""What a take that finds a limit full costs SQLite, by how many ready rows wait behind it."""

import asyncio
import statistics
import tempfile
import time
from datetime import timedelta

from durability.connect import open_durable
from durability.values import Limit


async def main(n):
    d = tempfile.mkdtemp()
    async with open_durable(f"sqlite:///{d}/f.db") as durable:
        s = durable.scheduler
        lim = Limit("k", 16)
        for i in range(16 + n):
            await s.make_ready(f"w{i}", limit=lim)
        for _ in range(16):
            assert await s.next_ready(timedelta(seconds=1)) is not None
        times = []
        for _ in range(30):
            t = time.perf_counter()
            got = await s.next_ready(timedelta(microseconds=1))
            times.append(time.perf_counter() - t)
            assert got is None
        median = round(statistics.median(times) * 1e3, 3)
        print(n, "ready behind a full limit: a missed next_ready, median ms", median)

for n in (10, 400, 1000):
    asyncio.run(main(n))
