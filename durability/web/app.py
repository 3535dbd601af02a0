"""`OperatorPage`: the operator's page as a plain ASGI application, to serve alone (`durability
ui`) or mount in one's own. Server-rendered HTML with no script, every page also as JSON
(`?format=json`, or `Accept: application/json`). Routes: `GET /` (counts, backlog, a page of
workflows by `state`, `prefix`, `after`), `GET /workflow?id=` (one workflow), `GET /confirm`
(a move's confirmation and its nonce) and `POST /act` (the move: `action`, `ref` or `id`,
`token` and `nonce`, or `Authorization: Bearer`).

A store that does not answer is a 503 page saying so, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from durability.checks import check_workflow
from durability.connect import open_durable, unavailable
from durability.interfaces import Durable
from durability.operating import ACTIONS, Missing, act, detail, overview
from durability.operating.actions import Done, Gone, Refused
from durability.web import pages
from durability.web.guard import Guard

__all__ = ["MOST_LISTED", "OperatorPage"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The most workflows one page lists, whatever `limit` asks.
MOST_LISTED = 200
#: The largest form body a move may send.
_MOST_BODY = 16 * 1024

_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self';"
     b" frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    # "same-origin", not "no-referrer": under that a browser sends `Origin: null` with its own
    # form posts, which the origin check must refuse.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    route: str
    root: str
    query: dict[str, str]
    headers: dict[str, str]
    scheme: str
    body: bytes

    @property
    def wants_json(self) -> bool:
        if self.query.get("format") == "json":
            return True
        accepted = self.headers.get("accept", "")
        return "application/json" in accepted and "text/html" not in accepted


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    body: bytes
    kind: bytes = b"text/html; charset=utf-8"

    async def send(self, send: Send) -> None:
        headers = [(b"content-type", self.kind), *_HEADERS]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


class _Problem(Exception):
    def __init__(self, status: int, title: str, said: str) -> None:
        super().__init__(said)
        self.status, self.title, self.said = status, title, said


#: The URL options the page's header shows (the others may hold a password or a key path).
_SHOWN_OPTIONS = ("scheduler", "namespace", "queue", "schema")


def shown_url(url: str) -> str:
    """A store URL as the page shows it: no password, and of its options only those that say
    which queue it is (`_SHOWN_OPTIONS`)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    user = parts.username
    netloc = f"{user}@{host}" if user else host
    kept = [(k, v) for k, v in parse_qsl(parts.query) if k in _SHOWN_OPTIONS]
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(kept), ""))


