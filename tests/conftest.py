"""Suite-wide guard: under CI every store suite must really run.

Locally a store test whose server does not answer skips with a reason. In CI (the `CI`
environment variable set) a skipped store test fails the run, so a missing service can never
pass for a green build.

It also puts the repository root on `sys.path`, so `pytest` run from anywhere (not only
`python -m pytest` from the root) imports the working tree rather than needing an install.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

_skipped_store_tests: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.replace("\\", "/")
    if report.skipped and ("tests/stores/" in path or "tests/integration/" in path):
        _skipped_store_tests.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") and _skipped_store_tests:
        print(f"\nCI: {len(_skipped_store_tests)} store test(s) were skipped, which CI forbids:")
        for nodeid in _skipped_store_tests[:20]:
            print(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
