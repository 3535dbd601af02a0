"""A payout that captures a payment, sleeps out a settlement window and waits for approval.

Runs one worker over the in-memory stores and plays the part of the outside world: it submits
the workflow, watches each pass end, and approves the payout once the workflow asks for it.
Nothing here is special to memory: swap the two stores for Redis, Postgres or SQLite ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

from durability import (
    Blocked,
    Completed,
    Event,
    MemoryCheckpointer,
    MemoryScheduler,
    Run,
    Sleeping,
    SplitDurable,
    as_dict,
    as_text,
    work,
)

captures = 0


async def capture() -> str:
    global captures
    captures += 1
    await asyncio.sleep(0.01)  # stands in for a call to a payment gateway
    return "capture-7781"


async def payout(run: Run) -> str:
    order = await run.awaiting("order", as_dict)
    receipt = await run.step("captured", capture, as_text)
    await run.sleep("settling", timedelta(seconds=1))
    approver = await run.awaiting("approved-by", as_text)
    return f"paid {order['amount']} on {receipt}, approved by {approver}"


async def main() -> None:
    durable = SplitDurable(MemoryCheckpointer(), MemoryScheduler(lease=timedelta(seconds=5)))
    finished: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    waiting = asyncio.Event()

    def show(event: Event) -> None:
        match event.outcome:
            case Sleeping(key=key, due=due):
                print(f"  pass ended: sleeping on {key!r} until {due:%H:%M:%S.%f}")
            case Blocked(waiting=keys):
                print(f"  pass ended: waiting for {sorted(keys)}")
                if "approved-by" in keys:
                    waiting.set()
            case Completed(value=value):
                print(f"  pass ended: completed -> {value}")
                finished.set_result(str(value))
            case None:
                if event.kind == "started":
                    print(f"pass started for {event.workflow}")

    worker = asyncio.create_task(
        work(durable, payout, tick=timedelta(milliseconds=100), observer=show)
    )
    print("submitting payout-1")
    await durable.arrive("payout-1", "order", {"amount": "120.00 EUR"})
    await waiting.wait()
    print("approving payout-1")
    await durable.arrive("payout-1", "approved-by", "dana")
    print(await finished)
    print(f"the gateway was called {captures} time(s) across every pass")
    print("checkpoint:")
    for written in await durable.checkpointer.history("payout-1"):
        print(f"  {written.at:%H:%M:%S.%f}  {written.key} = {written.value!r}")
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker


if __name__ == "__main__":
    asyncio.run(main())
