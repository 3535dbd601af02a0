"""Every scheduler the lab compares, registered once: a new one is one entry here, and then
appears in every experiment, table and figure.

A `Backend` is one of ours; a rival's (`rival=`: a job queue people would pick instead,
driven by its own agent in its own virtualenv, `experiments.harness.rivals`); or one of your
own (`opener=`, registered from a notebook by `experiments.harness.registry.register`,
reaching other processes through `LAB_BACKENDS`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from experiments.refusals import BadInput

__all__ = ["BACKENDS", "ENVIRONMENT", "OPEN", "Backend", "Place", "from_environment", "select"]

#: What opens the store of every backend of ours (a rival's agent opens its own queue).
OPEN = "durability.connect:open_durable"
#: The environment variable that carries registered backends to the processes started here.
ENVIRONMENT = "LAB_BACKENDS"


@dataclass(frozen=True)
class Place:
    """One isolated corner of a server for one run: a base URL (for Postgres, a database of
    the run's own) and a tag no other run uses (namespace, queue, file name)."""

    base: str
    tag: str
    directory: str = ""


@dataclass(frozen=True)
class Backend:
    """One scheduler as the lab runs it: what it runs (`scheduler`), which server kind it needs
    (`servers.KINDS`, or None for memory and SQLite), how a URL for one isolated corner of that
    server is built (`url`: its own namespace, queue, database or file), and what about it an
    experiment may sweep: a `polled` backend's poll interval is the floor under its latency, so
    `latency` runs it at several. A rival's `variants` are the settings it runs with; a row's
    `variant` says which. `opener` is the import path of what opens its store."""

    name: str
    scheduler: str
    store: str  # memory | redis | postgres | sqlite
    server: str | None  # a servers.KINDS entry; None: needs no server
    options: str = ""  # the URL options that make this backend what it is
    polled: bool = False
    rival: str | None = None  # the rival's agent module under experiments.harness.rivals
    variants: tuple[str, ...] = ("default",)
    skip: frozenset[str] = field(default_factory=frozenset)
    about: str = ""
    #: The import path of what opens the store (`open_durable`'s signature), and the folder
    #: the agents import it from ("": they find it as they are); `like`: ours it varies.
    opener: str = OPEN
    path: str = ""
    like: str | None = None

    @property
    def registered(self) -> bool:
        """Whether it is a backend of someone's own (`experiments.harness.registry`), not ours."""
        return self.opener != OPEN

    @property
    def in_process(self) -> bool:
        """Memory lives in one process: its submitter and worker must share it."""
        return self.store == "memory"

    def applies(self, experiment: str) -> bool:
        if experiment in _NODES and self.server != "cluster":
            return False
        return experiment not in self.skip

    def left_out(self, experiment: str) -> str | None:
        """Why `experiment` leaves this backend out (said beside the run's skipped ones), or
        None where it takes part."""
        if self.applies(experiment):
            return None
        if experiment in _NODES and self.server != "cluster":
            return "it measures a cluster's nodes one by one, and only a cluster has them"
        return _WHY.get(self.skip, f"{experiment} does not measure {self.name}")

    def url(self, place: Place, extra: str = "") -> str:
        """The store URL of this backend in `place` (ours only), with `extra` URL options."""
        if self.store == "memory":
            return "memory://"
        options = [o for o in (self.options, extra) if o]
        if self.store == "sqlite":
            query = f"?{'&'.join(options)}" if options else ""
            return f"sqlite://{place.directory}/{place.tag}.db{query}"
        if self.store == "redis":
            options.append(f"namespace=lab-{place.tag}")
        else:
            options.append(f"queue=lab-{place.tag}")
        return f"{place.base}?{'&'.join(options)}"


_NOT_MEMORY = frozenset({"takeover"})  # one process: nothing to kill and take over from
#: Polling changes how a reader waits, not what the queue holds: their growth is their twin's.
#: Nor how a cancel or a result travels (`result` is woken by the ending, polled or not).
#: Nor what a policy costs beyond that wait (`policies`: the common path is in `latency`).
_POLLED = frozenset({"growth", "lifecycle", "policies"})
#: The same scheduler code on another server version: measured where the version matters.
_SAME_CODE = frozenset({"takeover", "scaling", "wakeups", "lifecycle", "policies"})
#: `scaling` times our stores' own operations (claim + load, take, `wake_due`): a rival has
#: none of them. Every other experiment asks its question of the rivals too.
_OURS_ONLY = frozenset({"scaling", "lifecycle"})
#: (`lifecycle` does run there: a cancel and an ending's PUBLISH cross the cluster's slots.)
_CLUSTER = frozenset({"idle", "growth", "takeover", "scaling", "wakeups"})
#: What only a backend on a Redis Cluster takes part in: `scale-out` reads each node's counters.
_NODES = frozenset({"scale-out"})
#: Why each of the sets above leaves a backend out, as a run says it.
_WHY = {
    _NOT_MEMORY: "in one process: there is no worker to kill and another to take over",
    _POLLED: "polling changes how a reader waits, not what the queue holds nor how a cancel, "
             "a result or a policy travels: its numbers are its twin's without the poll",
    _SAME_CODE: "the same scheduler code as on Redis 7: measured where the server's version "
                "matters",
    _OURS_ONLY: "the experiment times our stores' own operations (or cancel and result), "
                "which a rival has none of",
    _CLUSTER: "a cluster is measured where it changes the answer (latency, throughput)",
}

BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in [
        Backend("memory", "MemoryScheduler", "memory", None, skip=_NOT_MEMORY,
                about="dicts in one process: the floor under every other row"),
        Backend("redis-stream", "RedisStreamScheduler", "redis", "redis7",
                "scheduler=stream", about="stream + consumer group + sleeping ZSET, Redis 7"),
        Backend("redis-stream-8.2", "RedisStreamScheduler", "redis", "redis8",
                "scheduler=stream", skip=_SAME_CODE,
                about="the same on Redis 8.2 (XTRIM ... ACKED)"),
        Backend("redis-set", "RedisSetScheduler", "redis", "redis7",
                "scheduler=set&doorbell=on", about="one ZSET by visibility, with its doorbell"),
        Backend("redis-set-polled", "RedisSetScheduler", "redis", "redis7",
                "scheduler=set&doorbell=off", polled=True, skip=_POLLED,
                about="one ZSET by visibility, polling: the published design"),
        Backend("postgres", "PostgresScheduler", "postgres", "postgres", "notify=on",
                about="a row per workflow, SKIP LOCKED, woken by LISTEN/NOTIFY"),
        Backend("postgres-polled", "PostgresScheduler", "postgres", "postgres", "notify=off",
                polled=True, skip=_POLLED, about="the same without notifications: polling"),
        Backend("sqlite", "SqliteScheduler", "sqlite", None, polled=True,
                about="a row per workflow in one file; other processes poll"),
        Backend("redis-stream-cluster", "RedisStreamScheduler", "redis", "cluster",
                "scheduler=stream&cluster=on", skip=_CLUSTER,
                about="the stream scheduler on a local 3-node Redis Cluster"),
        Backend("redis-set-cluster", "RedisSetScheduler", "redis", "cluster",
                "scheduler=set&cluster=on", skip=_CLUSTER,
                about="the set scheduler on a local 3-node Redis Cluster"),
        Backend("saq", "saq", "redis", "redis7", rival="saq", variants=("default", "tuned"),
                skip=_OURS_ONLY, about="saq: Redis lists, BLMOVE"),
        Backend("arq", "arq", "redis", "redis7", rival="arq", variants=("default", "tuned"),
                skip=_OURS_ONLY, about="arq: a Redis sorted set, polled"),
        Backend("streaq", "streaq", "redis", "redis7", rival="streaq",
                variants=("default", "tuned"), skip=_OURS_ONLY,
                about="streaq: Redis streams and consumer groups"),
        Backend("pgqueuer", "pgqueuer", "postgres", "postgres", rival="pgqueuer",
                variants=("default", "tuned"), skip=_OURS_ONLY,
                about="pgqueuer: Postgres, LISTEN/NOTIFY, batched dequeue"),
        Backend("procrastinate", "procrastinate", "postgres", "postgres",
                rival="procrastinate", variants=("default", "tuned"), skip=_OURS_ONLY,
                about="procrastinate: Postgres, LISTEN/NOTIFY"),
    ]
}



