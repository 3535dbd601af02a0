"""The API while its store is down or frozen, on real servers: every request gets a prompt 503
with a JSON body and `Retry-After` (never a plain-text 500, never a hang), and the API serves
again once the store is back.

Redis is a private `redis-server` on a spare port that the test SIGSTOPs (frozen) and SIGKILLs
then restarts (down); the shared server on 6379 is never touched. Postgres is a database made
for one test: frozen by a transaction holding every table of it locked, down by refusing new
connections to it (`ALLOW_CONNECTIONS false`) and terminating the ones it has.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest

from durability.connect import open_durable
from integration.api import make_app

# Fixture types (the conftest beside this file builds them).
Eventually = Any
PrivateRedis = Any
ThrowawayDatabase = Any

PAYOUT = {"customer": "ada", "lines": [{"sku": "piano", "quantity": 1, "cents": 120000}]}
#: Long enough that a healthy call on a loaded machine never meets it; a frozen store does.
STORE_TIMEOUT = timedelta(seconds=2)
#: A bound on a hang, far past STORE_TIMEOUT: the test fails here rather than waiting forever.
HANG = 30.0


@asynccontextmanager
async def api(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with open_durable(url) as durable:
        app = make_app(durable, store_timeout=STORE_TIMEOUT, retry_after=timedelta(seconds=3))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            yield client


async def refused_503(client: httpx.AsyncClient, method: str, path: str, **sent: object) -> None:
    """`method path` answers 503 as documented, before the hang bound."""
    async with asyncio.timeout(HANG):
        answer = await client.request(method, path, **sent)  # type: ignore[arg-type]
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["retry-after"] == "3"
    assert set(answer.json()) == {"detail"} and "try again" in answer.json()["detail"]


async def serves(client: httpx.AsyncClient, order: str) -> bool:
    """Whether the API reads `order` again."""
    async with asyncio.timeout(HANG):
        answer = await client.get(f"/orders/{order}")
    return answer.status_code == 200


# -- Redis -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", ["stream", "set"])
async def test_a_frozen_or_dead_redis_gets_503_and_the_api_recovers(
    private_redis: PrivateRedis, scheduler: str, tag: str, eventually: Eventually
) -> None:
    url = f"redis://127.0.0.1:{private_redis.port}/0?scheduler={scheduler}&namespace={tag}"
    order = f"{tag}-1"
    async with api(url) as client:
        submitted = await client.post("/orders", json=PAYOUT, headers={"Idempotency-Key": order})
        assert submitted.status_code == 201, submitted.text

        private_redis.signal(signal.SIGSTOP)  # frozen: connections open, nothing answers
        try:
            await refused_503(client, "GET", f"/orders/{order}")
            await refused_503(
                client, "POST", "/orders", json=PAYOUT, headers={"Idempotency-Key": f"{tag}-2"}
            )
        finally:
            private_redis.signal(signal.SIGCONT)
        await eventually(lambda: serves(client, order), "the API reads again after SIGCONT")
        # The submission cut short by the 503 may have run once Redis woke; resending it is
        # how a client finds out, and it never makes a second order.
        again = await client.post("/orders", json=PAYOUT, headers={"Idempotency-Key": f"{tag}-2"})
        assert again.status_code in (200, 201), again.text

        private_redis.kill()  # down: the port refuses
        await refused_503(client, "GET", f"/orders/{order}")
        await refused_503(client, "DELETE", f"/orders/{order}")
        private_redis.start()
        await eventually(lambda: serves(client, order), "the API reads again after a restart")
        view = (await client.get(f"/orders/{order}")).json()
        assert [entry["key"] for entry in view["history"]] == ["order"]


# -- Postgres ----------------------------------------------------------------------------------


async def test_a_locked_or_unreachable_postgres_gets_503_and_the_api_recovers(
    throwaway_database: ThrowawayDatabase, tag: str, eventually: Eventually
) -> None:
    import psycopg

    order = f"{tag}-1"
    async with api(f"{throwaway_database.url}?queue={tag}") as client:
        submitted = await client.post("/orders", json=PAYOUT, headers={"Idempotency-Key": order})
        assert submitted.status_code == 201, submitted.text

        # Frozen: another session holds every table of the store locked, so each statement
        # waits on the server without end.
        async with await psycopg.AsyncConnection.connect(throwaway_database.url) as locker:
            tables = await (
                await locker.execute(
                    "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
                    " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
                )
            ).fetchall()
            assert tables
            for (table,) in tables:
                await locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            await refused_503(client, "GET", f"/orders/{order}")
            await refused_503(
                client, "POST", "/orders", json=PAYOUT, headers={"Idempotency-Key": f"{tag}-2"}
            )
            await locker.rollback()
        await eventually(lambda: serves(client, order), "the API reads again after the lock")

        # Down: the database refuses connections, and the pool's are cut.
        throwaway_database.refuse_connections()
        try:
            await refused_503(client, "GET", f"/orders/{order}")
            await refused_503(
                client, "POST", f"/orders/{order}/confirmation", json={"approved_by": "d"}
            )
        finally:
            throwaway_database.allow_connections()
        await eventually(lambda: serves(client, order), "the API reads again after the outage")
