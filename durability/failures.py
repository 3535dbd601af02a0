"""Failed attempts: the retry policy, and the records a failure leaves in the checkpoint.

A pass that fails records what failed under its own claim (`FAILURE`), before it lets its
workflow go. So the attempt count is the store's, not a worker's: any worker that claims the
workflow next counts on from the records, and a crash between the failure and its wakeup loses
nothing that was counted.

The one decision a reader might undo: the record is written *before* the wakeup or the verdict
(failed) is, so a store that refuses the record (a fenced pass) decides nothing at all.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from durability.checks import ENGINE, MAX_DURATION, positive
from durability.determinism import Nondeterministic

#: The prefix of a failed attempt's record (`engine:failure:<n>`), and of an explicit retry's
#: (`engine:retry:<n>`, written by `durable.retry`), which starts every count again. Being
#: ordinary records, both appear in `history`, in order with the steps.
FAILURE = f"{ENGINE}failure:"
RETRY = f"{ENGINE}retry:"
#: How much of a traceback a failure record keeps, in characters (its last lines, where the
#: raise is): enough to find the line, bounded so a deep recursion cannot bloat a checkpoint.
TRACEBACK_CHARS = 2000
#: How much of an exception's message a failure record keeps.
MESSAGE_CHARS = 500


@dataclass(frozen=True, slots=True)
class Retry:
    """How often a failing step is tried, and how long apart.

    `attempts` counts every try, the first included (1 is no retry). The pause after attempt
    `n` is `initial * factor ** (n - 1)`, capped at `cap`, then spread by up to `jitter` of
    itself either way (0.1 is +-10%), so workflows that failed together do not come back
    together. Only failures that are instances of one of `on` are retried; any other fails the
    workflow at once.
    """

    attempts: int = 3
    initial: timedelta = timedelta(seconds=1)
    factor: float = 2.0
    cap: timedelta = timedelta(minutes=5)
    jitter: float = 0.1
    on: tuple[type[BaseException], ...] = field(default=(Exception,))

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise TypeError(f"attempts must be an int, not {type(self.attempts).__name__}")
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        positive("initial", self.initial)
        positive("cap", self.cap)
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float):
            raise TypeError(f"factor must be a number, not {type(self.factor).__name__}")
        if not 1.0 <= self.factor <= 100.0:
            raise ValueError(f"factor must be between 1 and 100, got {self.factor}")
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, int | float):
            raise TypeError(f"jitter must be a number, not {type(self.jitter).__name__}")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError(f"jitter must be at least 0 and below 1, got {self.jitter}")
        if not isinstance(self.on, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, BaseException) for kind in self.on
        ):
            raise TypeError("on must be a tuple of exception types")

    def retries(self, error: BaseException) -> bool:
        """Whether `error` is one this policy tries again (every leaf, for a group). Never a
        `Nondeterministic`: the same body meets the same history again, and fails the same."""
        return all(
            isinstance(leaf, self.on) and not isinstance(leaf, Nondeterministic)
            for leaf in leaves(error)
        )

    def pause(self, attempt: int, draw: float | None = None) -> timedelta:
        """How long to wait after failed attempt `attempt` (1-based). `draw` in [0, 1) replaces
        the random draw of the jitter, for a caller that wants it exact."""
        seconds = self.initial.total_seconds() * self.factor ** min(attempt - 1, 200)
        seconds = min(seconds, self.cap.total_seconds())
        spread = (random.random() if draw is None else draw) * 2 - 1
        seconds *= 1 + self.jitter * spread
        return min(max(timedelta(seconds=seconds), timedelta(milliseconds=1)), MAX_DURATION)


#: `work`'s default: a failure fails the workflow at once (pass `retry=Retry()` to retry).
ONCE = Retry(attempts=1)


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def describe(error: BaseException) -> tuple[str, str, str]:
    """(type, message, traceback) of a failure, each bounded; for a group, of its first leaf
    (the message says how many there were)."""
    found = leaves(error)
    first = found[0]
    kind = type(first).__qualname__
    message = str(first)
    if len(found) > 1:
        message = f"{message} (and {len(found) - 1} more failure(s) in the same pass)"
    text = "".join(traceback.format_exception(first))
    return kind, message[:MESSAGE_CHARS], text[-TRACEBACK_CHARS:]


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, as recorded: which step (`None` for code between steps), what was
    raised, which attempt of that step it was, when, and what came of it (`retry_at` set if
    it will be tried again, else the workflow failed)."""

    step: str | None
    type: str
    message: str
    traceback: str
    attempt: int
    at: datetime
    retry_at: datetime | None = None

    def to_record(self) -> dict[str, object]:
        return {
            "step": self.step,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "attempt": self.attempt,
            "at": self.at.isoformat(),
            "retry_at": None if self.retry_at is None else self.retry_at.isoformat(),
        }

    @classmethod
    def from_record(cls, value: object) -> Failure:
        if not isinstance(value, Mapping):
            raise TypeError(f"a failure record is a mapping, found {type(value).__name__}")
        retry_at = value.get("retry_at")
        step = value.get("step")
        return cls(
            step=None if step is None else str(step),
            type=str(value["type"]),
            message=str(value["message"]),
            traceback=str(value.get("traceback", "")),
            attempt=int(str(value["attempt"])),
            at=datetime.fromisoformat(str(value["at"])),
            retry_at=None if retry_at is None else datetime.fromisoformat(str(retry_at)),
        )


def next_key(records: Mapping[str, object], prefix: str) -> str:
    """The next engine key under `prefix`, numbered past every one already recorded."""
    taken = sum(1 for key in records if key.startswith(prefix))
    return f"{prefix}{taken + 1:06d}"


def since_retry(records: Mapping[str, object]) -> list[Failure]:
    """The failures recorded since the last explicit retry, in order."""
    found: list[Failure] = []
    for key, value in records.items():
        if not key.startswith(ENGINE):  # a step's or the inbox's: every pass reads past them
            continue
        if key.startswith(RETRY):
            found.clear()
        elif key.startswith(FAILURE):
            found.append(Failure.from_record(value))
    return found


def attempt(records: Mapping[str, object], step: str | None) -> int:
    """Which attempt of `step` a pass that fails there has made: one more than the failures
    of that step recorded since the last retry."""
    return 1 + sum(1 for failure in since_retry(records) if failure.step == step)


def failed(records: Mapping[str, object]) -> Failure | None:
    """The failure that failed the workflow, if its last failure was final and no retry came
    after it; `None` if the workflow may run."""
    found = since_retry(records)
    if found and found[-1].retry_at is None:
        return found[-1]
    return None
