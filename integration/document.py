"""What the orders API takes and answers, as pydantic models, and its OpenAPI document.

The request models validate the bodies (`integration.api` parses each body itself, to refuse an
oversized one while reading it); the response models exist for the document, which is the
contract `tests/integration/test_api_schema.py` fuzzes the API against. Whatever the document
promises the API must do, so a rule that spans fields (`OrderIn`'s lines) is written into the
JSON Schema too, and an integer is what JSON Schema calls one (`298.0` included).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import models_json_schema

from durability.checks import MAX_PRIORITY, MIN_PRIORITY
from integration.submission import SKU, Kind, Line, Order

__all__ = [
    "LOCATION",
    "ConfirmationIn",
    "Confirmed",
    "Deleted",
    "Delivered",
    "FailureOut",
    "DocumentedApp",
    "Invalid",
    "MessageIn",
    "OrderIn",
    "OrderList",
    "OrderView",
    "Refusal",
    "Retried",
    "ScheduleIn",
    "ScheduleList",
    "ScheduleOut",
    "StatusOut",
    "Submitted",
    "Unscheduled",
    "body_of",
    "responses",
]


def _whole(value: object) -> object:
    """`298.0` as `298`: JSON Schema counts a number with a zero fraction as an integer, so the
    API does too (a string or a boolean is still refused)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: An integer as JSON Schema has it. (The bounds go before the validator, or pydantic writes
#: them into the schema as `ge`/`le` rather than `minimum`/`maximum`.)
_WHOLE = BeforeValidator(_whole)


class LineIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    sku: Annotated[str, Field(pattern=f"^{SKU.pattern}$")]
    quantity: Annotated[int, Field(ge=1, le=10_000), _WHOLE]
    cents: Annotated[int, Field(ge=0, le=100_000_000), _WHOLE]


#: `OrderIn`'s one rule across fields, said in JSON Schema too, so that the document promises
#: no more than the API accepts: an order that is not a console has at least one line.
_LINES_UNLESS_CONSOLE: dict[str, JsonValue] = {
    "if": {"properties": {"kind": {"const": "console"}}, "required": ["kind"]},
    "then": {},
    "else": {"properties": {"lines": {"minItems": 1}}, "required": ["lines"]},
}


class OrderIn(BaseModel):
    """An order: what `POST /orders` takes."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_LINES_UNLESS_CONSOLE)

    kind: Kind = "payout"
    customer: Annotated[str, Field(min_length=1, max_length=200)]
    lines: Annotated[list[LineIn], Field(max_length=100, validate_default=True)] = []
    priority: Annotated[
        int,
        Field(
            ge=MIN_PRIORITY,
            le=MAX_PRIORITY,
            description="higher runs first among waiting orders (strictly: no aging); an urgent"
            " order is one above 0",
        ),
        _WHOLE,
    ] = 0

    @field_validator("lines")
    @classmethod
    def _lines_unless_console(cls, lines: list[LineIn], info: ValidationInfo) -> list[LineIn]:
        # `kind` is declared first, so it is validated (and in `info.data`) by now.
        kind = info.data.get("kind", "payout")
        if kind != "console" and not lines:
            raise ValueError(f"a {kind} order needs at least one line")
        return lines

    def order(self) -> Order:
        lines = [Line(line.sku, line.quantity, line.cents) for line in self.lines]
        return Order.of(self.kind, self.customer, lines, self.priority)


class ConfirmationIn(BaseModel):
    """A human's approval: what `POST /orders/{id}/confirmation` takes."""

    model_config = ConfigDict(extra="forbid", strict=True)

    approved_by: Annotated[str, Field(min_length=1, max_length=200)]


class MessageIn(BaseModel):
    """A message for a console order's inbox: what `POST /orders/{id}/messages` takes."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: Annotated[str, Field(min_length=1, max_length=4000)]


#: What the example's cron field takes: five fields, each `*`, a number in its range or (for
#: minutes and hours) `*/n`. The library reads all of cron; the API's document takes this much,
#: so that every expression it admits is one the library accepts. (A day of the month is at
#: most 28, or a month without it would make the expression one that never fires.)
CRON = (
    r"^(\*|\*/[1-9]|\*/[1-5][0-9]|[0-9]|[1-5][0-9])"
    r" (\*|\*/[1-9]|\*/1[0-9]|\*/2[0-3]|[0-9]|1[0-9]|2[0-3])"
    r" (\*|[1-9]|1[0-9]|2[0-8]) (\*|[1-9]|1[0-2]) (\*|[0-7])$"
)
#: The zones the example's document admits (the library takes any IANA zone).
Zone = Literal[
    "UTC", "Europe/Berlin", "Europe/London", "America/New_York", "America/Los_Angeles",
    "Asia/Tokyo", "Australia/Sydney",
]
SCHEDULE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

#: `ScheduleIn`'s rule across fields, in JSON Schema too: exactly one of `cron` and `every_s`.
_ONE_CADENCE: dict[str, JsonValue] = {
    "oneOf": [
        {"required": ["cron"], "not": {"required": ["every_s"]}},
        {"required": ["every_s"], "not": {"required": ["cron"]}},
    ]
}


class ScheduleIn(BaseModel):
    """A schedule: what `POST /schedules` takes. `input` is what each firing's workflow gets."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_ONE_CADENCE)

    name: Annotated[str, Field(pattern=SCHEDULE_NAME)]
    body: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,63}$")]
    input: Annotated[
        dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=200)]],
        Field(max_length=20),
    ] = {}
    cron: Annotated[str, Field(pattern=CRON)] = None  # type: ignore[assignment]
    every_s: Annotated[int, Field(ge=1, le=31_536_000), _WHOLE] = None  # type: ignore[assignment]
    zone: Zone = "UTC"
    missed: Literal["skip", "latest", "all"] = "latest"
    bound: Annotated[int, Field(ge=1, le=1000), _WHOLE] = 100

    @model_validator(mode="after")
    def _one_cadence(self) -> ScheduleIn:
        if (self.every_s is None) == (self.cron is None):
            raise ValueError("give exactly one of cron and every_s")
        return self


