"""Both interfaces over dicts: the reference every store is measured against, and the
in-process baseline of the lab. `MemoryCheckpointer` is here; `MemoryScheduler` lives in
`durability.memory_scheduler` (importable from here too).

Every method does all its work between two awaits, so on one event loop each is atomic the way
a Lua script or a transaction is on a server. The clock is injected, so a test of a three-day
sleep does not wait three days.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from durability.checks import (
    check_key,
    check_page,
    check_recorded_key,
    check_state,
    check_workflow,
    inbox_key,
    positive,
)
from durability.clock import Clock, utcnow
from durability.codec import Codec, JsonCodec, decode_checkpoint
from durability.endings import ENDING
from durability.memory_scheduler import MemoryScheduler
from durability.signals import Fenced
from durability.storekit.sorted_ids import SortedIds
from durability.storekit.traffic import Traffic, counted
from durability.values import Effect, Entry, Look, Pass, Recorded, Standing, Written

__all__ = ["MemoryCheckpointer", "MemoryEffect", "MemoryScheduler"]

NEVER = datetime.min.replace(tzinfo=UTC)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class MemoryEffect(Effect):
    """A synchronous function the memory store runs atomically with recording its result."""

    __slots__ = ("apply",)

    def __init__(self, apply: Callable[[], object]) -> None:
        self.apply = apply


@dataclass(slots=True)
class _Claim:
    token: int = 0
    until: datetime = NEVER
    deadline: datetime = NEVER


@dataclass(slots=True)
class _Workflow:
    name: str
    records: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    claim: _Claim = field(default_factory=_Claim)
    appended: int = 0
    standing: Standing | None = None
    copied: tuple[str, object] | None = None  #: an ending not yet made text (`_texts`)


class MemoryCheckpointer:
    """A `Checkpointer` over a dict, with the same fencing arithmetic as every server store."""

    def __init__(
        self, *, clock: Clock = utcnow, codec: Codec | None = None, traffic: Traffic | None = None
    ) -> None:
        self._clock = clock
        #: Every call, counted (`durability.storekit.traffic`).
        self.traffic = traffic if traffic is not None else Traffic()
        self._codec: Codec = codec or JsonCodec()
        self._workflows: dict[str, _Workflow] = {}
        #: The ids with a standing in each state, in order: a listing is a bisection and a
        #: slice (of each state's, merged, for all of them), not a sort of every workflow.
        self._listed: dict[str, SortedIds] = {}
        #: Who waits for each workflow's ending (`watch`), rung as an ending is written.
        self._bells: dict[str, set[asyncio.Event]] = {}

    def _get(self, workflow: str) -> _Workflow:
        check_workflow(workflow)
        state = self._workflows.get(workflow)
        if state is None:
            state = self._workflows[workflow] = _Workflow(workflow)
        return state

    def _live(self, holder: Pass, now: datetime) -> _Workflow:
        state = self._get(holder.workflow)
        claim = state.claim
        if claim.token != holder.token:
            raise Fenced(holder.workflow, holder.token, "a newer claim exists")
        if now >= claim.until or now >= claim.deadline:
            raise Fenced(holder.workflow, holder.token, "the claim lapsed")
        return state

    def _texts(self, state: _Workflow) -> dict[str, tuple[str, datetime]]:
        """`state`'s records, an ending kept as a copy encoded now: at its first read."""
        if state.copied is not None:
            (key, value), state.copied = state.copied, None
            state.records[key] = (self._codec.encode(value), state.records[key][1])
        return state.records

    def _write(self, state: _Workflow, key: str, encoded: str, now: datetime) -> Recorded:
        # `_texts` asked only when an ending waits to be made text: every write of a pass.
        held = (state.records if state.copied is None else self._texts(state)).get(key)
        if held is not None:
            return Recorded(self._codec.decode(held[0]), False)
        state.records[key] = (encoded, now)
        if key.startswith(ENDING):
            for bell in self._bells.get(state.name, ()):
                bell.set()
        return Recorded(self._codec.decode(encoded), True)

    @counted
    async def claim(self, workflow: str, budget: timedelta, alive: timedelta) -> Pass | None:
        positive("budget", budget)
        positive("alive", alive)
        now = self._clock()
        state = self._get(workflow)
        claim = state.claim
        if now < claim.until and now < claim.deadline:
            return None
        claim.token = max(_ms(now), claim.token + 1)
        claim.deadline = now + budget
        claim.until = min(now + alive, claim.deadline)
        texts = state.records if state.copied is None else self._texts(state)
        pairs = ((key, text) for key, (text, _) in texts.items())
        records, ordinals = decode_checkpoint(self._codec, pairs)
        return Pass(workflow, claim.token, alive, claim.deadline, records, ordinals)

    @counted
    async def load(self, workflow: str) -> dict[str, object]:
        state = self._workflows.get(check_workflow(workflow))
        if state is None:
            return {}
        return {key: self._codec.decode(text) for key, (text, _) in self._texts(state).items()}

    @counted
    async def history(self, workflow: str) -> list[Written]:
        state = self._workflows.get(check_workflow(workflow))
        if state is None:
            return []
        return [
            Written(key, self._codec.decode(text), at)
            for key, (text, at) in self._texts(state).items()
        ]

    @counted
    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_recorded_key(key)
        encoded = self._codec.encode(value)
        now = self._clock()
        state = self._live(holder, now)
        state.claim.until = max(state.claim.until, min(now + holder.alive, state.claim.deadline))
        return self._write(state, key, encoded, now)

    @counted
    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        check_key(key)
        if not isinstance(effect, MemoryEffect):
            raise TypeError(f"the memory store performs MemoryEffect, not {type(effect).__name__}")
        now = self._clock()
        state = self._live(holder, now)
        # A transact under a live claim is a sign of life whether or not its key was recorded
        # before, as on every store: renewed first, so the early answer renews too.
        state.claim.until = max(state.claim.until, min(now + holder.alive, state.claim.deadline))
        held = self._texts(state).get(key)
        if held is not None:
            return Recorded(self._codec.decode(held[0]), False)
        # The result exists only once the effect ran, so a result the codec refuses is an error
        # after the effect: a MemoryEffect must return a value its codec can hold.
        result = effect.apply()
        encoded = self._codec.encode(result)
        return self._write(state, key, encoded, now)

    @counted
    async def supply(self, workflow: str, key: str, value: object) -> Recorded:
        check_key(key)
        encoded = self._codec.encode(value)
        return self._write(self._get(workflow), key, encoded, self._clock())

    @counted
    async def append(self, workflow: str, value: object) -> Entry:
        encoded = self._codec.encode(value)
        state = self._get(workflow)
        state.appended += 1
        key = inbox_key(state.appended)
        self._write(state, key, encoded, self._clock())
        return Entry(key, self._codec.decode(encoded))

    @counted
    async def extend(self, holder: Pass, budget: timedelta, alive: timedelta) -> Pass:
        positive("budget", budget)
        positive("alive", alive)
        now = self._clock()
        claim = self._live(holder, now).claim
        claim.deadline = max(claim.deadline, now + budget)
        claim.until = max(claim.until, min(now + alive, claim.deadline))
        return Pass(holder.workflow, holder.token, holder.alive, claim.deadline)

    @counted
    async def renew(self, holder: Pass, alive: timedelta) -> None:
        positive("alive", alive)
        now = self._clock()
        claim = self._live(holder, now).claim
        claim.until = max(claim.until, min(now + alive, claim.deadline))

    @counted
    async def discard(self, workflow: str) -> int:
        state = self._get(workflow)
        gone = len(state.records)
        state.records.clear()
        state.copied = None
        if state.standing is not None:
            _index(self._listed, workflow, state.standing.state, None)
        state.standing = None
        # Raise the fence: a pass still running is refused at its next write, and the next
        # claim is stamped above anything handed out before.
        state.claim.token = max(_ms(self._clock()), state.claim.token + 1)
        state.claim.until = state.claim.deadline = NEVER
        return gone

    @counted
    async def conclude(self, workflow: str, key: str, value: object) -> Recorded:
        check_recorded_key(key)
        encoded = self._codec.encode(value)
        state = self._get(workflow)
        written = self._write(state, key, encoded, self._clock())
        if written.first:  # the fence, as discard raises it, the records kept
            state.claim.token = max(_ms(self._clock()), state.claim.token + 1)
            state.claim.until = state.claim.deadline = NEVER
        return written

    @contextlib.asynccontextmanager
    async def watch(self, workflow: str) -> AsyncIterator[_MemoryBell]:
        """A bell rung when `workflow`'s ending is written (`Watching`)."""
        check_workflow(workflow)
        bell = _MemoryBell()
        bells = self._bells.setdefault(workflow, set())
        bells.add(bell.event)
        try:
            yield bell
        finally:
            bells.discard(bell.event)
            if not bells:
                del self._bells[workflow]

    @counted
    async def release(self, holder: Pass) -> None:
        state = self._get(holder.workflow)
        if state.claim.token == holder.token:
            state.claim.until = NEVER

    # -- the ledger: where each workflow's last pass left it ----------------------------------

    def _stand(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        """Write `holder`'s standing if its claim is still the current one."""
        check_state(state)
        held = _as_json(detail)
        workflow = self._get(holder.workflow)
        if workflow.claim.token != holder.token:
            return False
        _place(self._listed, workflow, state, held, self._clock())
        return True

    @counted
    async def settle(self, holder: Pass, state: str, detail: Mapping[str, object]) -> bool:
        return self._stand(holder, state, detail)

    @counted
    async def settle_release(
        self, holder: Pass, state: str, detail: Mapping[str, object]
    ) -> bool:
        """`settle` then `release` in one call, as a server store does them in one request
        (`SplitDurable.finish_settled`)."""
        if not self._stand(holder, state, detail):
            return False
        self._get(holder.workflow).claim.until = NEVER
        return True

    @counted
    async def end_settle_release(
        self, holder: Pass, key: str, value: object, state: str, detail: Mapping[str, object]
    ) -> bool:
        """The ending `key` recorded, the standing written and the claim released, if the claim
        is still `holder`'s; False, doing nothing, if not (`SplitDurable.finish_ended`)."""
        check_recorded_key(key)
        check_state(state)
        # A pass's last write, seldom read: JsonCodec's checked copy (refused as `encode`
        # refuses) made text only when read (`_texts`); any other codec's text now.
        codec, copied = self._codec, None
        if type(codec) is JsonCodec:
            encoded, copied = "", (key, codec.copy(value))
        else:
            encoded = codec.encode(value)
        # Refused before anything is written; a completed pass's empty detail is not walked.
        held = _as_json(detail) if detail else {}
        workflow = self._get(holder.workflow)
        if workflow.claim.token != holder.token:
            return False
        now = self._clock()
        texts = workflow.records if workflow.copied is None else self._texts(workflow)
        if key not in texts:  # first writer wins; nothing to decode back
            workflow.records[key], workflow.copied = (encoded, now), copied
            if self._bells:  # someone waits on a `result`: most endings have nobody to ring
                for bell in self._bells.get(holder.workflow, ()):
                    bell.set()
        _place(self._listed, workflow, state, held, now)
        workflow.claim.until = NEVER
        return True

    @counted
    async def look(self, workflow: str) -> Look:
        state = self._workflows.get(check_workflow(workflow))
        if state is None:
            return Look(None, False, False)
        now = self._clock()
        claimed = now < state.claim.until and now < state.claim.deadline
        return Look(state.standing, claimed, bool(state.records))

    @counted
    async def standings(
        self, state: str | None, prefix: str | None, limit: int, after: str | None
    ) -> list[Standing]:
        check_state(state)
        check_page(prefix, limit, after)
        low, inclusive = prefix or "", True
        if after is not None and after >= low:
            low, inclusive = after, False
        # A listing of every state merges each state's page: an id stands in one state only.
        if state is None:
            sets = list(self._listed.values())
        else:
            sets = [self._listed[state]] if state in self._listed else []
        found = heapq.merge(*(ids.page(low, inclusive, limit) for ids in sets))
        page: list[Standing] = []
        for workflow in itertools.islice(found, limit):
            if prefix and not workflow.startswith(prefix):
                break
            standing = self._workflows[workflow].standing
            assert standing is not None  # the lists hold only ids with a standing
            page.append(standing)
        return page

    @counted
    async def tally(self, prefix: str | None = None) -> dict[str, int]:
        check_page(prefix, 1, None)
        counts = {state: ids.count(prefix or "") for state, ids in self._listed.items()}
        return {state: count for state, count in counts.items() if count}


def _place(
    listed: dict[str, SortedIds], workflow: _Workflow, state: str, held: dict[str, object],
    now: datetime,
) -> None:
    """Write the standing of `workflow`, whose claim was checked (and `state` too)."""
    was = None if workflow.standing is None else workflow.standing.state
    workflow.standing = Standing(workflow.name, state, held, now)
    if was != state:
        _index(listed, workflow.name, was, state)


def _index(listed: dict[str, SortedIds], workflow: str, was: str | None, state: str | None) -> None:
    """Move `workflow` between the per-state id sets a listing reads (`listed`) as its standing
    goes from `was` to `state` (`None`: no standing)."""
    if was is not None:
        listed[was].discard(workflow)
    if state is not None:
        ids = listed.get(state)
        if ids is None:  # not `setdefault`: that would make a set on every pass's end
            ids = listed[state] = SortedIds()
        ids.add(workflow)


def _as_json(detail: Mapping[str, object]) -> dict[str, object]:
    """`detail` as a server store would hold it: a copy through JSON, or JSON's refusal. The
    worker's usual details (strings, lists of strings) are copied as they are, which JSON would
    give back unchanged; anything else goes through `json` itself."""
    copied: dict[str, object] = {}
    for name, value in detail.items():
        if type(name) is not str:
            break
        if type(value) is str:
            copied[name] = value
        elif type(value) is list and all(type(item) is str for item in value):
            copied[name] = list(value)
        else:
            break
    else:
        return copied
    loaded: dict[str, object] = json.loads(json.dumps(dict(detail)))
    return loaded


class _MemoryBell:
    """One watcher's bell: an event set as the ending is written."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def wait(self, within: timedelta) -> bool:
        try:
            async with asyncio.timeout(within.total_seconds()):
                await self.event.wait()
        except TimeoutError:
            return False
        self.event.clear()
        return True
