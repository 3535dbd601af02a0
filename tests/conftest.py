"""Suite-wide guard: under CI every store suite must really run.

Locally a store test whose server does not answer skips with a reason. In CI (the `CI`
environment variable set) a skipped store test fails the run, so a missing service can never
pass for a green build.

It also puts the repository root on `sys.path`, so `pytest` run from anywhere (not only
`python -m pytest` from the root) imports the working tree rather than needing an install.

It bounds the closing of every test's event loop (`tests/closing_loops.py`): a task that
outlives its cancel has its stack written to the run's output instead of hanging a worker
silently, and the run's end lists such tasks.

And under pytest-xdist it hands out the files that hold a `slow` test first (processes,
kernels, private servers, chaos): a worker given one near the end would run on alone while the
others sit idle, so the run would last as long as that file's tail.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests import closing_loops  # noqa: E402  (the root is on the path only now)

_skipped_store_tests: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.replace("\\", "/")
    if report.skipped and ("tests/stores/" in path or "tests/integration/" in path):
        _skipped_store_tests.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if closing_loops.held_up:
        print(f"\n{len(closing_loops.held_up)} task(s) outlived their cancel as a test's loop"
              " closed (stacks above, under closing_loops):")
        for task in closing_loops.held_up[:20]:
            print(f"  {task}")
    if os.environ.get("CI") and _skipped_store_tests:
        print(f"\nCI: {len(_skipped_store_tests)} store test(s) were skipped, which CI forbids:")
        for nodeid in _skipped_store_tests[:20]:
            print(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config: pytest.Config) -> None:
    from _pytest.faulthandler import fault_handler_stderr_fd_key

    closing_loops.install(config.stash.get(fault_handler_stderr_fd_key, None))
    # xdist's file scheduler would sort the files by how many tests each holds, which leaves a
    # file of a few long tests (a notebook, a chaos run) to the end; keep the order below.
    if config.getoption("dist", default="no") in ("loadfile", "loadscope"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: the files holding a `slow` test first, as collected, then the rest,
    those with the most tests first (xdist's own order). A file's tests keep their order, and
    every worker computes the same list, as xdist requires."""
    if not hasattr(config, "workerinput"):
        return
    size = Counter(item.path for item in items)
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    seen = {path: n for n, path in enumerate(dict.fromkeys(item.path for item in items))}
    items.sort(key=lambda item: (0, 0, seen[item.path]) if item.path in slow
               else (1, -size[item.path], seen[item.path]))
