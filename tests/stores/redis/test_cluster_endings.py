"""How a pass that sleeps or waits ends on a Redis Cluster (`RedisDurable.finish_settled`):
the release on the workflow's slot, then the standing and the done as one script on the
queue's, so two requests where `SplitDurable` sends three, and a stale pass's standing never
overwrites a newer pass's."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from durability.connect import open_durable
from durability.redis import RedisCheckpointer, RedisDurable

LEASE = timedelta(seconds=30)
GLIMPSE = timedelta(milliseconds=5)


@pytest.mark.parametrize("scheduler", ["stream", "set"])
async def test_a_settled_pass_ends_in_two_requests_on_a_cluster(
    cluster_ports: list[int], scheduler: str
) -> None:
    namespace = f"settled-{uuid.uuid4().hex[:10]}"
    url = f"redis://127.0.0.1:{cluster_ports[0]}/0?cluster=on&scheduler={scheduler}"
    async with open_durable(f"{url}&namespace={namespace}", lease=LEASE) as durable:
        assert isinstance(durable, RedisDurable)
        # A first pass ends the same way, so every script is loaded before the one counted.
        for n in (0, 1):
            workflow = f"{namespace}-{n}"
            await durable.arrive(workflow, "order", 1)
            (taken,) = await durable.take_up_to(lambda: 1, timedelta(seconds=1), LEASE, LEASE)
            assert taken.holder is not None
            if n == 0:
                await durable.finish_settled(taken.holder, taken.delivery, "blocked", {})
        assert taken.holder is not None
        before = durable.traffic.snapshot()
        stood = await durable.finish_settled(
            taken.holder, taken.delivery, "blocked", {"waiting": ["approved"]}
        )
        sent = durable.traffic.snapshot() - before
        assert stood is True
        # The release, then the standing and the done as one script: not three calls.
        assert (sent.total, sent.requests.get("release")) == (2, 1), sent.requests
        look = await _checkpointer(durable).look(workflow)
        assert look.standing is not None and look.standing.state == "blocked"
        assert look.standing.detail == {"waiting": ["approved"]}
        assert look.claimed is False
        # The delivery is answered: nothing is left to take.
        assert await durable.take_up_to(lambda: 1, GLIMPSE, LEASE, LEASE) == []


@pytest.mark.parametrize("scheduler", ["stream", "set"])
async def test_a_stale_pass_leaves_a_newer_pass_s_standing_on_a_cluster(
    cluster_ports: list[int], scheduler: str
) -> None:
    namespace = f"stale-{uuid.uuid4().hex[:10]}"
    url = f"redis://127.0.0.1:{cluster_ports[0]}/0?cluster=on&scheduler={scheduler}"
    async with open_durable(f"{url}&namespace={namespace}", lease=LEASE) as durable:
        assert isinstance(durable, RedisDurable)
        workflow = f"{namespace}-1"
        await durable.arrive(workflow, "order", 1)
        (old,) = await durable.take_up_to(lambda: 1, timedelta(seconds=1), LEASE, LEASE)
        assert old.holder is not None
        # The old pass's claim is given up under it (as a lapse would), and a newer pass,
        # woken by a second arrival, claims the workflow and ends with its own standing.
        await durable.checkpointer.release(old.holder)
        await durable.arrive(workflow, "approved", "yes")
        (new,) = await durable.take_up_to(lambda: 1, timedelta(seconds=1), LEASE, LEASE)
        assert new.holder is not None and new.holder.token > old.holder.token
        assert await durable.finish_settled(new.holder, new.delivery, "sleeping", {"until": 1})
        assert not await durable.finish_settled(old.holder, old.delivery, "blocked", {})
        look = await _checkpointer(durable).look(workflow)
        assert look.standing is not None and look.standing.state == "sleeping"


def _checkpointer(durable: RedisDurable) -> RedisCheckpointer:
    checkpointer = durable.checkpointer
    assert isinstance(checkpointer, RedisCheckpointer)
    return checkpointer
