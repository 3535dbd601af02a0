"""Durable workflows whose whole engine is a checkpoint any process can read, a queue, and the
atomicity the store already has.

The core imports no store driver: `durability.redis`, `durability.postgres` and
`durability.sqlite` bring their own, and `import durability` needs nothing beyond Python.
"""

from durability.bodies import UnknownBody
from durability.checks import INBOX, positive
from durability.children import ChildFailed
from durability.codec import (
    Codec,
    JsonCodec,
    Unencodable,
    as_bool,
    as_count,
    as_dict,
    as_float,
    as_int,
    as_json,
    as_list,
    as_none,
    as_text,
)
from durability.determinism import Nondeterministic
from durability.endings import ResultTimeout, WorkflowCancelled, WorkflowFailed
from durability.failures import ONCE, Failure, Retry
from durability.faults import StoreDown, Transient
from durability.graph import CompiledGraph, Graph, run_durably
from durability.interfaces import (
    Checkpointer,
    Durable,
    Measured,
    Retaining,
    Scheduler,
    Trimmed,
    claimed,
)
from durability.memory import MemoryCheckpointer, MemoryEffect, MemoryScheduler
from durability.signals import Cancelled, Contended, Fenced, Interruption, NotMigrated
from durability.split import SplitDurable
from durability.status import Inspectable, Page, Status
from durability.stepwise import (
    Blocked,
    Completed,
    InputNeeded,
    Outcome,
    Run,
    ScheduledWakeup,
    Sleeping,
    StepTimeout,
    Suspended,
    Swallowed,
    resume,
)
from durability.storekit.traffic import Counted, Sent, Traffic
from durability.values import (
    Delivery,
    Effect,
    Entry,
    Footprint,
    Limit,
    Pass,
    Reclaimed,
    Recorded,
    Taken,
    Written,
)
from durability.worker import Event, Observer, work

__all__ = [
    "INBOX",
    "ONCE",
    "Blocked",
    "Cancelled",
    "Checkpointer",
    "ChildFailed",
    "Codec",
    "CompiledGraph",
    "Completed",
    "Contended",
    "Counted",
    "Delivery",
    "Durable",
    "Effect",
    "Entry",
    "Event",
    "Failure",
    "Fenced",
    "Footprint",
    "Limit",
    "Graph",
    "InputNeeded",
    "Inspectable",
    "Interruption",
    "JsonCodec",
    "MemoryCheckpointer",
    "MemoryEffect",
    "MemoryScheduler",
    "Measured",
    "Nondeterministic",
    "NotMigrated",
    "Observer",
    "Outcome",
    "Page",
    "Pass",
    "Reclaimed",
    "Recorded",
    "ResultTimeout",
    "Retaining",
    "Retry",
    "Run",
    "ScheduledWakeup",
    "Scheduler",
    "Sent",
    "Sleeping",
    "Status",
    "StepTimeout",
    "SplitDurable",
    "StoreDown",
    "Suspended",
    "Swallowed",
    "Taken",
    "Trimmed",
    "Traffic",
    "Transient",
    "Unencodable",
    "UnknownBody",
    "WorkflowCancelled",
    "WorkflowFailed",
    "Written",
    "as_bool",
    "as_count",
    "as_dict",
    "as_float",
    "as_int",
    "as_json",
    "as_list",
    "as_none",
    "as_text",
    "claimed",
    "positive",
    "resume",
    "run_durably",
    "work",
]