# -- what the API answers: these models are its OpenAPI document ----------------------------

_OUT = ConfigDict(extra="forbid")


class LineOut(BaseModel):
    model_config = _OUT

    sku: str
    quantity: int
    cents: int


class OrderOut(BaseModel):
    """An order as recorded: lines sharing a SKU are merged."""

    model_config = _OUT

    kind: Kind
    customer: str
    lines: list[LineOut]
    priority: int = Field(0, description="recorded only when not 0")


class Submitted(BaseModel):
    model_config = _OUT

    id: str
    order: OrderOut
    created: bool = Field(description="false when this key had already submitted this order")


class Record(BaseModel):
    """One record of a checkpoint, with the store's time of writing."""

    model_config = _OUT

    key: str
    value: JsonValue
    at: Annotated[str, Field(json_schema_extra={"format": "date-time"})]


class Rollback(BaseModel):
    model_config = _OUT

    id: str
    history: list[Record]
    refund: StatusOut | None = Field(
        description="the refund (`<id>.refund`), a workflow the rollback started; null before"
    )


class OrderView(BaseModel):
    """Where an order stands and what would advance it, read from its checkpoint."""

    model_config = _OUT

    id: str
    kind: str
    stage: str
    waiting_on: list[str]
    listening: bool
    sleeping_until: Annotated[str | None, Field(json_schema_extra={"format": "date-time"})]
    as_of: Annotated[str, Field(json_schema_extra={"format": "date-time"})]
    history: list[Record]
    rollback: Rollback | None
    status: StatusOut


_MOMENT = Field(json_schema_extra={"format": "date-time"})


class FailureOut(BaseModel):
    """One failed attempt, as the worker recorded it."""

    model_config = _OUT

    step: str | None = Field(description="the step that raised; null for code between steps")
    type: str
    message: str
    traceback: str = Field(description="the traceback's last lines, bounded")
    attempt: int
    at: Annotated[str, _MOMENT]
    retry_at: Annotated[str | None, _MOMENT] = Field(
        description="when it is tried again; null if the workflow failed"
    )


class StatusOut(BaseModel):
    """What a workflow is doing, from the store (`durable.status`)."""

    model_config = _OUT

    workflow: str
    state: Literal["queued", "running", "sleeping", "blocked", "failed", "completed", "unknown"]
    until: Annotated[str | None, _MOMENT]
    waiting: list[str]
    listening: list[str]
    failure: FailureOut | None
    at: Annotated[str | None, _MOMENT] = Field(description="when the store wrote the standing")


