"""The checkpointer against a model of its contract, one random operation at a time.

`CheckpointModel` is what `durability.interfaces.Checkpointer` promises, written from its
docstrings and the conformance suite, never from a store. `CheckpointMachine` drives a real
store and the model with the same random calls and fails at the first answer the model does
not allow. Where the outcome turns on the store's clock (has this claim lapsed yet?) the model
knows it only to within the brackets of `timeline` and accepts either answer in that grey
window; it is strict everywhere else.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from durability.checks import INBOX, INBOX_WIDTH, inbox_key
from durability.interfaces import Checkpointer
from durability.signals import Fenced
from durability.testing.conformance.records import EffectKit
from durability.testing.conformance.timeline import Span, Timeline, passed
from durability.values import Entry, Pass, Recorded, Written

__all__ = ["KEYS", "VALUES", "CheckpointMachine", "CheckpointModel", "pick", "same"]

T = TypeVar("T")
Run = Callable[[Awaitable[Any]], Any]

#: Few enough keys that writes collide, and a brace, a colon and non-ASCII among them.
KEYS = ["a", "b", "step:1", "{brace}", "ünï"]
#: Values every codec round-trips, each of a type the others are not equal to by accident.
VALUES: list[object] = [
    0,
    1,
    -7,
    2.5,
    10**18,
    "",
    "text",
    "漢字 🎉",
    True,
    False,
    None,
    [1, "two", None],
    {"k": [1, {"n": False}]},
    {},
]
#: How far a claim's `budget_ends` may sit from the deadline the model computed: it is the
#: claimer's estimate, used only to skip needless extends.
ESTIMATE = timedelta(seconds=1)


def pick(data: st.DataObject, items: Sequence[T], label: str) -> T | None:
    """One of `items` (None if there are none), drawn the same way however many there are.

    The items are what the store answered, which on a real clock may differ when hypothesis
    runs an example again; a draw whose bounds followed them would make it give up on the
    example as "flaky". So the draw is a fixed range, folded onto the items.
    """
    index = data.draw(st.integers(0, 15), label=f"{label} index")
    if not items:
        return None
    item = items[index % len(items)]
    note(f"{label}: {item!r}")
    return item


def same(a: object, b: object) -> bool:
    """Equal and of the same types all the way down (so `True` is not `1`, nor `1.0` `1`)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass(slots=True)
class _Claim:
    token: int
    #: When the claim stops being live for want of a sign of life, and when its budget ends.
    until: Span
    deadline: Span
    #: Released, discarded, superseded, or seen to have lapsed: certainly not live.
    over: bool = False

    def lapse(self) -> Span:
        return self.until.earlier(self.deadline)

    def sign_of_life(self, at: Span, alive: timedelta) -> None:
        self.until = self.until.later((at + alive).earlier(self.deadline))


@dataclass(slots=True)
class _Workflow:
    records: dict[str, object] = field(default_factory=dict)
    #: When each record was written, for `history`.
    written: dict[str, Span] = field(default_factory=dict)
    claim: _Claim | None = None
    #: The highest token ever handed out: every later claim must beat it.
    highest: int = 0
    #: The sequence number the next inbox entry gets; unknown (None) after a discard, which
    #: may or may not start the count again.
    inbox: int | None = 1
    #: What the effect kit's counter for this workflow holds.
    counter: int = 0


