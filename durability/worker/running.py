"""`Running`: what a worker knows of one pass while it runs: its delivery and claim, the task
it runs in (the body runs in it too, so the keeper stops a body by cancelling that task:
`halt`), and the delivery renewal a write asked for (`passing.written`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from durability.stepwise import Run
from durability.values import Delivery, Pass

__all__ = ["Running"]


@dataclass(slots=True, eq=False)
class Running:
    delivery: Delivery
    holder: Pass | None = None
    task: asyncio.Task[Any] | None = None  # the pass's task, once its body runs
    in_body: bool = False  # the body is running (in `task`): the keeper may halt it
    halts: int = 0  # the keeper's cancels of `task`, which the pass takes back as it ends
    nudging: float | None = None  # when a renewal waiting for its moment starts (`Nudges`)
    extending: asyncio.Task[None] | None = None  # a renewal on its way
    again: bool = False  # a write came while a renewal was on its way: renew once more
    sending: bool = False  # the renewal is at the store (too late to drop)
    claimed: bool = False  # the reader took and claimed it in one move
    reclaimed: bool = False  # taken over from a worker that stopped answering
    run: Run | None = None  # the body's Run, once the pass has started it
    ending_key: str | None = None  # the epoch's ending key, as the pass found it (asked once)

    def halt(self) -> None:
        """Stop the body (the keeper: the budget is spent or the claim taken). A cancel of the
        pass's own task, counted, so the pass can tell it from the worker stopping."""
        assert self.task is not None
        self.halts += 1
        self.task.cancel()

    def unnudge(self) -> None:
        """Drop a renewal still waiting for its moment (the pass is ending)."""
        self.nudging = None

    async def quiet(self) -> None:
        """Let a delivery renewal in flight land before the delivery is answered for; drop one
        that has not started."""
        self.unnudge()
        extending = self.extending
        if extending is None or extending.done():
            return
        if not self.sending:
            extending.cancel()
        await asyncio.wait([extending])