def from_environment(text: str | None) -> list[Backend]:
    """The backends `LAB_BACKENDS` holds (none for None or empty), as `registry.register`
    wrote them; their openers are imported only where a store is opened, in the agents."""
    if not text:
        return []
    try:
        return [Backend(name=str(b["name"]), scheduler=str(b.get("scheduler") or b["opener"]),
                        store=str(b["store"]), server=b.get("server"),
                        options=str(b.get("options", "")), polled=bool(b.get("polled")),
                        skip=frozenset(b.get("skip", ())), about=str(b.get("about", "")),
                        opener=str(b["opener"]), path=str(b.get("path", "")),
                        like=b.get("like")) for b in json.loads(text)]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{ENVIRONMENT} is not a list of registrations: {error}") from None


BACKENDS.update({b.name: b for b in from_environment(os.environ.get(ENVIRONMENT))
                 if b.name not in BACKENDS})


def select(names: Iterable[str] | None) -> list[Backend]:
    """The backends named (all of them for None), in registration order; a `ValueError`
    names any that do not exist. A trailing `*` selects by prefix (`redis*`)."""
    if names is None:
        return list(BACKENDS.values())
    chosen: dict[str, Backend] = {}
    for name in names:
        if name.endswith("*"):
            matched = [b for b in BACKENDS.values() if b.name.startswith(name[:-1])]
        else:
            matched = [BACKENDS[name]] if name in BACKENDS else []
        if not matched:
            raise BadInput(f"no backend {name!r}; choose from {', '.join(BACKENDS)}")
        for backend in matched:
            chosen[backend.name] = backend
    return [b for b in BACKENDS.values() if b.name in chosen]
