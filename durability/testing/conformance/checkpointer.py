"""The checkpointer half of the contract: claims, fencing, first-writer-wins, order, the inbox.

A store's suite subclasses `CheckpointerContract` and overrides two fixtures: `checkpointer`
(built with the default `JsonCodec`, since the codec refusals tested are the default codec's)
and `effect_kit` (the store's own `Effect`, adding to a counter the store keeps). The tests go
through the `Checkpointer` protocol only, so every store runs them unchanged. They live in two
modules by concept, `claims` and `records`, and meet here.

Each test names a fresh workflow id, so a shared server needs no cleanup between tests and two
suites may run against it at once.
"""

from __future__ import annotations

import pytest

from durability.interfaces import Checkpointer
from durability.testing.conformance.claims import ClaimContract
from durability.testing.conformance.records import EffectKit, RecordContract


class CheckpointerContract(ClaimContract, RecordContract):
    """What every `Checkpointer` must do. Subclass and override the two fixtures."""

    @pytest.fixture
    def checkpointer(self) -> Checkpointer:
        raise NotImplementedError(f"{type(self).__name__} must override the `checkpointer` fixture")

    @pytest.fixture
    def effect_kit(self) -> EffectKit:
        raise NotImplementedError(
            f"{type(self).__name__} must override the `effect_kit` fixture with the store's"
            " own Effect adding to a store-side counter"
        )
