"""A backend of your own: registered by import path, refused with a reason before anything
runs when it cannot work, opened by the lab's agents (other processes) in a run beside ours,
recorded in the run's metadata, carried to child processes, and checked against the store
contract from Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest

import experiments as lab
from durability.interfaces import Durable
from experiments.harness.backends import BACKENDS, ENVIRONMENT
from experiments.harness.registry import forget, parse, registered

STEADY = "experiments.examples.steady_sqlite:open_store"


@pytest.fixture(autouse=True)
def _forgotten() -> Iterator[None]:
    """Each test leaves the lab's backends, and `LAB_BACKENDS`, as it found them."""
    before = os.environ.get(ENVIRONMENT)
    yield
    for name in list(registered()):
        forget(name)
    if before is not None:
        os.environ[ENVIRONMENT] = before


@asynccontextmanager
async def _in_a_cell(url: str, *, lease: timedelta, poll: timedelta | None = None,
                     housekeeping: bool = False) -> AsyncIterator[Durable]:
    raise AssertionError("never opened")
    yield


def test_what_cannot_work_is_refused_by_name_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="one of the lab's own"):
        lab.register("sqlite", STEADY, like="sqlite")
    with pytest.raises(ValueError, match=r"cannot import 'experiments\.examples\.nothing'"):
        lab.register("mine", "experiments.examples.nothing:open_store", like="sqlite")
    with pytest.raises(ValueError, match="has no 'open_shop'"):
        lab.register("mine", "experiments.examples.steady_sqlite:open_shop", like="sqlite")
    with pytest.raises(ValueError, match=r"'package\.module:name'"):
        lab.register("mine", "experiments.examples.steady_sqlite", like="sqlite")
    with pytest.raises(ValueError, match="like='sqlight'"):
        lab.register("mine", STEADY, like="sqlight")
    with pytest.raises(ValueError, match="store="):
        lab.register("mine", STEADY)
    with pytest.raises(ValueError, match="one word"):
        lab.register("my set", STEADY, like="sqlite")
    _in_a_cell.__module__ = "__main__"  # as a function written in a notebook's cell is
    with pytest.raises(ValueError, match="defined in the notebook"):
        lab.register("mine", _in_a_cell, like="sqlite")
    assert not registered() and ENVIRONMENT not in os.environ


def test_like_gives_our_backends_place_and_each_part_can_be_changed() -> None:
    mine = lab.register("mine", STEADY, like="sqlite")
    assert (mine.store, mine.server, mine.polled, mine.opener, mine.path) == (
        "sqlite", None, True, STEADY, "")
    assert "mine" in lab.found(["sqlite", "mine"])
    again = lab.register("mine", STEADY, like="sqlite", polled=False, skip=("growth",))
    assert BACKENDS["mine"] is again and not again.polled and not again.applies("growth")
    assert parse(f"mine={STEADY}?like=sqlite&polled=off&skip=growth,idle") == (
        "mine", {"opener": STEADY, "like": "sqlite", "polled": False,
                 "skip": ("growth", "idle")})


def test_a_process_started_after_the_registration_knows_the_backend() -> None:
    lab.register("mine", STEADY, like="sqlite")
    done = subprocess.run(
        [sys.executable, "-c", "from experiments.harness.backends import BACKENDS; "
         "print(BACKENDS['mine'].opener, BACKENDS['mine'].store)"],
        capture_output=True, text=True, env=os.environ, check=True)
    assert done.stdout.split() == [STEADY, "sqlite"]


@pytest.mark.slow
async def test_a_registered_scheduler_runs_in_the_agents_beside_ours(tmp_path: Path) -> None:
    lab.register("mine", STEADY, like="sqlite", scheduler="SteadySqliteScheduler")
    frame = await lab.run("latency", backends=["sqlite", "mine"], quick=True, rate=40,
                          seconds=0.5, where=tmp_path / "run", figures=False)
    assert not frame.attrs["failed"]
    started = frame[frame["metric"] == "submit_to_first_pass"]
    assert set(started["backend"]) == {"sqlite", "mine"}
    assert set(frame[frame.backend == "mine"]["scheduler"]) == {"SteadySqliteScheduler"}
    meta = json.loads((tmp_path / "run" / "latency.json").read_text())
    assert meta["registered"]["mine"]["opener"] == STEADY
    assert meta["registered"]["mine"]["like"] == "sqlite"
    assert meta["command"].startswith(f"lab.register('mine', '{STEADY}', like='sqlite'); lab.run(")


@pytest.mark.slow
def test_the_contract_runs_from_python_and_says_what_it_found() -> None:
    lab.register("mine", STEADY, like="sqlite")
    found = lab.conformance("mine", select="arrive_records or a_second_arrival")
    assert found and found.count("passed") == 2 and not found.failures
    assert "mine (experiments.examples.steady_sqlite:open_store) conforms: 2 of 2" in str(found)
    assert "| Durable | 2 | 0 | 0 |" in found._repr_markdown_()
    with pytest.raises(ValueError, match="rival job queue"):
        lab.conformance("saq")


