"""Schedulers of your own beside ours: `register` adds a backend whose store is opened by code
named by import path (`"mypkg.mymod:open_store"`), and it then runs in every experiment,
table and figure as ours do.

What is registered is text, not an object, because the stores are opened in the agents, other
processes: the `open` request names the opener and the folder to import it from, and each
agent imports it (`load`). Registrations are also kept in `LAB_BACKENDS` (JSON) in this
process's environment (`_carry`), which `experiments.harness.backends` reads at import.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl

from durability.interfaces import Durable
from experiments.harness.backends import BACKENDS, ENVIRONMENT, Backend
from experiments.refusals import BadInput

__all__ = ["ENVIRONMENT", "Opener", "described", "forget", "load", "parse", "register",
           "registered"]

ROOT = Path(__file__).resolve().parents[2]
#: What `store=` may be, and the server kind each needs (`servers.KINDS`).
_SERVERS = {"memory": None, "sqlite": None, "redis": "redis7", "postgres": "postgres"}


class Opener(Protocol):
    """What opens a registered backend's store, with the signature of
    `durability.connect.open_durable` (itself the opener of every backend of ours). `url` is
    the place the lab made for the run (`memory://`, `sqlite:///<file>`, or a Redis namespace
    or Postgres database of its own, with the `options` registered); the lab calls it in each
    agent."""

    def __call__(self, url: str, *, lease: timedelta, poll: timedelta | None = None,
                 housekeeping: bool = False) -> AbstractAsyncContextManager[Durable]: ...


def load(opener: str, path: str = "") -> Opener:
    """The callable `opener` names (`"package.module:name"`), imported with `path` (a folder)
    on `sys.path` if given; a `ValueError` saying what is missing."""
    module_name, colon, attribute = opener.partition(":")
    if not colon or not module_name or not attribute:
        raise BadInput(f"an opener is 'package.module:name', not {opener!r}")
    if path and path not in sys.path:
        sys.path.insert(0, path)
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as error:
        where = f" (looked in {path} too)" if path else ""
        raise BadInput(f"cannot import {module_name!r} for the opener {opener!r}{where}: "
                       f"{error}") from error
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise BadInput(f"{module_name!r} has no {attribute!r} (the opener {opener!r})")
        found = getattr(found, part)
    if not callable(found):
        raise BadInput(f"the opener {opener!r} is a {type(found).__name__}, not callable")
    opened: Opener = found
    return opened


def _named(opener: str | Callable[..., Any]) -> str:
    """`opener` as import-path text: a callable is named by its module and qualified name,
    which an agent can import only if it lives in a module (not a notebook's cell)."""
    if isinstance(opener, str):
        return opener
    module, name = getattr(opener, "__module__", None), getattr(opener, "__qualname__", "")
    if not module or module == "__main__" or "<" in name:
        raise BadInput(
            f"{getattr(opener, '__name__', opener)!r} is defined in the notebook (or inside a "
            "function), where the lab's agents, other processes, cannot import it: put it in "
            "a module and register it by its import path, 'module:name'")
    return f"{module}:{name}"


def _folder(opener: str) -> str:
    """The folder to put on an agent's `sys.path` so that it imports `opener`'s module as this
    process did: "" when the agents find it anyway (the lab's checkout, an installed package)."""
    module = sys.modules[opener.partition(":")[0]]
    where = getattr(module, "__file__", None)
    if where is None:
        return ""
    top = Path(where).resolve().parent
    for _ in range(module.__name__.count(".") + (1 if where.endswith("__init__.py") else 0)):
        top = top.parent
    if top == ROOT or "site-packages" in top.parts:
        return ""
    return str(top)


def register(
    name: str,
    opener: str | Callable[..., Any],
    *,
    like: str | None = None,
    store: str | None = None,
    options: str | None = None,
    polled: bool | None = None,
    skip: tuple[str, ...] | None = None,
    about: str = "",
    path: str | None = None,
    scheduler: str | None = None,
) -> Backend:
    """Add backend `name`, whose store `opener` opens (its import path, or a callable defined
    in a module), to every run from now on; return it.

    `like` names one of our backends whose place it takes (the same kind of store and server,
    URL options, poll sweep and skipped experiments), each overridable: `store` (`memory`,
    `sqlite`, `redis` or `postgres`), `options` (URL options), `polled` (whether `latency`
    sweeps its poll), `skip` (experiments that do not apply). `path` is the folder the agents
    import it from (by default the one this process imported it from); `scheduler` what the
    rows call its scheduler (by default the opener's import path). The opener is imported
    here first, so a typo fails now, not in the agents. Registering a name again replaces its
    registration; one of ours cannot be replaced."""
    if name in BACKENDS and not BACKENDS[name].registered:
        raise BadInput(f"{name!r} is one of the lab's own backends: choose another name")
    if not name or any(c in name for c in ",*= /") or name != name.strip():
        raise BadInput(f"a backend name is one word without ',', '*', '=' or '/': {name!r}")
    spec = _named(opener)
    base: Backend | None = None
    if like is not None:
        base = BACKENDS.get(like)
        if base is None or base.registered:
            raise BadInput(f"like={like!r}: no backend of ours by that name; choose from "
                           f"{', '.join(b for b, k in BACKENDS.items() if not k.registered)}")
    kind = store or (base.store if base else None)
    if kind not in _SERVERS:
        raise BadInput(f"store={kind!r}: give store= one of {', '.join(_SERVERS)} (or like=)")
    load(spec, path or "")
    backend = Backend(
        name=name,
        scheduler=scheduler or spec,
        store=kind,
        server=base.server if base and base.store == kind else _SERVERS[kind],
        options=options if options is not None else (base.options if base else ""),
        polled=polled if polled is not None else (base.polled if base else False),
        skip=frozenset(skip) if skip is not None else (
            base.skip if base else frozenset({"takeover"}) if kind == "memory" else frozenset()),
        about=about or f"{spec}" + (f", beside {like}" if like else ""),
        opener=spec,
        path=path if path is not None else _folder(spec),
        like=like,
    )
    BACKENDS[name] = backend
    _carry()
    return backend


def forget(name: str) -> None:
    """Take a registered backend out again (ours stay)."""
    backend = BACKENDS.get(name)
    if backend is None or not backend.registered:
        raise BadInput(f"{name!r} is not a registered backend")
    del BACKENDS[name]
    _carry()


def registered() -> dict[str, Backend]:
    """The backends registered (not ours), by name."""
    return {name: b for name, b in BACKENDS.items() if b.registered}


def _carry() -> None:
    """Keep `LAB_BACKENDS` equal to the registrations, for the processes started from here:
    `experiments.harness.backends` reads it at import, so a command line run from the same kernel
    (`!python -m experiments run ...`) knows them too."""
    found = [described(b) for b in registered().values()]
    if found:
        os.environ[ENVIRONMENT] = json.dumps(found)
    else:
        os.environ.pop(ENVIRONMENT, None)


def described(backend: Backend) -> dict[str, Any]:
    """A registered backend as `LAB_BACKENDS` and a run's metadata record it."""
    return {"name": backend.name, "scheduler": backend.scheduler, "opener": backend.opener,
            "store": backend.store,
            "server": backend.server, "options": backend.options, "polled": backend.polled,
            "skip": sorted(backend.skip), "about": backend.about, "path": backend.path,
            "like": backend.like}


def parse(text: str) -> tuple[str, dict[str, Any]]:
    """`NAME=package.module:name?like=sqlite&polled=on` (the command line's `--register`) as
    `register`'s arguments."""
    name, equals, rest = text.partition("=")
    if not equals:
        raise ValueError(f"--register takes NAME=package.module:name[?like=...], not {text!r}")
    spec, _, query = rest.partition("?")
    given: dict[str, Any] = {"opener": spec}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in ("like", "store", "options", "about", "path", "scheduler"):
            given[key] = value
        elif key == "polled":
            given[key] = value in ("on", "true", "1", "yes")
        elif key == "skip":
            given[key] = tuple(v for v in value.split(",") if v)
        else:
            raise ValueError(f"--register {name}: no option {key!r}; choose from like, store, "
                             "options, polled, skip, about, path, scheduler")
    return name, given

