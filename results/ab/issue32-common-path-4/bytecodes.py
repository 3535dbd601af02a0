"""Where a pass's interpreted work goes, function by function: the bytecodes each Python function
executes (and its calls) while N one-step workflows are worked, as `one_step.py work` does, over
N. Deterministic but for timing (how often a reader waits), and slow (a trace of every bytecode),
so it attributes a count; `count.sh` makes the count itself. `diff` compares two such tables:

    PYTHONPATH=<tree> PYTHONHASHSEED=0 python bytecodes.py table N > <side>.tsv
    python bytecodes.py diff old.tsv new.tsv
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import sys
from types import FrameType
from typing import Any

ops: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()


def _name(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    where = path.split("/durability/")[-1] if "/durability/" in path else path.split("/")[-1]
    return f"{where}:{code.co_qualname}"


def _trace(frame: FrameType, event: str, arg: Any) -> Any:
    frame.f_trace_opcodes = True
    name = _name(frame)
    calls[name] += 1

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            ops[name] += 1
        return local

    return local


async def table(count: int) -> None:
    from one_step import one_step

    from durability import Event, work
    from durability.connect import open_durable

    async with open_durable("memory://") as durable:
        for n in range(count):
            await durable.arrive(f"w{n}", "order", {"n": n})
        finished = asyncio.Event()
        ended = 0

        def observer(event: Event) -> None:
            nonlocal ended
            if event.kind == "outcome":
                ended += 1
                if ended >= count:
                    finished.set()

        sys.settrace(_trace)
        task = asyncio.create_task(work(durable, one_step, observer=observer))
        await finished.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sys.settrace(None)
    for name, n in ops.most_common():
        print(f"{n / count:.2f}\t{calls[name] / count:.2f}\t{name}")
    print(f"{sum(ops.values()) / count:.2f}\t{sum(calls.values()) / count:.2f}\t(all)")


def _read(path: str) -> dict[str, tuple[float, float]]:
    rows = {}
    with open(path) as table:
        for line in table:
            n, made, name = line.rstrip("\n").split("\t")
            rows[name] = (float(n), float(made))
    return rows


def diff(before: str, after: str, least: float = 0.5) -> None:
    """Each function whose bytecodes a pass moved by `least` or more, most grown first."""
    old, new = _read(before), _read(after)
    rows = []
    for name in old.keys() | new.keys():
        (a, ca), (b, cb) = old.get(name, (0.0, 0.0)), new.get(name, (0.0, 0.0))
        if abs(b - a) >= least:
            rows.append((b - a, a, b, cb - ca, name))
    print("bytecodes a pass: change, before, after; calls a pass: change; function")
    for change, a, b, made, name in sorted(rows, reverse=True):
        print(f"{change:+8.1f} {a:8.1f} {b:8.1f} {made:+6.2f}  {name}")


if __name__ == "__main__":
    if sys.argv[1] == "diff":
        diff(sys.argv[2], sys.argv[3])
    else:
        gc.disable()
        asyncio.run(table(int(sys.argv[2]) if len(sys.argv) > 2 else 500))