@pytest.mark.slow
def test_the_contract_checks_the_checkpointer_and_the_bounds_of_a_registered_store() -> None:
    lab.register("mine", STEADY, like="sqlite")
    found = lab.conformance("mine", select="(Checkpointer and transact) or (Bounds and bad_id)")
    assert found and not found.failures and found.count("skipped") == 0
    contracts = {o.contract for o in found.outcomes}
    assert contracts == {"Checkpointer", "Bounds"}
    # An effect the store performed, counted by the kit: the transact tests really ran.
    assert found.count("passed") >= 10
    shown = found._repr_markdown_()
    assert "| CheckpointerModel, SchedulerModel | | | | not run: model-based" in shown
    assert "| StoreFault | | | | not run:" in shown


_FOREIGN = """
import contextlib
from durability import MemoryCheckpointer, MemoryScheduler, SplitDurable


class Theirs:
    \"\"\"A checkpointer that is not ours: ours underneath, reached through it.\"\"\"

    def __init__(self):
        self.inner = MemoryCheckpointer()

    def __getattr__(self, name):
        return getattr(self.inner, name)


@contextlib.asynccontextmanager
async def open_store(url, *, lease, poll=None, housekeeping=False):
    yield SplitDurable(Theirs(), MemoryScheduler(lease=lease))
"""


@pytest.mark.slow
def test_what_the_contract_cannot_run_on_a_store_is_skipped_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "foreign_store.py").write_text(_FOREIGN)
    monkeypatch.syspath_prepend(str(tmp_path))
    lab.register("theirs", "foreign_store:open_store", store="memory")
    found = lab.conformance("theirs", select="Checkpointer and transact")
    assert found and not found.failures and found.count("skipped") >= 5
    reasons = found.skipped()["Checkpointer"]
    assert reasons and all("(Theirs) is not ours for memory" in why for why in reasons)
    assert "the transact tests need the store's own effect kit" in found._repr_markdown_()


@pytest.mark.slow
def test_the_command_line_registers_a_backend_for_its_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "experiments", "run", "latency", "--quick", "--no-figures",
         "--register", f"mine={STEADY}?like=sqlite&scheduler=SteadySqliteScheduler",
         "--backends", "mine", "--set", "seconds=0.5", "--set", "rate=40",
         "--results", str(tmp_path / "run")],
        capture_output=True, text=True, env={**os.environ, "LAB_RUNS": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    meta = json.loads((tmp_path / "run" / "latency.json").read_text())
    assert meta["backends"] == ["mine"]
    assert meta["registered"]["mine"]["scheduler"] == "SteadySqliteScheduler"
    bad = subprocess.run(
        [sys.executable, "-m", "experiments", "run", "latency", "--quick",
         "--register", f"mine={STEADY}?like=sqlite&pollled=on", "--results",
         str(tmp_path / "never")], capture_output=True, text=True)
    assert bad.returncode == 2 and "no option 'pollled'" in bad.stderr
    assert not (tmp_path / "never").exists()


def test_a_module_outside_the_checkout_is_imported_by_the_agents_from_where_it_was_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = tmp_path / "research" / "mine"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "store.py").write_text(
        "from durability.connect import open_durable as open_store\n")
    monkeypatch.syspath_prepend(str(tmp_path / "research"))
    backend = lab.register("mine", "mine.store:open_store", like="sqlite")
    assert backend.path == str(tmp_path / "research")
    # What an agent does with its `open` request, in a process that never saw the folder.
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from experiments.harness.registry import load; "
         f"print(load('mine.store:open_store', {backend.path!r}).__name__)"],
        capture_output=True, text=True, cwd=str(tmp_path), check=True)
    assert done.stdout.strip() == "open_durable"


@pytest.mark.slow
def test_the_contract_says_how_far_it_is_as_each_test_ends() -> None:
    from experiments.conforming.check import check

    seen: list[tuple[int, int]] = []
    found = check("sqlite", select="arrive_records or a_second_arrival",
                  progress=lambda done, total: seen.append((done, total)))
    assert found.count("passed") == 2
    assert seen == [(0, 2), (1, 2), (2, 2)]


@pytest.mark.slow
def test_the_docs_count_of_the_contract_s_tests_is_what_runs() -> None:
    import re

    from experiments.conforming.check import count

    root = Path(__file__).resolve().parents[2]
    said = {int(n) for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
            for n, again in re.findall(r"(\d+) of (\d+) tests of the contract",
                                       page.read_text()) if n == again}
    assert said <= {count("sqlite")}  # a count the docs name is the one that runs
