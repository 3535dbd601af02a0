"""The store conformance suite: one contract, every backend.

A store's tests subclass the contracts exported here and override only the fixtures that build
the store; `docs/conformance.md` shows how, contract by contract, for a store of your own. The
tests reach a store only through `durability.interfaces`, so memory, Redis, Postgres, SQLite
and a third party's store all run them unchanged, and importing this needs pytest and
hypothesis (it is test support) but no store's driver.
"""

from durability.testing.conformance.bounds import BoundsContract
from durability.testing.conformance.checkpointer import CheckpointerContract
from durability.testing.conformance.claims import fresh
from durability.testing.conformance.deploying import DeployContract
from durability.testing.conformance.durable import DurableContract
from durability.testing.conformance.failures import FailuresContract
from durability.testing.conformance.limits import PolicyContract
from durability.testing.conformance.model import CheckpointerModelContract, SchedulerModelContract
from durability.testing.conformance.priorities import MakeDurables
from durability.testing.conformance.records import EffectKit
from durability.testing.conformance.scheduler import MakeScheduler, SchedulerContract
from durability.testing.conformance.schedules import (
    ScheduleContract,
    Twin,
    a_schedule_added_elsewhere_wakes_a_worker,
)
from durability.testing.conformance.store_faults import Cut, StoreFaultContract
from durability.testing.conformance.working import taken_over_as_its_claim_lapses

__all__ = [
    "BoundsContract",
    "CheckpointerContract",
    "CheckpointerModelContract",
    "Cut",
    "DeployContract",
    "DurableContract",
    "EffectKit",
    "FailuresContract",
    "MakeDurables",
    "MakeScheduler",
    "PolicyContract",
    "ScheduleContract",
    "SchedulerContract",
    "SchedulerModelContract",
    "StoreFaultContract",
    "Twin",
    "a_schedule_added_elsewhere_wakes_a_worker",
    "fresh",
    "taken_over_as_its_claim_lapses",
]
