"""The lab from Python and the safety of the reference run: `await lab.run(...)` returns the
rows with its overrides in them, `run_sync` refuses a running loop by saying what to write,
a run writes a folder of its own and never `results/` unasked, a quick run is refused beside
a full reference, `lab.use` points the readers at a folder, and a kernel started anywhere
imports the lab and shows a run's progress with no warning.

The command-line runs work on a copy of the repository's layout (the lab's code, and the
reference run's metadata), so no test can write into the real `results/`.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import experiments as lab
from experiments.commands.runner import LoopRunning, main_sync
from experiments.results import Refused, guard, write

ROOT = Path(__file__).resolve().parents[2]
#: The shortest run there is: memory only, at a rate that gives a few dozen submissions.
SHORT = {"rate": 40, "seconds": 0.5}


@pytest.mark.slow
async def test_a_quick_run_returns_its_rows_as_a_frame_with_the_override_in_them(
    tmp_path: Path,
) -> None:
    frame = await lab.run("latency", backends=["memory", "sqlite"], quick=True,
                          where=tmp_path / "mine", figures=False, **SHORT)
    assert {"experiment", "backend", "scheduler", "rate", "seconds", "poll_ms", "metric",
            "value", "unit"} <= set(frame.columns)
    assert set(frame["backend"]) == {"memory", "sqlite"}
    assert set(frame["rate"]) == {40.0}  # the override, not the quick run's 20/s
    assert set(frame["seconds"]) == {0.5}
    started = frame[frame["metric"] == "submit_to_first_pass"]
    assert len(started) >= 2 * 20 and (started["value"] > 0).all()
    assert frame.attrs["where"] == tmp_path / "mine" and not frame.attrs["failed"]
    meta = json.loads((tmp_path / "mine" / "latency.json").read_text())
    assert meta["overrides"] == {"rate": [40.0], "seconds": [0.5]}


async def test_an_unknown_or_bad_parameter_is_refused_by_name_and_nothing_runs(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match=r"'lease'.*lease_s"):
        await lab.run(["latency", "takeover"], backends="memory", quick=True,
                      where=tmp_path / "a", lease=1)
    with pytest.raises(ValueError, match="rate: -5 must be a positive number"):
        await lab.run("latency", backends="memory", quick=True, where=tmp_path / "b", rate=-5)
    with pytest.raises(ValueError, match="phase: 'midstep' is not one of"):
        await lab.run("takeover", backends="sqlite", quick=True, where=tmp_path / "c",
                      phase="midstep")
    with pytest.raises(ValueError, match="no backend 'memroy'"):
        await lab.run("latency", backends="memroy", quick=True, where=tmp_path / "d")
    assert not os.listdir(tmp_path)  # nothing was made


async def test_run_sync_inside_a_running_loop_says_to_await_lab_run() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(LoopRunning, match=r"await lab\.run"):
            lab.run_sync("latency", backends="memory", quick=True)

        async def never() -> int:
            return 0

        with pytest.raises(LoopRunning, match=r"await lab\.run"):
            main_sync(never())  # what `python -m experiments` in a cell reaches
        gc.collect()
    # Closed, not left pending: no "never awaited" warning surfaces in a later cell.
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_no_room_or_module_of_the_lab_shares_a_name_with_its_face() -> None:
    """Importing `experiments.<name>` binds <name> on the package, over whatever the face
    exported under it: a room named `conformance` turned `lab.conformance` into a module
    after its first call."""
    import importlib.util

    shadowing = [name for name in lab.__all__
                 if importlib.util.find_spec(f"experiments.{name}") is not None]
    assert shadowing == []
    assert all(not isinstance(getattr(lab, name), type(lab)) for name in lab.__all__)


def test_use_points_the_readers_at_a_folder(tmp_path: Path) -> None:
    rows = [{"experiment": "latency", "backend": "memory", "variant": "default",
             "rate": 20.0, "poll_ms": None, "metric": "submit_to_first_pass", "value": v,
             "unit": "ms"}
            for v in (1.0, 2.0, 3.0)]
    write("latency", rows, {"experiment": "latency", "mode": "quick"}, tmp_path)
    try:
        assert lab.use(tmp_path) == tmp_path.resolve()
        assert lab.where() == tmp_path.resolve()
        assert list(lab.frame("latency")["value"]) == [1.0, 2.0, 3.0]
        assert lab.table("latency").set_index("backend").loc["memory", "p50"] == 2.0
        assert str(tmp_path) in lab.reads().data and "quick" in lab.reads().data
        (tmp_path / "empty").mkdir()
        with pytest.raises(ValueError, match="holds no results"):
            lab.use(tmp_path / "empty")  # there, but not a run's folder
        with pytest.raises(ValueError, match="no folder"):
            lab.use(tmp_path / "nowhere")
    finally:
        lab.use(None)
    assert "reference run" in lab.reads().data


def test_a_run_that_would_mix_modes_or_overwrite_the_reference_is_refused(
    tmp_path: Path,
) -> None:
    write("latency", [], {"mode": "full"}, tmp_path)
    write("idle", [], {"mode": "full"}, tmp_path)
    guard(tmp_path, ["latency", "idle"], "quick")  # replaces every run there: no mixing
    with pytest.raises(Refused, match=r"idle \(full\)"):
        guard(tmp_path, ["latency"], "quick")
    with pytest.raises(Refused, match=r"latency \(full\)"):
        guard(tmp_path, ["latency"], "quick", merge=True)
    guard(tmp_path, ["latency"], "full")
    with pytest.raises(Refused, match="reference"):
        guard(ROOT / "results", ["latency"], "full")


# -- the command line, on a copy of the repository's layout ------------------------------------


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The lab's code and the reference run's metadata (its modes) in a folder of their own."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "experiments", copy / "experiments",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "results").mkdir()
    for info in (ROOT / "results").glob("*.json"):
        shutil.copy(info, copy / "results" / info.name)
    (copy / "results" / "latency.csv").write_text("experiment,backend,metric,value,unit\n")
    return copy


def _lab(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LAB_RUNS", "LAB_RESULTS")}
    env["PYTHONPATH"] = str(checkout)  # the copy's `experiments`, ahead of the install's
    return subprocess.run([sys.executable, "-m", "experiments", *args], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=120)


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file()}


@pytest.mark.slow
def test_a_run_writes_a_folder_of_its_own_and_leaves_the_reference_alone(checkout: Path
                                                                         ) -> None:
    before = _digest(checkout / "results")
    done = _lab(checkout, "run", "latency", "--quick", "--backends", "memory", "--no-figures",
                "--set", "rate=40", "--set", "seconds=0.5")
    assert done.returncode == 0, done.stderr
    assert _digest(checkout / "results") == before
    (made,) = (checkout / "runs").iterdir()
    assert (made / "latency.csv").exists() and made.name.endswith("-latency-quick")
    assert f"runs/{made.name}" in done.stdout and "untouched" in done.stdout
    assert "runs/" in _lab(checkout, "run", "--help").stdout  # --help says where


def test_a_quick_run_against_the_full_reference_is_refused(checkout: Path) -> None:
    before = _digest(checkout / "results")
    refused = _lab(checkout, "run", "latency", "--quick", "--reference", "--backends", "memory")
    assert refused.returncode == 2
    assert "full" in refused.stderr and "mix" in refused.stderr
    unasked = _lab(checkout, "run", "latency", "--backends", "memory", "--results", "results")
    assert unasked.returncode == 2 and "--reference" in unasked.stderr
    chaos = _lab(checkout, "chaos", "--profile", "ci", "--reference", "--backends", "sqlite")
    assert chaos.returncode == 2 and "mix" in chaos.stderr
    assert _digest(checkout / "results") == before
    assert not (checkout / "runs").exists()


def test_a_short_soak_into_the_full_reference_is_refused_before_it_starts(checkout: Path
                                                                          ) -> None:
    before = _digest(checkout / "results")
    refused = _lab(checkout, "soak", "--minutes", "1", "--reference", "--backends", "sqlite")
    assert refused.returncode == 2
    assert "mix" in refused.stderr and "writing to" not in refused.stderr
    assert _digest(checkout / "results") == before
    assert not (checkout / "runs").exists()


@pytest.mark.slow
def test_a_kernel_started_anywhere_imports_the_lab_and_runs_it_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.delenv("PYTHONPATH", raising=False)  # found through the install alone
    cells = [
        "import experiments as lab",
        f"frame = await lab.run('latency', backends='memory', quick=True, figures=False, "
        f"where={str(tmp_path / 'run')!r}, rate=40, seconds=0.5)\n"
        "lab.use(frame.attrs['where'])\nlab.reads()",
        "print(sorted(set(lab.frame('latency')['backend'])))",
    ]
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(book, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in book.cells for o in cell.outputs]
    assert not [o for o in outputs if o.get("name") == "stderr"], outputs  # no warning
    bars = [o for o in outputs if "<progress" in o.get("data", {}).get("text/html", "")]
    assert bars, "no progress bar was shown"
    assert book.cells[2].outputs[0]["text"].strip() == "['memory']"
    assert "Reading another run, quick" in book.cells[1].outputs[-1]["data"]["text/markdown"]


def _children(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    below: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            below.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in below.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_interrupting_the_kernel_stops_the_run_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import queue
    import time

    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("LAB_RUNS", str(tmp_path / "runs"))
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))

    def execute(code: str, interrupt_when: Any = None) -> list[dict[str, Any]]:
        sent, outputs = client.execute(code), []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if interrupt_when is not None and interrupt_when():
                manager.interrupt_kernel()
                interrupt_when = None
            try:
                message = client.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                continue
            if message["parent_header"].get("msg_id") != sent:
                continue
            if message["msg_type"] == "status":
                if message["content"]["execution_state"] == "idle":
                    return outputs
            elif message["msg_type"] in ("stream", "error", "display_data", "execute_result"):
                outputs.append({"type": message["msg_type"], **message["content"]})
        raise AssertionError(f"the cell {code!r} did not finish: {outputs}")

    try:
        (said,) = execute("import os, experiments as lab\nprint(os.getpid())")
        kernel = int(said["text"])
        seen: set[int] = set()

        def running() -> bool:  # the run's worker agent is up: interrupt it mid-run
            seen.update(_children(kernel))
            return bool(seen)

        stopped = execute("await lab.run('latency', backends='memory', quick=True, "
                          "seconds=60)", interrupt_when=running)
        errors = [o for o in stopped if o["type"] == "error"]
        assert [o["ename"] for o in errors] == ["KeyboardInterrupt"], stopped
        assert "everything it started has been stopped" in errors[0]["evalue"]
        assert not [o for o in stopped if o.get("name") == "stderr"], stopped
        assert seen and not (_children(kernel) & seen), "a process outlived the run"
        later = execute("import asyncio, gc, time\ntime.sleep(0.5); gc.collect()\n"
                        "print(len([t for t in asyncio.all_tasks() if 'experiments' in "
                        "repr(t.get_coro())]))")
        assert [o.get("text", "").strip() for o in later] == ["0"], later  # nothing pending
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


async def test_a_backend_an_experiment_leaves_out_is_said_to_be_skipped_and_why(tmp_path: Path
                                                                               ) -> None:
    frame = await lab.run("takeover", backends=["memory"], quick=True, where=tmp_path,
                          figures=False)
    assert list(frame.attrs["skipped"]) == ["takeover: memory"]
    assert "no worker to kill" in frame.attrs["skipped"]["takeover: memory"]


def test_the_notebook_bar_says_what_was_skipped() -> None:
    from experiments.commands.progress import NotebookBars

    bars = NotebookBars()
    task = bars.add_task("", total=2, name="takeover", skipped="skipped memory")
    bars.advance(task, 2)
    shown = bars._bundle()
    assert "skipped memory" in shown["text/html"] and "skipped memory" in shown["text/plain"]
