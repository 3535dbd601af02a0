"""The memory store's listing index (`memory._Sorted`): whatever ids come and go, a page is
exactly the model's (a sorted set's slice), runs splitting and emptying on the way."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durability.storekit.sorted_ids import SortedIds as _Sorted

ids = st.text(alphabet="abcé\U0001f600", min_size=1, max_size=4)
moves = st.lists(st.tuples(st.booleans(), ids), max_size=200)


@pytest.fixture(autouse=True)
def short_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Sorted, "RUN", 2)  # so a few dozen ids split and empty many runs


@settings(deadline=None, max_examples=300)
@given(moves, st.text(alphabet="abcé\U0001f600", max_size=3), st.booleans(),
       st.integers(min_value=1, max_value=30))
def test_a_page_is_the_sorted_slice_after_any_adds_and_removes(
    steps: list[tuple[bool, str]], low: str, inclusive: bool, limit: int
) -> None:
    index, model = _Sorted(), set[str]()
    for adding, workflow in steps:
        if adding:
            index.add(workflow)
            model.add(workflow)
        else:
            index.discard(workflow)
            model.discard(workflow)
    expected = [w for w in sorted(model) if w > low or (inclusive and w == low)][:limit]
    assert index.page(low, inclusive, limit) == expected
    assert index.page("", True, 10_000) == sorted(model)