class CheckpointModel:
    """The contract of a `Checkpointer`, as plain Python over dicts: records first-writer-wins
    in first-recorded order, one claim at a time with tokens that only rise, a claim that lives
    `alive` past each sign of life and never past its budget (`extend` excepted), and a fence
    that `release`, `discard` and a newer claim all raise.

    Each `expect_*` says what the store may answer to an operation bracketed by `at`: True or
    False where the contract decides, None where it turns on a clock inside the grey window.
    The other methods apply an outcome the store gave (and the model allowed).
    """

    def __init__(self, slack: timedelta) -> None:
        self.slack = slack
        self.workflows: dict[str, _Workflow] = {}

    def of(self, workflow: str) -> _Workflow:
        return self.workflows.setdefault(workflow, _Workflow())

    def live(self, workflow: str, at: Span, token: int | None = None) -> bool | None:
        """Whether the claim (the one with `token`, if given) was live when `at` ran."""
        claim = self.of(workflow).claim
        if claim is None or claim.over or (token is not None and claim.token != token):
            return False
        lapsed = passed(claim.lapse(), at, self.slack)
        return None if lapsed is None else not lapsed

    def claimed_any(self) -> bool:
        return any(w.claim is not None and not w.claim.over for w in self.workflows.values())

    def expect_claim(self, workflow: str, at: Span) -> bool | None:
        """True if a claim must be granted, False if it must be turned away."""
        live = self.live(workflow, at)
        return None if live is None else not live

    def claimed(
        self, workflow: str, at: Span, token: int, budget: timedelta, alive: timedelta
    ) -> None:
        state = self.of(workflow)
        if state.claim is not None:
            state.claim.over = True
        deadline = at + budget
        state.claim = _Claim(token, (at + alive).earlier(deadline), deadline)
        state.highest = token

    def turned_away(self, workflow: str) -> None:
        """A claim in the grey window was refused: the old claim was still live. Nothing to
        learn that the next look would not: it stays as it was."""

    def fenced(self, workflow: str, token: int) -> None:
        """The store said this claim is not live: it never will be again."""
        claim = self.of(workflow).claim
        if claim is not None and claim.token == token:
            claim.over = True

    def write(self, workflow: str, key: str, value: object, at: Span) -> Recorded:
        """First writer wins: what a write of `key` returns, having applied it."""
        state = self.of(workflow)
        if key in state.records:
            return Recorded(state.records[key], False)
        state.records[key] = value
        state.written[key] = at
        return Recorded(value, True)

    def extend(self, workflow: str, at: Span, budget: timedelta, alive: timedelta) -> Span:
        claim = self.of(workflow).claim
        assert claim is not None
        claim.deadline = claim.deadline.later(at + budget)
        claim.until = claim.until.later((at + alive).earlier(claim.deadline))
        return claim.deadline

    def renew(self, workflow: str, at: Span, alive: timedelta) -> None:
        claim = self.of(workflow).claim
        assert claim is not None
        claim.sign_of_life(at, alive)

    def release(self, holder: Pass) -> None:
        claim = self.of(holder.workflow).claim
        if claim is not None and claim.token == holder.token:
            claim.over = True

    def discard(self, workflow: str) -> int:
        state = self.of(workflow)
        gone = len(state.records)
        state.records.clear()
        state.written.clear()
        state.inbox = None
        if state.claim is not None:
            state.claim.over = True
        return gone


