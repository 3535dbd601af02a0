"""The bounds every store enforces alike: which ids, keys, values and durations it refuses.

The inputs here are what the other contracts use to check that a refusal writes nothing, and
`BoundsContract` checks the other half: that it comes before any I/O. Its `offline` fixture is
the store's `Durable` with no server behind it (a client to a port nothing listens on, a pool
never opened, a database whose connections are closed), so anything that reached the store
would fail with the driver's own error; every refusal must be the `ValueError` or `TypeError`
(or `Unencodable`) of the library's own checks instead, naming the input.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durability.checks import INBOX, MAX_DURATION, MAX_NAME, check_key, check_workflow, inbox_key
from durability.codec import MAX_DEPTH, MAX_DIGITS, Unencodable
from durability.interfaces import Durable
from durability.values import Delivery, Pass

__all__ = [
    "ABSURD",
    "ABSURD_CASES",
    "BAD_IDS",
    "BAD_ID_CASES",
    "BAD_KEYS",
    "BAD_KEY_CASES",
    "BoundsContract",
    "PROPERTY",
    "names",
    "nested",
    "refusal",
]


def nested(depth: int) -> list[object]:
    """A list `depth` lists deep: `nested(2) == [["bottom"]]`."""
    value: list[object] = ["bottom"]
    for _ in range(depth - 1):
        value = [value]
    return value


def _contains_itself() -> list[object]:
    loop: list[object] = []
    loop.append(loop)
    return loop


#: Not UTF-8 on disk, so `os.fsdecode` keeps the byte as a lone surrogate.
FILE_NAME = os.fsdecode(b"caf\xe9.txt")

#: A refused input, the error it gets, and a name for the test id.
Case = tuple[Any, type[Exception], str]

#: Workflow ids every store refuses, with the error each gets.
BAD_ID_CASES: list[Case] = [
    ("", ValueError, "empty"),
    ("a\x00b", ValueError, "nul"),
    ("x" * (MAX_NAME + 1), ValueError, "one-too-long"),
    ("x" * 1_000_000, ValueError, "a-million"),
    ("a{b", ValueError, "open-brace"),
    ("a}b", ValueError, "close-brace"),
    ("bad \ud800", ValueError, "lone-surrogate"),
    (FILE_NAME, ValueError, "fsdecoded"),
    (7, TypeError, "int"),
    (None, TypeError, "none"),
    (b"bytes", TypeError, "bytes"),
]

#: Step keys every store refuses (braces are fine in a key: it is never part of a key name).
BAD_KEY_CASES: list[Case] = [
    ("", ValueError, "empty"),
    ("a\x00b", ValueError, "nul"),
    ("x" * (MAX_NAME + 1), ValueError, "one-too-long"),
    ("x" * 1_000_000, ValueError, "a-million"),
    ("bad \ud800", ValueError, "lone-surrogate"),
    (FILE_NAME, ValueError, "fsdecoded"),
    (INBOX, ValueError, "inbox"),
    (f"{INBOX}x", ValueError, "inbox-x"),
    (inbox_key(1), ValueError, "inbox-key"),
    (7, TypeError, "int"),
]

#: Durations every store refuses before writing with them.
ABSURD_CASES: list[Case] = [
    (MAX_DURATION + timedelta(microseconds=1), ValueError, "just-past-the-bound"),
    (timedelta(days=10**6), ValueError, "a-million-days"),
    (timedelta.max, ValueError, "timedelta-max"),
    (timedelta(0), ValueError, "zero"),
    (timedelta(microseconds=-1), ValueError, "negative"),
    (30, TypeError, "an-int"),
]


def _params(cases: list[Case]) -> list[Any]:
    return [pytest.param(value, error, id=name) for value, error, name in cases]


#: The same, as `pytest.mark.parametrize` arguments (value, error).
BAD_IDS = _params(BAD_ID_CASES)
BAD_KEYS = _params(BAD_KEY_CASES)
ABSURD = _params(ABSURD_CASES)

#: Values the default codec refuses, each for a different reason, beyond the type refusals
#: the records contract lists.
UNSTORABLE = [
    pytest.param("bad \ud800", id="lone-surrogate"),
    pytest.param({"file": FILE_NAME}, id="fsdecoded-in-a-dict"),
    pytest.param({"bad \udcff": 1}, id="surrogate-in-a-key"),
    pytest.param(nested(MAX_DEPTH + 1), id="one-too-deep"),
    pytest.param(nested(5000), id="5000-deep"),
    pytest.param(_contains_itself(), id="contains-itself"),
    pytest.param(10**MAX_DIGITS, id="one-digit-too-many"),
    pytest.param(-(10**5000), id="5000-digits"),
]

#: Values at the codec's bounds, which every store must bring back exactly.
AT_THE_BOUNDS: list[object] = [
    10**MAX_DIGITS - 1,
    -(10**MAX_DIGITS - 1),
    nested(MAX_DEPTH),
    {"key " + "漢" * MAX_NAME: "any length of key inside a value"},
    "\x00 NUL is fine inside a value",
]

#: A hypothesis profile for properties that talk to a store: bounded, and no deadline (a
#: store's round trip on a loaded machine is not the property under test). The store is a
#: fixture shared by a property's examples (each works on ids of its own), and one contract
#: method runs from each store's subclass: hence the health checks it turns off.
PROPERTY = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.differing_executors,
        HealthCheck.too_slow,
    ],
)

_TRICKY = ["a", "Z", "0", "é", "漢", "🎉", "{", "}", "\x00", "\ud800", "\udcff", ":", " ", "\n"]


def names(room: int) -> st.SearchStrategy[str]:
    """Text an id or key might be: any code point (surrogates and NUL included), a mix of the
    characters stores tend to trip on, the inbox prefix, and lengths on either side of `room`
    (the characters left under `MAX_NAME` once a caller's prefix is counted)."""
    return st.one_of(
        # Joined from characters: `st.text` over a union of alphabets leaves surrogates out.
        st.lists(st.characters() | st.characters(categories=["Cs"]), max_size=12).map("".join),
        st.lists(st.sampled_from(_TRICKY), max_size=12).map("".join),
        st.text(max_size=6).map(lambda tail: INBOX + tail),
        st.builds(
            lambda n, fill: fill * n,
            st.integers(max(room - 2, 1), room + 2),
            st.sampled_from(["x", "é", "🎉"]),
        ),
    )


def refusal(check: Callable[[str], str], name: str) -> type[Exception] | None:
    """The error `check` (`check_workflow` or `check_key`) raises for `name`, or None."""
    try:
        check(name)
    except (ValueError, TypeError) as error:
        return type(error)
    return None


_OK = "bounds-ok"
_LONG = timedelta(seconds=30)
_SHORT = timedelta(milliseconds=50)


def _holder(workflow: str = _OK) -> Pass:
    """A pass as a claim would have made it, for calls that must be refused before a store
    could tell it was never handed out."""
    return Pass(workflow, 1, _LONG, datetime.now(UTC) + _LONG)


class BoundsContract:
    """Every refusal comes before I/O. Subclass and override `offline` (see the module doc)."""

    @pytest.fixture
    def offline(self) -> Durable:
        raise NotImplementedError(
            f"{type(self).__name__} must override the `offline` fixture: the store's Durable"
            " with no server behind it, so any I/O would fail with the driver's own error"
        )

    async def test_the_offline_store_fails_what_it_does_not_refuse(self, offline: Durable) -> None:
        # The premise of every test here: a call that passed the checks reaches the store and
        # fails there, with the driver's error rather than a ValueError or TypeError. (The
        # memory store does no I/O, and simply answers.)
        for call in (offline.checkpointer.load(_OK), offline.scheduler.make_ready(_OK)):
            try:
                await call
            except (ValueError, TypeError) as error:
                pytest.fail(f"an offline store must fail with its driver's error: {error!r}")
            except Exception:
                pass

    @pytest.mark.parametrize(("workflow", "error"), BAD_IDS)
    async def test_a_bad_id_is_refused_before_any_io(
        self, offline: Durable, workflow: str, error: type[Exception]
    ) -> None:
        checkpointer, scheduler = offline.checkpointer, offline.scheduler
        calls = [
            checkpointer.claim(workflow, _LONG, _LONG),
            checkpointer.load(workflow),
            checkpointer.history(workflow),
            checkpointer.supply(workflow, "k", 1),
            checkpointer.append(workflow, 1),
            checkpointer.discard(workflow),
            scheduler.make_ready(workflow),
            scheduler.cancel(workflow),
            offline.arrive(workflow, "k", 1),
            offline.deliver(workflow, 1),
            offline.delete(workflow),
        ]
        for call in calls:
            with pytest.raises(error, match="workflow id"):
                await call

    @pytest.mark.parametrize(("key", "error"), BAD_KEYS)
    async def test_a_bad_key_is_refused_before_any_io(
        self, offline: Durable, key: str, error: type[Exception]
    ) -> None:
        checkpointer = offline.checkpointer
        calls = [
            checkpointer.record(_holder(), key, 1),
            checkpointer.supply(_OK, key, 1),
            offline.arrive(_OK, key, 1),
        ]
        for call in calls:
            with pytest.raises(error, match="step key"):
                await call

    @pytest.mark.parametrize("value", UNSTORABLE)
    async def test_a_value_the_codec_refuses_is_refused_before_any_io(
        self, offline: Durable, value: object
    ) -> None:
        checkpointer = offline.checkpointer
        calls = [
            checkpointer.record(_holder(), "k", value),
            checkpointer.supply(_OK, "k", value),
            checkpointer.append(_OK, value),
            offline.arrive(_OK, "k", value),
            offline.deliver(_OK, value),
        ]
        for call in calls:
            with pytest.raises(Unencodable):
                await call

    @pytest.mark.parametrize(("duration", "error"), ABSURD)
    async def test_an_absurd_duration_is_refused_before_any_io(
        self, offline: Durable, duration: timedelta, error: type[Exception]
    ) -> None:
        checkpointer, scheduler = offline.checkpointer, offline.scheduler
        holder, delivery = _holder(), Delivery(_OK, "1")
        calls = [
            ("budget", checkpointer.claim(_OK, duration, _LONG)),
            ("alive", checkpointer.claim(_OK, _LONG, duration)),
            ("budget", checkpointer.extend(holder, duration, _LONG)),
            ("alive", checkpointer.extend(holder, _LONG, duration)),
            ("alive", checkpointer.renew(holder, duration)),
            ("within", offline.take(duration, _LONG, _LONG)),
            ("budget", offline.take(_SHORT, duration, _LONG)),
            ("alive", offline.take(_SHORT, _LONG, duration)),
            ("within", scheduler.next_ready(duration)),
            ("idle", scheduler.reclaiming(duration)),
            ("within", scheduler.extend(delivery, duration)),
        ]
        for name, call in calls:
            with pytest.raises(error, match=name):
                await call

    @PROPERTY
    @given(workflow=names(MAX_NAME), key=names(MAX_NAME))
    async def test_whatever_the_checks_refuse_the_store_refuses_before_any_io(
        self, offline: Durable, workflow: str, key: str
    ) -> None:
        bad_id, bad_key = refusal(check_workflow, workflow), refusal(check_key, key)
        checkpointer = offline.checkpointer
        if bad_id is not None:
            for call in (
                checkpointer.claim(workflow, _LONG, _LONG),
                checkpointer.load(workflow),
                checkpointer.supply(workflow, "k", 1),
                offline.scheduler.make_ready(workflow),
                offline.deliver(workflow, 1),
            ):
                with pytest.raises(bad_id):
                    await call
        if bad_key is not None:
            for call in (checkpointer.record(_holder(), key, 1), offline.arrive(_OK, key, 1)):
                with pytest.raises(bad_key):
                    await call
