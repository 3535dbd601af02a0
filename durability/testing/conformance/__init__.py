"""The store conformance suite: one contract, every backend.

Three pytest classes, one per interface, that a store's test module subclasses, overriding only
the fixtures that build the store:

    class TestRedisCheckpointer(CheckpointerContract):
        @pytest.fixture
        async def checkpointer(self) -> Checkpointer: ...   # default JsonCodec
        @pytest.fixture
        def effect_kit(self) -> EffectKit: ...              # the store's own Effect

    class TestRedisStream(SchedulerContract):
        @pytest.fixture
        def make_scheduler(self) -> MakeScheduler: ...      # lease -> fresh, prepared queue

    class TestRedisDurable(DurableContract):
        @pytest.fixture
        async def durable(self) -> Durable: ...             # over a fresh queue

`DurableContract` includes `WorkContract` (the real `work` loop over the store) and
`FailuresContract` (retries, the failed state, step timeouts, `status`, `list`, `retry`), which
asks the checkpointer to be a `Ledger` and the `Durable` to be `Inspectable`.

    class TestRedisBounds(BoundsContract):
        @pytest.fixture
        def offline(self) -> Durable: ...                  # with no server behind it

and the model-based tests (`model`), which reuse those fixtures:

    class TestRedisCheckpointerModel(CheckpointerModelContract):
        checkpointer = TestRedisCheckpointer.checkpointer
        effect_kit = TestRedisCheckpointer.effect_kit

The tests talk to a store only through `durability.interfaces`, so memory, Redis, Postgres and
SQLite all run them unchanged. Importing this needs pytest and hypothesis (it is test support)
and no driver.

`taken_over_as_its_claim_lapses(durable)` is a scenario for a store's own suite, over a durable
with a short lease (the contract's fixtures keep long ones): a dead worker's workflow is taken
over as its claim lapses, not handed back.

`StoreFaultContract` is opt-in: a store's suite that can make its store fail for real (a killed
connection, a locked file) subclasses it to show a pass rides the fault out.
"""

from durability.testing.conformance.bounds import BoundsContract
from durability.testing.conformance.checkpointer import CheckpointerContract
from durability.testing.conformance.claims import fresh
from durability.testing.conformance.durable import DurableContract
from durability.testing.conformance.failures import FailuresContract
from durability.testing.conformance.model import CheckpointerModelContract, SchedulerModelContract
from durability.testing.conformance.records import EffectKit
from durability.testing.conformance.scheduler import MakeScheduler, SchedulerContract
from durability.testing.conformance.store_faults import Cut, StoreFaultContract
from durability.testing.conformance.working import taken_over_as_its_claim_lapses

__all__ = [
    "BoundsContract",
    "CheckpointerContract",
    "CheckpointerModelContract",
    "Cut",
    "DurableContract",
    "EffectKit",
    "FailuresContract",
    "MakeScheduler",
    "SchedulerContract",
    "SchedulerModelContract",
    "StoreFaultContract",
    "fresh",
    "taken_over_as_its_claim_lapses",
]
