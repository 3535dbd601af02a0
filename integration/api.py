"""The HTTP API: `durability-api --store URL` (or `python -m integration.api`).

It writes values into workflows and reads their checkpoints; it never runs one (a worker does).
Submitting an order and confirming a payout are the same move, `arrive`, because both are
values a workflow waits on. So the API holds nothing and may be restarted or scaled at will.
`make_app` lists the routes, `Refused` the refusals and `StoreDown` what a client gets while
the store is away.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import re
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import Scope

from durability import Contended, Durable, Limit, positive
from durability.children import CHILD, child_id
from durability.connect import open_durable, unavailable
from durability.endings import ended
from durability.interfaces import MAX_PAGE, STATES, check_workflow
from durability.schedules import Schedules
from durability.status import Inspectable
from durability.wakeups import arrive, deliver
from integration import cli
from integration.document import (
    LOCATION,
    CancelledOrder,
    ConfirmationIn,
    Confirmed,
    Deleted,
    Delivered,
    DocumentedApp,
    MessageIn,
    OrderIn,
    OrderList,
    OrderView,
    Retried,
    Submitted,
    body_of,
    responses,
)
from integration.effects import GATEWAY
from integration.log import configure, fields
from integration.orders import unwind_id
from integration.payout import APPROVAL
from integration.refund import REFUND
from integration.schedule_routes import add_schedule_routes
from integration.submission import Order
from integration.worker import effects_from, redacted, retry_from, serve
from integration.workflow import ORDER, history, status

log = logging.getLogger("integration.api")

#: The largest request body accepted, in bytes.
MAX_BODY = 64 * 1024
#: What an order id (the `Idempotency-Key`) may be. No `:`, so no order can name another's
#: rollback (`<id>:unwind`); no braces, which Redis keys reserve; bounded, as Redis wants.
ORDER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


#: How long one store call may take before the request gets 503.
STORE_TIMEOUT = timedelta(seconds=5)
#: What a 503 tells the client to wait before trying again.
RETRY_AFTER = timedelta(seconds=2)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class Refused(Exception):
    """A request refused before anything was written: rendered as `{"detail": ...}`.

    | status | when |
    |---|---|
    | 400 | no `Idempotency-Key`, more than one, or one not 1-128 of `[A-Za-z0-9._-]` |
    | 404 | no such order |
    | 409 | the key names a different order; a confirmation or message not waited for |
    | 413 | a body over `MAX_BODY` bytes (by `Content-Length`, and by the bytes read) |
    | 422 | a body that is not the expected JSON; the response names each field at fault |
    """

    def __init__(self, status: int, detail: object) -> None:
        super().__init__(status, detail)
        self.status = status
        self.detail = detail


class StoreDown(Exception):
    """A store call failed for want of the store (down, or no answer within `store_timeout`,
    `--store-timeout`): 503 with `Retry-After` and `{"detail": ...}`.

    The API carries on once the store is back. A 503 cannot say whether a write it cut short
    happened, so a client resends it: `POST /orders` under the same key is idempotent.
    """


def _field(location: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in location) or "body"


async def _body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 past `limit` bytes, before or while reading it."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise Refused(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise Refused(413, f"the body is over {limit} bytes")
    read = bytearray()
    async for chunk in request.stream():
        read += chunk
        if len(read) > limit:
            raise Refused(413, f"the body is over {limit} bytes")
    return bytes(read)


async def _parse(request: Request, model: type[M], limit: int) -> M:
    raw = await _body(request, limit)
    try:
        return model.model_validate_json(raw or b"null")
    except ValidationError as error:
        problems = [
            {"field": _field(tuple(problem["loc"])), "problem": problem["msg"]}
            for problem in error.errors(include_url=False)
        ]
        raise Refused(422, problems) from None


def _order_id(value: str | None, *, missing: int) -> str:
    if value is None:
        raise Refused(missing, "an Idempotency-Key header is required: it names the order")
    if not ORDER_ID.fullmatch(value):
        raise Refused(
            400 if missing == 400 else 404,
            f"an order id is 1-128 of [A-Za-z0-9._-], starting with a letter or digit;"
            f" got {value!r}",
        )
    if value.endswith(f".{REFUND}"):  # the id of an order's refund child (`run.child`)
        raise Refused(
            400 if missing == 400 else 404,
            f"an order id may not end in .{REFUND}, which names an order's refund; got {value!r}",
        )
    return value


def _refund(workflow: str) -> bool:
    """Whether `workflow` is an order's refund (no order's id ends so: `_order_id`)."""
    return workflow.endswith(f".{REFUND}")


def _cursor(value: str) -> bool:
    """Whether `value` can be a listing's cursor: a workflow id (an order's or a rollback's)."""
    try:
        check_workflow(value)
    except ValueError:
        return False
    return True