class CheckpointMachine(RuleBasedStateMachine):
    """Random operations on a real `Checkpointer` and on `CheckpointModel`, compared.

    `run` runs a coroutine on the loop the store lives on; `effects` is the store's effect kit
    (`transact` is left out without one). Each example uses workflow ids of its own, so the
    store may be shared by every example and by other tests.
    """

    def __init__(
        self,
        checkpointer: Checkpointer,
        time: Timeline,
        run: Run,
        effects: EffectKit | None = None,
    ) -> None:
        super().__init__()
        self.store = checkpointer
        self.time = time
        self.run = run
        self.effects = effects
        self.model = CheckpointModel(time.slack)
        prefix = f"model-{uuid.uuid4().hex[:12]}"
        self.ids = [f"{prefix}-{n}" for n in range(2)]
        #: Every pass handed out (and every extended copy), live or not: stale ones are the
        #: interesting ones to write with.
        self.passes: list[Pass] = []
        self.durations = (time.short, timedelta(minutes=10))

    # --- plumbing -------------------------------------------------------------------------

    def _call(self, coroutine: Awaitable[T]) -> tuple[T | Fenced, Span]:
        lo = self.time.now()
        try:
            outcome: T | Fenced = self.run(coroutine)
        except Fenced as fenced:
            outcome = fenced
        return outcome, Span(lo, self.time.now())

    def _written(self, holder: Pass, outcome: object, at: Span, what: str) -> bool:
        """Check a write under `holder` against the model; True if it went through."""
        expected = self.model.live(holder.workflow, at, holder.token)
        if isinstance(outcome, Fenced):
            assert expected is not True, f"{what}: Fenced under a live claim ({holder.token})"
            assert outcome.workflow == holder.workflow and outcome.token == holder.token, (
                f"{what}: Fenced names {outcome.workflow!r}/{outcome.token}"
            )
            self.model.fenced(holder.workflow, holder.token)
            return False
        assert expected is not False, f"{what}: accepted without a live claim ({holder.token})"
        return True

    def _recorded(self, outcome: object, expected: Recorded, what: str) -> None:
        assert isinstance(outcome, Recorded), f"{what}: returned {outcome!r}"
        assert outcome.first == expected.first and same(outcome.value, expected.value), (
            f"{what}: returned {outcome!r}, the model says {expected!r}"
        )

    # --- rules ----------------------------------------------------------------------------

    @initialize(data=st.data())
    def first_claim(self, data: st.DataObject) -> None:
        """Every example starts with a pass in hand, so the writes under it get their turn."""
        self.claim(data)

    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        workflow = data.draw(st.sampled_from(self.ids), label="workflow")
        wanted = data.draw(st.sampled_from(self.durations), label="budget")
        lasting = data.draw(st.sampled_from(self.durations), label="alive")
        outcome, at = self._call(self.store.claim(workflow, wanted, lasting))
        expected = self.model.expect_claim(workflow, at)
        if outcome is None:
            assert expected is not True, f"claim of {workflow} refused with no live claim on it"
            self.model.turned_away(workflow)
            return
        assert isinstance(outcome, Pass), f"claim returned {outcome!r}"
        assert expected is not False, f"claim of {workflow} granted over a live claim"
        state = self.model.of(workflow)
        assert outcome.workflow == workflow and outcome.alive == lasting
        assert outcome.token > state.highest, (
            f"token {outcome.token} does not rise above {state.highest}"
        )
        assert outcome.token >= _ms(at.lo) - 1 - self.time.slack // timedelta(milliseconds=1), (
            f"token {outcome.token} is below the clock ({_ms(at.lo)} ms)"
        )
        ends = outcome.budget_ends
        assert ends.utcoffset() is not None, "budget_ends must be timezone-aware"
        assert at.lo + wanted - ESTIMATE <= ends <= at.hi + wanted + ESTIMATE, (
            f"budget_ends {ends} is far from {at.lo + wanted}"
        )
        if outcome.records is not None:
            assert list(outcome.records) == list(state.records) and all(
                same(outcome.records[k], v) for k, v in state.records.items()
            ), f"the claim found {dict(outcome.records)!r}, the model holds {state.records!r}"
        self.model.claimed(workflow, at, outcome.token, wanted, lasting)
        self.passes.append(outcome)

    @rule(data=st.data())
    def record(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(KEYS), label="key")
        value = data.draw(st.sampled_from(VALUES), label="value")
        holder = pick(data, self.passes, "pass")
        if holder is None:
            return
        outcome, at = self._call(self.store.record(holder, key, value))
        if self._written(holder, outcome, at, f"record {key!r}"):
            expected = self.model.write(holder.workflow, key, value, at)
            self._recorded(outcome, expected, f"record {key!r}")
            self.model.renew(holder.workflow, at, holder.alive)

    @precondition(lambda self: self.effects is not None)
    @rule(data=st.data())
    def transact(self, data: st.DataObject) -> None:
        assert self.effects is not None
        key = data.draw(st.sampled_from(KEYS), label="key")
        amount = data.draw(st.sampled_from([1, 5]), label="amount")
        holder = pick(data, self.passes, "pass")
        if holder is None:
            return
        workflow = holder.workflow
        effect = self.effects.effect(workflow, amount)
        outcome, at = self._call(self.store.transact(holder, key, effect))
        state = self.model.of(workflow)
        if self._written(holder, outcome, at, f"transact {key!r}"):
            if key not in state.records:
                state.counter += amount
            expected = self.model.write(workflow, key, state.counter, at)
            self._recorded(outcome, expected, f"transact {key!r}")
            self.model.renew(workflow, at, holder.alive)
        counter = self.run(self.effects.counter(workflow))
        assert counter == state.counter, (
            f"the effect ran to {counter}, the model says {state.counter} (once per key, never"
            " when fenced)"
        )

    @rule(data=st.data())
    def supply(self, data: st.DataObject) -> None:
        workflow = data.draw(st.sampled_from(self.ids), label="workflow")
        key = data.draw(st.sampled_from(KEYS), label="key")
        value = data.draw(st.sampled_from(VALUES), label="value")
        outcome, at = self._call(self.store.supply(workflow, key, value))
        self._recorded(outcome, self.model.write(workflow, key, value, at), f"supply {key!r}")

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        workflow = data.draw(st.sampled_from(self.ids), label="workflow")
        value = data.draw(st.sampled_from(VALUES), label="value")
        outcome, at = self._call(self.store.append(workflow, value))
        assert isinstance(outcome, Entry), f"append returned {outcome!r}"
        state = self.model.of(workflow)
        if state.inbox is not None:
            assert outcome.key == inbox_key(state.inbox), (
                f"entry {state.inbox} of {workflow} got key {outcome.key!r}"
            )
        else:  # after a discard the count may start again: any well-formed fresh key
            number = outcome.key.removeprefix(INBOX)
            assert outcome.key.startswith(INBOX) and len(number) == INBOX_WIDTH, outcome.key
            assert number.isdigit() and int(number) >= 1, outcome.key
            state.inbox = int(number)
        assert outcome.key not in state.records, f"append reused the key {outcome.key!r}"
        assert same(outcome.value, value), f"append returned {outcome.value!r} for {value!r}"
        assert self.model.write(workflow, outcome.key, value, at).first
        state.inbox += 1

    @rule(data=st.data())
    def discard(self, data: st.DataObject) -> None:
        workflow = data.draw(st.sampled_from(self.ids), label="workflow")
        outcome, _ = self._call(self.store.discard(workflow))
        expected = self.model.discard(workflow)
        assert outcome == expected, f"discard said {outcome!r} records went, the model {expected}"

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        holder = pick(data, self.passes, "pass")
        if holder is None:
            return
        outcome, _ = self._call(self.store.release(holder))
        assert outcome is None, f"release answered {outcome!r}"
        self.model.release(holder)

    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        lasting = data.draw(st.sampled_from(self.durations), label="alive")
        holder = pick(data, self.passes, "pass")
        if holder is None:
            return
        outcome, at = self._call(self.store.renew(holder, lasting))
        if self._written(holder, outcome, at, "renew"):
            assert outcome is None, f"renew answered {outcome!r}"
            self.model.renew(holder.workflow, at, lasting)

    @rule(data=st.data())
    def extend(self, data: st.DataObject) -> None:
        wanted = data.draw(st.sampled_from(self.durations), label="budget")
        lasting = data.draw(st.sampled_from(self.durations), label="alive")
        holder = pick(data, self.passes, "pass")
        if holder is None:
            return
        outcome, at = self._call(self.store.extend(holder, wanted, lasting))
        if self._written(holder, outcome, at, "extend"):
            assert isinstance(outcome, Pass), f"extend returned {outcome!r}"
            assert (outcome.workflow, outcome.token) == (holder.workflow, holder.token)
            deadline = self.model.extend(holder.workflow, at, wanted, lasting)
            ends = outcome.budget_ends
            assert deadline.lo - ESTIMATE <= ends <= deadline.hi + ESTIMATE, (
                f"extend's budget_ends {ends} is far from {deadline.lo}"
            )
            self.passes.append(outcome)

    @rule(data=st.data())
    def load(self, data: st.DataObject) -> None:
        workflow = data.draw(st.sampled_from(self.ids), label="workflow")
        loaded, _ = self._call(self.store.load(workflow))
        expected = self.model.of(workflow).records
        assert isinstance(loaded, dict)
        assert list(loaded) == list(expected), (
            f"load gave keys {list(loaded)}, first recorded were {list(expected)}"
        )
        for key, value in expected.items():
            assert same(loaded[key], value), f"load gave {key!r} = {loaded[key]!r}, not {value!r}"

    @rule(data=st.data())
    def history(self, data: st.DataObject) -> None:
        workflow = data.draw(st.sampled_from(self.ids), label="workflow")
        written, _ = self._call(self.store.history(workflow))
        state = self.model.of(workflow)
        assert isinstance(written, list)
        assert [each.key for each in written] == list(state.records), (
            f"history gave keys {[each.key for each in written]}, not {list(state.records)}"
        )
        moments: list[datetime] = []
        for each in written:
            assert isinstance(each, Written)
            assert same(each.value, state.records[each.key]), f"history gave {each!r}"
            assert each.at.utcoffset() == timedelta(0), "write times must be aware and in UTC"
            window = state.written[each.key]
            slack = self.time.slack
            assert window.lo - slack <= each.at <= window.hi + slack, (
                f"{each.key!r} was written between {window.lo} and {window.hi}, history says"
                f" {each.at}"
            )
            moments.append(each.at)
        assert moments == sorted(moments), "history's times must not go back"

    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        """Let time pass, when there is a claim for it to run out."""
        by = data.draw(st.sampled_from(self.time.steps), label="by")
        if self.model.claimed_any():
            self.run(self.time.advance(by))

    def teardown(self) -> None:
        for workflow in self.ids:
            self.run(self.store.discard(workflow))
