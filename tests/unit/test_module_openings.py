"""Every module of the library, the example, the lab and the benchmarks opens with at most ten
lines on what it owns, and a module of the library quotes no measurement there.

A module's opening is what a newcomer reads first and what ages fastest: a long one hides the
one decision that matters, and a timing in it goes stale the day the code gets faster. Detail
belongs on the class or function it is about; numbers belong in `results/`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("durability", "integration", "experiments", "benchmarks")
LINES = 10
#: A timing, a speed-up or a rate: "3 ms", "40 µs", "3x", "500/s", "2,000 per second".
NUMBER = r"\d[\d,]*(?:\.\d+)?\s*"
MEASURED = re.compile(NUMBER + r"(?:ms|µs|us|[x\u00d7]|/s|per second)(?!\w)")


def _openings() -> list[tuple[str, str]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            opening = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
            if opening:
                found.append((path.relative_to(ROOT).as_posix(), opening.strip()))
    return found


def test_the_packages_have_modules_to_check() -> None:
    assert len(_openings()) > 100


def test_every_module_opens_with_at_most_ten_lines() -> None:
    long = {
        path: len(text.splitlines()) for path, text in _openings() if len(text.splitlines()) > LINES
    }
    assert long == {}, f"module openings over {LINES} lines: {long}"


def test_no_library_module_opens_with_a_measurement() -> None:
    quoted = {
        path: MEASURED.findall(text)
        for path, text in _openings()
        if path.startswith("durability/") and MEASURED.search(text)
    }
    assert quoted == {}, f"measurements belong in results/, not a module's opening: {quoted}"


@pytest.mark.parametrize(
    ("text", "measured"),
    [
        ("a pass takes 0.18 ms", True),
        ("three times faster, 3x", True),
        ("1.5\u00d7 pgqueuer", True),
        ("2,000/s", True),
        ("40 µs a call", True),
        ("500 per second", True),
        ("a lease of 30 s", False),
        ("Redis 7.x lacks it", False),
        ("exports max_ms", False),
    ],
)
def test_the_measurement_pattern_tells_a_timing_from_a_setting(text: str, measured: bool) -> None:
    assert bool(MEASURED.search(text)) is measured
