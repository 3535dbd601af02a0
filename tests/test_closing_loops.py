"""The suite's bound on a loop's closing (`tests/closing_loops.py`): a task that swallows its
cancel is named and cancelled again, where `asyncio.Runner.close` alone would wait for good."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests import closing_loops


async def _stubborn() -> None:
    with contextlib.suppress(asyncio.CancelledError):  # swallowed, as a library might
        await asyncio.sleep(3600)
    await asyncio.sleep(3600)


def test_a_task_that_swallows_its_first_cancel_is_named_and_cancelled_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said: list[str] = []
    monkeypatch.setattr(closing_loops, "_say", said.append)
    monkeypatch.setattr(closing_loops, "PATIENCE", 0.2)
    monkeypatch.setattr(closing_loops, "held_up", [])

    async def start() -> None:
        asyncio.get_running_loop().create_task(_stubborn(), name="stubborn")
        await asyncio.sleep(0)

    runner = asyncio.Runner()
    runner.run(start())
    runner.close()  # returns: the second cancel ends it

    assert len(closing_loops.held_up) == 1
    assert "stubborn" in closing_loops.held_up[0]
    assert any("_stubborn" in text for text in said)  # its stack, for the run's output
    assert any("ended after another cancel" in text for text in said)


def test_a_loop_whose_tasks_end_at_their_cancel_closes_without_a_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said: list[str] = []
    monkeypatch.setattr(closing_loops, "_say", said.append)
    monkeypatch.setattr(closing_loops, "held_up", [])

    async def start() -> None:
        asyncio.get_running_loop().create_task(asyncio.sleep(3600))
        await asyncio.sleep(0)

    runner = asyncio.Runner()
    runner.run(start())
    runner.close()
    assert closing_loops.held_up == [] and said == []