def _idempotency_key(request: Request) -> str:
    """The one `Idempotency-Key` of `request`: two would name two orders, and which one the
    client meant cannot be guessed."""
    given = request.headers.getlist("idempotency-key")
    if len(given) > 1:
        raise Refused(400, f"send one Idempotency-Key header, not {len(given)}")
    return _order_id(given[0] if given else None, missing=400)


def _allowed(app: FastAPI, scope: Scope) -> str:
    """Every method some route of `app` answers on the path of `scope`, for `Allow`."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def make_app(
    durable: Durable,
    *,
    max_body: int = MAX_BODY,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    store_timeout: timedelta = STORE_TIMEOUT,
    retry_after: timedelta = RETRY_AFTER,
    gateway: Limit | None = None,
) -> FastAPI:
    """The API over `durable`. It never runs a workflow. Every wakeup it makes for an order has
    the order's `priority`, and for one that pays, the `gateway` limit (if given).

    | request | does | answers |
    |---|---|---|
    | `POST /orders` + `Idempotency-Key` | `arrive(key, "order", body)` | 201 new, 200 again |
    | `GET /orders/{id}` | reads the checkpoint and its rollback's | history, stage, waits |
    | `POST /orders/{id}/confirmation` | `arrive(id, "approved-by", name)` | 202 |
    | `POST /orders/{id}/messages` | `deliver(id, {"text": ...})` | 202 with the entry's key |
    | `DELETE /orders/{id}` | `delete` of id, id:unwind, id.refund (cancelled if live) | 200 |
    | `GET /orders?state=&prefix=&limit=&after=` | `durable.list(...)` but refunds | statuses |
    | `POST /orders/{id}/retry` | `durable.retry(id)`: run a failed order again | 202 |
    | `/schedules...` | keep, list, pause, resume, remove schedules (`schedule_routes`) | |
    | `POST /orders/{id}/cancel` | `durable.cancel(id)`: run nothing more of it | 202; 409 ended |

    Each store call is given `store_timeout`; one that fails because the store is down, or
    takes longer, answers 503 with `Retry-After: retry_after` (in whole seconds, at least 1).
    `/openapi.json` documents each body and every status (`integration.document`); `OPTIONS` on
    a path, and a 405, name every method in `Allow`.
    """
    positive("store_timeout", store_timeout)
    positive("retry_after", retry_after)
    app = DocumentedApp(
        title="durability: orders",
        version="0.1.0",
        description="Orders over a durable store: submit, watch, confirm, message, delete.",
    )
    checkpointer = durable.checkpointer
    if not isinstance(durable, Inspectable):
        raise TypeError(f"{type(durable).__name__} cannot say a workflow's status (no status)")
    inspect: Inspectable = durable

    def policy(order: Order) -> tuple[int, Limit | None]:
        """The priority and limit of a wakeup for `order`."""
        return order.priority, gateway if order.pays else None
    limit = store_timeout.total_seconds()
    wait = str(max(1, math.ceil(retry_after.total_seconds())))

    @app.exception_handler(Refused)
    async def refused(_: Request, error: Refused) -> Response:
        return JSONResponse({"detail": error.detail}, status_code=error.status)

    @app.exception_handler(StoreDown)
    async def store_down(_: Request, error: StoreDown) -> Response:
        return JSONResponse({"detail": str(error)}, status_code=503, headers={"Retry-After": wait})

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> Response:
        if error.status_code == 405:
            # Starlette names the methods of the first route on the path only; a path served by
            # several routes (GET and DELETE /orders/{id}) has them all.
            error.headers = {**(error.headers or {}), "Allow": _allowed(app, request.scope)}
        return await http_exception_handler(request, error)

    @app.middleware("http")
    async def access(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        elapsed = (time.perf_counter() - started) * 1000
        log.info(
            "request",
            extra=fields(
                method=request.method,
                path=request.url.path,
                status=response.status_code,
                ms=f"{elapsed:.1f}",
            ),
        )
        return response

    async def store(call: Coroutine[Any, Any, T]) -> T:
        """`call` (one store operation) bounded by `store_timeout`; `StoreDown` if the store
        is unreachable or slower than that. Cancelling a call is safe on every store: its reply
        is dropped, or its connection closed, never handed to another caller."""
        try:
            async with asyncio.timeout(limit):
                return await call
        except TimeoutError:
            log.warning("store too slow", extra=fields(timeout=store_timeout))
            raise StoreDown(f"the store did not answer within {limit:g} s; try again") from None
        except Exception as error:
            if not unavailable(error):
                raise
            log.warning("store unavailable", extra=fields(error=repr(error)))
            raise StoreDown(
                f"the store is unavailable ({type(error).__name__}); try again"
            ) from None

    async def known(order_id: str) -> dict[str, object]:
        records = await store(checkpointer.load(order_id))
        if ORDER not in records:
            raise Refused(404, f"no order {order_id!r}")
        return records

    @app.post(
        "/orders",
        status_code=201,
        responses=responses(
            {
                201: {"model": Submitted, "description": "a new order", "headers": LOCATION},
                200: {
                    "model": Submitted,
                    "description": "this order was already submitted under this key",
                    "headers": LOCATION,
                },
            },
            (400, 409, 413, 422),
        ),
        openapi_extra={
            **body_of(OrderIn),
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": True,
                    "description": "the order id: resending under it is idempotent",
                    "schema": {"type": "string", "pattern": f"^{ORDER_ID.pattern}$"},
                }
            ],
        },
    )
    async def submit(request: Request) -> Response:
        """Submit an order under the id its `Idempotency-Key` names."""
        order_id = _idempotency_key(request)
        submitted = (await _parse(request, OrderIn, max_body)).order()
        order = submitted.to_record()
        held = (await store(checkpointer.load(order_id))).get(ORDER)
        if held is not None and held != order:
            raise Refused(409, f"Idempotency-Key {order_id!r} already names a different order")
        # The key is the workflow id, so a resubmission addresses the same workflow: `arrive`
        # is first-writer-wins, and sending it again also supplies the wakeup that a crash
        # between its write and its queueing could have lost.
        recorded = await store(arrive(durable, order_id, ORDER, order, *policy(submitted)))
        if recorded.value != order:  # lost a race to a different order under the same key
            raise Refused(409, f"Idempotency-Key {order_id!r} already names a different order")
        log.info("order submitted", extra=fields(order=order_id, first=recorded.first))
        return JSONResponse(
            {"id": order_id, "order": recorded.value, "created": recorded.first},
            status_code=201 if recorded.first else 200,
            headers={"Location": f"/orders/{order_id}"},
        )

    @app.get(
        "/orders/{order_id}",
        responses=responses({200: {"model": OrderView, "description": "the order"}}, (404,)),
    )
    async def view(order_id: str) -> Response:
        """The order's checkpoint as a progress view."""
        order_id = _order_id(order_id, missing=404)
        written = await store(checkpointer.history(order_id))
        records = {w.key: w.value for w in written}
        if ORDER not in records:
            raise Refused(404, f"no order {order_id!r}")
        undoing = unwind_id(order_id)
        rollback = await store(checkpointer.history(undoing))
        now = clock()
        stage = status(records, {w.key: w.value for w in rollback}, now)
        standing = await store(inspect.status(order_id))
        # The refund, once the rollback started it (`run.child`), shown under the rollback.
        started = f"{CHILD}{REFUND}" in records
        refund = await store(inspect.status(child_id(order_id, REFUND))) if started else None
        undone = None
        if rollback or refund is not None:
            undone = {"id": undoing, "history": history(rollback),
                      "refund": None if refund is None else refund.to_json()}
        return JSONResponse(
            {
                "id": order_id,
                "kind": stage.kind,
                "stage": stage.stage,
                "waiting_on": sorted(stage.waiting),
                "listening": stage.listening,
                "sleeping_until": stage.until,
                "as_of": now.isoformat(),
                "history": history(written),
                "rollback": undone,
                "status": standing.to_json(),
            }
        )

    @app.get(
        "/orders",
        responses=responses(
            {200: {"model": OrderList, "description": "a page of workflows"}}, (422,)
        ),
        openapi_extra={
            "parameters": [
                {
                    "name": "state",
                    "in": "query",
                    "required": False,
                    "description": "only workflows whose last pass left them in this state",
                    "schema": {"type": "string", "enum": list(STATES)},
                },
                {
                    "name": "prefix",
                    "in": "query",
                    "required": False,
                    "description": "only workflows whose id starts with this",
                    "schema": {"type": "string", "pattern": f"^{ORDER_ID.pattern}$"},
                },
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
                },
                {
                    "name": "after",
                    "in": "query",
                    "required": False,
                    "description": "the `after` of the previous page",
                    # a workflow id: no NUL (SQL text cannot hold it), no brace (a hash tag)
                    "schema": {"type": "string", "minLength": 1, "maxLength": 256,
                               "pattern": "^[^\\u0000{}]+$"},
                },
            ]
        },
    )
    async def orders(request: Request) -> Response:
        """A page of orders (and their rollbacks, not their refunds) in id order, by state."""
        query = request.query_params
        problems: list[dict[str, str]] = []
        state = query.get("state")
        if state is not None and state not in STATES:
            problems.append({"field": "state", "problem": f"one of {', '.join(STATES)}"})
        prefix = query.get("prefix")
        if prefix is not None and not ORDER_ID.fullmatch(prefix):
            problems.append({"field": "prefix", "problem": "1-128 of [A-Za-z0-9._-]"})
        raw = query.get("limit", "50")
        count = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 4 else 0
        if not 1 <= count <= MAX_PAGE:
            problems.append({"field": "limit", "problem": f"a whole number from 1 to {MAX_PAGE}"})
        after = query.get("after")
        if after is not None and not _cursor(after):
            problems.append({"field": "after", "problem": "the `after` of a previous page"})
        if problems:
            raise Refused(422, problems)
        # An order's refund is a workflow of its own (`<id>.refund`), not an order: left out,
        # and the page filled up past it, so a page is short only where the listing ends.
        listed: list[dict[str, object]] = []
        while True:
            page = await store(
                inspect.list(state=state, prefix=prefix, limit=count - len(listed), after=after)
            )
            listed += [found.to_json() for found in page.statuses if not _refund(found.workflow)]
            after = page.after
            if after is None or len(listed) == count:
                return JSONResponse({"orders": listed, "after": after})

    @app.post(
        "/orders/{order_id}/retry",
        status_code=202,
        responses=responses(
            {202: {"model": Retried, "description": "the order will run again"}}, (404, 409)
        ),
    )
    async def retry(order_id: str) -> Response:
        """Run a failed order again from its last recorded step."""
        order_id = _order_id(order_id, missing=404)
        priority, gate = policy(Order.parse((await known(order_id))[ORDER]))
        try:
            retried = await store(inspect.retry(order_id, priority=priority, limit=gate))
        except Contended:
            raise Refused(409, f"order {order_id!r} is running; it has not failed") from None
        if not retried:
            state = (await store(inspect.status(order_id))).state
            raise Refused(409, f"order {order_id!r} has not failed ({state})")
        log.info("order retried", extra=fields(order=order_id))
        return JSONResponse({"id": order_id, "retried": True}, status_code=202)

    @app.post(
        "/orders/{order_id}/cancel",
        status_code=202,
        responses=responses(
            {202: {"model": CancelledOrder, "description": "the order runs nothing more"}},
            (404, 409),
        ),
    )
    async def cancel(order_id: str) -> Response:
        """Cancel an order that has not ended: nothing more of it runs (a pass under way
        stops at its next step). A rollback already started runs on."""
        order_id = _order_id(order_id, missing=404)
        await known(order_id)
        if not await store(inspect.cancel(order_id)):
            state = (await store(inspect.status(order_id))).state
            raise Refused(409, f"order {order_id!r} has ended ({state}); nothing was cancelled")
        log.info("order cancelled", extra=fields(order=order_id))
        return JSONResponse({"id": order_id, "cancelled": True}, status_code=202)

    @app.post(
        "/orders/{order_id}/confirmation",
        status_code=202,
        responses=responses(
            {202: {"model": Confirmed, "description": "the approval, recorded"}},
            (400, 404, 409, 413, 422),
        ),
        openapi_extra=body_of(ConfirmationIn),
    )
    async def confirm(order_id: str, request: Request) -> Response:
        """Approve an order that waits for a confirmation."""
        order_id = _order_id(order_id, missing=404)
        confirmation = await _parse(request, ConfirmationIn, max_body)
        records = await known(order_id)
        stage = status(records, {}, clock())
        if APPROVAL not in stage.waiting:
            raise Refused(
                409, f"order {order_id!r} is not waiting for a confirmation ({stage.stage})"
            )
        wakeup = policy(Order.parse(records[ORDER]))
        by = confirmation.approved_by
        recorded = await store(arrive(durable, order_id, APPROVAL, by, *wakeup))
        if not recorded.first:
            raise Refused(409, f"order {order_id!r} was already confirmed by {recorded.value!r}")
        log.info("order confirmed", extra=fields(order=order_id, by=confirmation.approved_by))
        return JSONResponse({"id": order_id, "approved_by": recorded.value}, status_code=202)

    @app.post(
        "/orders/{order_id}/messages",
        status_code=202,
        responses=responses(
            {202: {"model": Delivered, "description": "the message, in the inbox"}},
            (400, 404, 409, 413, 422),
        ),
        openapi_extra=body_of(MessageIn),
    )
    async def message(order_id: str, request: Request) -> Response:
        """Deliver a message to a console order's inbox."""
        order_id = _order_id(order_id, missing=404)
        sent = await _parse(request, MessageIn, max_body)
        records = await known(order_id)
        stage = status(records, {}, clock())
        if not stage.listening:
            raise Refused(409, f"order {order_id!r} does not read messages ({stage.stage})")
        wakeup = policy(Order.parse(records[ORDER]))
        entry = await store(deliver(durable, order_id, {"text": sent.text}, *wakeup))
        log.info("message delivered", extra=fields(order=order_id, entry=entry.key))
        return JSONResponse({"id": order_id, "entry": entry.key}, status_code=202)

    @app.delete(
        "/orders/{order_id}",
        responses=responses(
            {200: {"model": Deleted, "description": "the order, forgotten"}}, (404,)
        ),
    )
    async def delete(order_id: str) -> Response:
        """Forget an order, its rollback and its refund (their wakeups first); a refund still
        running is cancelled first, so nothing of it runs again."""
        order_id = _order_id(order_id, missing=404)
        await known(order_id)
        refund = child_id(order_id, REFUND)
        held = await store(checkpointer.load(refund))
        # A live refund is cancelled with its order, which cancels its children: the refund's
        # ending then wakes an order that has ended, which runs nothing (a refund cancelled
        # alone would wake its order mid-rollback). An order that ended first: the refund alone.
        live = bool(held) and ended(held) is None
        if live and not await store(inspect.cancel(order_id)):
            await store(inspect.cancel(refund))
        # The order last: while it still exists a retry can find the rest.
        removed = await store(durable.delete(refund))
        removed += await store(durable.delete(unwind_id(order_id)))
        removed += await store(durable.delete(order_id))
        log.info("order deleted", extra=fields(order=order_id, records=removed))
        return JSONResponse({"id": order_id, "deleted": removed})

    async def parsed(request: Request, model: type[M]) -> M:
        return await _parse(request, model, max_body)

    add_schedule_routes(app, Schedules(durable, clock=clock), store, parsed, Refused)

    async def options(request: Request) -> Response:
        return Response(status_code=204, headers={"Allow": _allowed(app, request.scope)})

    for path in ("/orders", "/orders/{order_id}", "/schedules", "/schedules/{name}"):
        app.add_api_route(path, options, methods=["OPTIONS"], include_in_schema=False)
    return app