class OrderList(BaseModel):
    """A page of workflows in id order; pass `after` back for the next page."""

    model_config = _OUT

    orders: list[StatusOut]
    after: str | None = Field(description="the cursor of the next page; null on the last")


class Retried(BaseModel):
    model_config = _OUT

    id: str
    retried: bool


class CancelledOrder(BaseModel):
    model_config = _OUT

    id: str
    cancelled: bool


class Confirmed(BaseModel):
    model_config = _OUT

    id: str
    approved_by: str


class Delivered(BaseModel):
    model_config = _OUT

    id: str
    entry: str = Field(description="the inbox key the message was recorded under")


class Deleted(BaseModel):
    model_config = _OUT

    id: str
    deleted: int = Field(description="records removed, the rollback's included")


class ScheduleOut(BaseModel):
    model_config = _OUT

    name: str
    body: str
    input: dict[str, JsonValue]
    cron: str | None
    every_s: float | None
    zone: str
    missed: str
    bound: int
    paused: bool
    next: str | None = Field(description="the next firing (ISO 8601, UTC); null while paused")
    fired: str | None = Field(description="the last firing started (ISO 8601, UTC)")


class ScheduleList(BaseModel):
    model_config = _OUT

    schedules: list[ScheduleOut]


class Unscheduled(BaseModel):
    model_config = _OUT

    name: str
    removed: bool


class Refusal(BaseModel):
    """Why a request was refused, or why the store could not serve it."""

    model_config = _OUT

    detail: str


class Problem(BaseModel):
    model_config = _OUT

    field: str = Field(description="the field at fault, dotted (`lines.0.quantity`); `body`")
    problem: str


class Invalid(BaseModel):
    """A body that is not what the operation takes: each field at fault."""

    model_config = _OUT

    detail: list[Problem]


LOCATION = {"Location": {"description": "the order's address", "schema": {"type": "string"}}}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before trying again",
        "schema": {"type": "integer"},
    }
}
_REFUSALS: dict[int, str] = {
    400: "a `Content-Length` that is not a number; on `POST /orders`, an `Idempotency-Key`"
    " missing, repeated or malformed",
    404: "no such order (or schedule)",
    409: "the request conflicts with the order's state; nothing was written",
    413: "the body is over the size limit",
}


def responses(
    ok: dict[int | str, dict[str, Any]], refusals: tuple[int, ...]
) -> dict[int | str, Any]:
    """The `responses` of one operation: `ok`, the refusals named, and 503 for every one."""
    documented: dict[int | str, Any] = dict(ok)
    for code in refusals:
        if code == 422:
            documented[422] = {"model": Invalid, "description": "a body that is not valid"}
        else:
            documented[code] = {"model": Refusal, "description": _REFUSALS[code]}
    documented[503] = {
        "model": Refusal,
        "description": "the store is down or did not answer in time; the request may or may"
        " not have taken effect, so send it again after `Retry-After`",
        "headers": _RETRY_AFTER,
    }
    return documented


def body_of(model: type[BaseModel]) -> dict[str, Any]:
    """`openapi_extra` documenting a JSON body of `model`, which the route parses itself."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


class DocumentedApp(FastAPI):
    """FastAPI, with the bodies the routes parse themselves among the document's schemas.

    The routes read their bodies by hand (to refuse an oversized one while reading it, and to
    answer with `Invalid`), so FastAPI does not see them as parameters: their models are added
    here. FastAPI's own 422 schema is taken out: no route has a parameter FastAPI could refuse
    (a path segment is any string), so no request ever gets it.
    """

    bodies: tuple[type[BaseModel], ...] = (OrderIn, ConfirmationIn, MessageIn, ScheduleIn)

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            document = get_openapi(
                title=self.title,
                version=self.version,
                description=self.description,
                routes=self.routes,
            )
            _, defs = models_json_schema(
                [(model, "validation") for model in self.bodies],
                ref_template="#/components/schemas/{model}",
            )
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(defs.get("$defs", {}))
            for operations in document.get("paths", {}).values():
                for operation in operations.values():
                    answer = operation.get("responses", {}).get("422", {})
                    if "HTTPValidationError" in str(answer):
                        del operation["responses"]["422"]
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
            self.openapi_schema = document
        return self.openapi_schema