class OperatorPage:
    """The page over `durable`, or over the store `url` names (opened at the first request and
    again after one that found it down; closed by `aclose` or the server's lifespan).

    Read-only unless `token` is given: then the moves of `durability.operating.ACTIONS` are
    offered, each behind a confirmation that needs the token (at least `SHORTEST_TOKEN`
    characters). Mounted under a prefix, links follow the scope's `root_path`.
    """

    def __init__(
        self,
        durable: Durable | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        secret: bytes | None = None,
    ) -> None:
        if (durable is None) == (url is None):
            raise TypeError("give the page a durable or a store url, one of them")
        self.guard = Guard(token) if secret is None else Guard(token, secret)
        self._durable = durable
        self.url = url
        self.store = shown_url(url) if url is not None else type(durable).__name__
        self._opened: contextlib.AsyncExitStack | None = None
        self._opening = asyncio.Lock()

    async def durable(self) -> Durable:
        if self._durable is not None:
            return self._durable
        assert self.url is not None
        async with self._opening:
            if self._durable is None:
                stack = contextlib.AsyncExitStack()
                self._durable = await stack.enter_async_context(open_durable(self.url))
                self._opened = stack
        return self._durable

    async def aclose(self) -> None:
        if self._opened is not None:
            stack, self._opened = self._opened, None
            self._durable = None
            await stack.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        request = await _read(scope, receive)
        try:
            response = await self._handle(request)
        except _Problem as problem:
            response = self._problem(request, problem)
        except Exception as error:
            if not unavailable(error):
                raise
            await self._forget()
            response = self._problem(
                request, _Problem(503, "The store does not answer", f"{self.store}: {error}")
            )
        await response.send(send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forget(self) -> None:
        """A store opened by URL that stopped answering is opened again at the next request."""
        if self.url is not None:
            with contextlib.suppress(Exception):
                await self.aclose()

    # -- routes --------------------------------------------------------------------------

    async def _handle(self, request: _Request) -> _Response:
        match (request.method, request.route):
            case ("GET" | "HEAD", "/style.css"):
                sheet = files("durability.web").joinpath("style.css").read_bytes()
                return _Response(200, sheet, b"text/css; charset=utf-8")
            case ("GET" | "HEAD", "/" | ""):
                return await self._overview(request)
            case ("GET" | "HEAD", "/workflow"):
                return await self._workflow(request)
            case ("GET" | "HEAD", "/confirm"):
                return self._confirm(request)
            case ("POST", "/act"):
                return await self._act(request)
            case (_, "/act"):
                raise _Problem(405, "Not allowed", "a move is a POST")
            case _:
                raise _Problem(404, "Not found", f"no page at {request.route}")

    async def _overview(self, request: _Request) -> _Response:
        query = request.query
        try:
            limit = min(int(query.get("limit", "50")), MOST_LISTED)
            view = await overview(
                await self.durable(),
                state=query.get("state") or None,
                prefix=query.get("prefix") or None,
                after=query.get("after") or None,
                limit=limit,
            )
        except (ValueError, TypeError) as bad:
            raise _Problem(400, "Bad request", str(bad)) from None
        if request.wants_json:
            return _json(200, view.to_json())
        title = "Workflows" if view.state is None else f"{view.state} workflows"
        return self._page(200, title, pages.overview(view, root=request.root), request)

    async def _workflow(self, request: _Request) -> _Response:
        workflow = _id(request.query.get("id"))
        try:
            seen = await detail(await self.durable(), workflow)
        except Missing as missing:
            raise _Problem(404, "No such workflow", str(missing)) from None
        if request.wants_json:
            return _json(200, seen.to_json())
        body = pages.workflow(seen, root=request.root, acting=self.guard.acting)
        return self._page(200, f"workflow {workflow}", body, request)

    def _confirm(self, request: _Request) -> _Response:
        self._acting()
        action = ACTIONS.get(request.query.get("action", ""))
        if action is None:
            raise _Problem(404, "No such action", f"the actions are {', '.join(ACTIONS)}")
        workflow = _id(request.query.get("id"))
        nonce = self.guard.nonce(action.name, workflow)
        if request.wants_json:
            return _json(200, {"action": action.name, "workflow": workflow, "nonce": nonce})
        body = pages.confirm(action, workflow, nonce, root=request.root)
        return self._page(200, f"{action.title} {workflow}", body, request)

    async def _act(self, request: _Request) -> _Response:
        self._acting()
        if not self.guard.same_site(request.headers, request.scheme):
            raise _Problem(403, "Refused", "the request came from another site")
        form = _form(request)
        action = ACTIONS.get(form.get("action", ""))
        if action is None:
            raise _Problem(400, "Bad request", f"the actions are {', '.join(ACTIONS)}")
        if "ref" in form:
            try:
                workflow = pages.dereference(form["ref"])
            except ValueError as bad:
                raise _Problem(400, "Bad request", str(bad)) from None
        else:
            workflow = form.get("id", "")
        workflow = _id(workflow)
        bearer = request.headers.get("authorization", "")
        if bearer.startswith("Bearer "):
            # A script's header, which no cross-site form can send: the token alone suffices.
            allowed = self.guard.token_holds(bearer.removeprefix("Bearer "))
        else:
            allowed = self.guard.token_holds(form.get("token")) and self.guard.nonce_holds(
                form.get("nonce", ""), action.name, workflow
            )
        if not allowed:
            raise _Problem(403, "Refused", "a wrong or missing token (or confirmation): nothing"
                           " was changed")
        result = await act(await self.durable(), action.name, workflow)
        match result:
            case Done(said=said):
                status, good, outcome, title = 200, True, "done", f"{action.title}: done"
            case Refused(said=said):
                status, good, outcome, title = 409, False, "refused", "Refused"
            case Gone(said=said):
                status, good, outcome, title = 404, False, "not found", "No such workflow"
        if request.wants_json:
            body = {"action": action.name, "workflow": workflow, "result": outcome, "said": said}
            return _json(status, body)
        page = pages.result(title, said, good, workflow, root=request.root)
        return self._page(status, f"{action.title} {workflow}", page, request)

    def _acting(self) -> None:
        if not self.guard.acting:
            raise _Problem(403, "Read-only", "this page was started without actions")

    # -- answers -------------------------------------------------------------------------

    def _page(self, status: int, title: str, body: str, request: _Request) -> _Response:
        document = pages.layout(
            title, body, root=request.root, store=self.store, acting=self.guard.acting
        )
        return _Response(status, b"" if request.method == "HEAD" else document.encode())

    def _problem(self, request: _Request, problem: _Problem) -> _Response:
        if request.wants_json or (request.method == "POST" and "json" in request.headers.get(
            "accept", ""
        )):
            return _json(problem.status, {"error": problem.title, "said": problem.said})
        body = pages.problem(problem.title, problem.said, root=request.root)
        return self._page(problem.status, problem.title, body, request)


def _json(status: int, body: object) -> _Response:
    text = json.dumps(body, ensure_ascii=True, default=str)
    return _Response(status, text.encode(), b"application/json")


def _id(given: str | None) -> str:
    if not given:
        raise _Problem(400, "Bad request", "no workflow id given (id=...)")
    try:
        return check_workflow(given)
    except (ValueError, TypeError) as bad:
        raise _Problem(400, "Bad request", str(bad)) from None


def _form(request: _Request) -> dict[str, str]:
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind not in ("application/x-www-form-urlencoded", ""):
        raise _Problem(415, "Unsupported", "send the form as application/x-www-form-urlencoded")
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError:
        raise _Problem(400, "Bad request", "the form is not UTF-8") from None
    parsed = parse_qs(text, keep_blank_values=True, max_num_fields=20)
    return {name: values[0] for name, values in parsed.items()}


async def _read(scope: Scope, receive: Receive) -> _Request:
    headers = {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }
    root = str(scope.get("root_path", ""))
    path = str(scope.get("path", "/"))
    route = path.removeprefix(root) if root and path.startswith(root) else path
    raw = bytes(scope.get("query_string", b"")).decode("utf-8", "replace")
    query = {name: values[0] for name, values in parse_qs(raw, keep_blank_values=True).items()}
    body = b""
    if scope.get("method") == "POST":
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > _MOST_BODY:
                body = b""
                break
            if not message.get("more_body", False):
                break
    return _Request(
        str(scope.get("method", "GET")),
        route,
        root,
        query,
        headers,
        str(scope.get("scheme", "http")),
        body,
    )