async def run(args: argparse.Namespace) -> None:
    """Serve the API over the store `args.store` names until a signal. With `memory://` this
    process runs a worker too, since a memory store lives in one process; over any other store
    run `durability-worker` processes beside it."""
    async with open_durable(args.store, lease=args.lease) as durable:
        config = uvicorn.Config(
            make_app(
                durable,
                store_timeout=args.store_timeout,
                retry_after=args.retry_after,
                gateway=None if args.gateway_limit is None else Limit(GATEWAY, args.gateway_limit),
            ),
            host=args.host,
            port=args.port,
            log_config=None,  # our key=value lines, not uvicorn's formats
            access_log=False,  # the middleware logs each request instead
            timeout_graceful_shutdown=10,
        )
        server = uvicorn.Server(config)
        worker: asyncio.Task[None] | None = None
        drain = asyncio.Event()
        if args.store.startswith("memory:"):
            # A memory store lives in this process, so its worker has to as well.
            worker = asyncio.create_task(
                serve(
                    durable,
                    effects_from(args),
                    pool=args.pool,
                    tick=args.tick,
                    stop=drain,
                    grace=args.grace,
                    retry=retry_from(args),
                    nightly=args.nightly,
                )
            )
        log.info(
            "api ready",
            extra=fields(store=redacted(args.store), host=args.host, port=args.port),
        )
        try:
            await server.serve()
        finally:
            if worker is not None:
                # Drained, not cancelled: the passes running finish their steps (up to
                # `--grace`), since whatever a memory store holds ends with this process.
                drain.set()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker
        log.info("api stopped")


def _noted(signum: int, _: FrameType | None) -> None:
    """Stands in for the default handler uvicorn re-raises a signal to after its own graceful
    shutdown, so the store is closed and the process exits 0 rather than dying on the signal."""
    log.info("signal handled", extra=fields(signal=signal.Signals(signum).name))


def main(argv: list[str] | None = None) -> None:
    made = cli.parser("durability-api", "Serve the orders API over a store.")
    made.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    made.add_argument("--port", type=int, default=8000, help="default 8000")
    made.add_argument(
        "--store-timeout",
        type=cli.duration,
        default=STORE_TIMEOUT,
        help="how long one store call may take before the request gets 503 (default 5s)",
    )
    made.add_argument(
        "--retry-after",
        type=cli.duration,
        default=RETRY_AFTER,
        help="the Retry-After a 503 carries, rounded up to whole seconds (default 2s)",
    )
    cli.add_worker_options(made)
    args = made.parse_args(argv)
    configure(args.log_level)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _noted)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
