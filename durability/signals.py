"""What a store answers a pass with when the answer is not a value.

`Interruption` and its `Fenced` and `Contended` descend from `BaseException`, like
`asyncio.CancelledError`: a pass must stop, but not because its work failed, so no
`except Exception` in a workflow (a saga's rollback net) may absorb them. `NotMigrated` is an
ordinary error: a SQL store used before its tables were made.
"""

from __future__ import annotations

__all__ = ["Cancelled", "Contended", "Fenced", "Interruption", "NotMigrated"]


class Interruption(BaseException):
    """A pass must stop for a reason that is not a failure of its work.

    Descends from `BaseException` so that `except Exception` in a workflow, or a saga's
    rollback net, never absorbs it.
    """


class Fenced(Interruption):
    """The pass no longer holds its claim: a newer claim exists, or the claim lapsed."""

    def __init__(self, workflow: str, token: int, reason: str = "claim superseded or lapsed"):
        super().__init__(f"{workflow!r} (token {token}): {reason}")
        self.workflow = workflow
        self.token = token


class Cancelled(Interruption):
    """The workflow was cancelled (`durable.cancel`): raised into the body at its next step.

    The step that was running when the cancel landed finishes its effect, but its result is
    refused (the cancel raised the fence); that step, and every step the pass reaches after it
    (in a `finally` too), raise `Cancelled` without running. A `finally` may run plain code
    (close a file, log), never a step: nothing more of the workflow is recorded.
    """

    def __init__(self, workflow: str):
        super().__init__(f"{workflow!r} was cancelled")
        self.workflow = workflow


class Contended(Interruption):
    """Somebody else holds a live claim on the workflow."""

    def __init__(self, workflow: str):
        super().__init__(f"{workflow!r} is claimed by a live pass")
        self.workflow = workflow


class NotMigrated(RuntimeError):
    """A SQL store was used before `migrate` created its tables."""
