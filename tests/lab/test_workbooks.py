"""The notebooks that run the lab (`experiments.writing.workbooks`) run from top to bottom in a
kernel, on the quick slice CI can afford (memory and SQLite, a slice of the contract), and
draw their figures; the committed copies are the generator's cells, with outputs, naming no
machine's paths. So `lab.run`, `lab.register`, `lab.conformance` and `lab.found` cannot
change without these notebooks saying so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.writing.workbooks import WORKBOOKS, cells, notebook

ROOT = Path(__file__).resolve().parents[2]

#: Each workbook's parameters for CI: seconds, not minutes.
QUICK = {
    "your-own-scheduler": ("RUN = None\nCONTRACT = 'Durable and arrive'\nSECONDS = 0.5\n"
                           "POLLS = [25]"),
    "run-your-own": "RUN = None\nBACKENDS = 'memory,sqlite'\nLEASES = [0.5, 1]",
}


def _executed(name: str, figures: int) -> str:
    """Workbook `name` run with `QUICK`'s parameters; every output's text, after checking no
    cell failed, every `say` said something whole and `figures` figures were drawn."""
    # Imported here, not at the top: every xdist worker collects this file, and Jupyter's
    # client takes seconds to import, which only the worker that runs it needs.
    from nbclient import NotebookClient

    book = notebook(name, QUICK[name])
    NotebookClient(book, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()  # raises on error
    images, shown = 0, []
    for cell in book.cells:
        if cell.cell_type != "code":
            continue
        assert not [o for o in cell.outputs if o.get("output_type") == "error"]
        images += sum(1 for o in cell.outputs if "image/png" in o.get("data", {}))
        if "say(" in cell.source:
            said = [o for o in cell.outputs if "text/markdown" in o.get("data", {})]
            assert said and "nan" not in said[0]["data"]["text/markdown"].lower().split()
        shown += [o.get("data", {}).get(kind, "") for o in cell.outputs
                  for kind in ("text/plain", "text/markdown")]
    assert images == figures, f"{name} drew {images} figure(s), not {figures}"
    return "\n".join(shown)


def _first(shown: str) -> str:
    """A workbook's first line of output (a Markdown output's plain-text stand-in aside)."""
    return next(line for line in shown.splitlines() if not line.startswith("<IPython"))


@pytest.fixture(autouse=True)
def _runs_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's runs go to a folder of the test's own, not the checkout's `runs/`."""
    monkeypatch.setenv("LAB_RUNS", str(tmp_path / "runs"))


@pytest.mark.slow
def test_your_own_scheduler_is_checked_registered_and_measured_beside_sqlite() -> None:
    shown = _executed("your-own-scheduler", figures=1)
    assert _first(shown).lstrip("*").startswith("Reading the run this notebook makes below")
    assert "sqlite-steady (experiments.examples.steady_sqlite:open_store) conforms" in shown
    # The registered backend's rows sit beside SQLite's in the latency and idle tables.
    assert len(re.findall(r"^\s*sqlite-steady\s", shown, re.MULTILINE)) >= 3
    assert len(re.findall(r"^\s*sqlite\s", shown, re.MULTILINE)) >= 3


@pytest.mark.slow
def test_run_your_own_runs_latency_here_and_sweeps_the_lease() -> None:
    shown = _executed("run-your-own", figures=2)
    # what yours are drawn against
    assert _first(shown).lstrip("*").startswith("Reading the reference run")
    assert "Found here: memory, sqlite" in shown
    assert re.search(r"^sqlite\s+\S+\s+\S+\s+\S+\s+\S+$", shown, re.MULTILINE)  # yours, reference
    assert re.search(r"sqlite\s+0\.5\b", shown) and re.search(r"sqlite\s+1(\.0)?\s", shown)


@pytest.mark.parametrize("name", list(WORKBOOKS))
def test_the_committed_workbook_is_what_the_generator_writes(name: str) -> None:
    import nbformat

    path = ROOT / "notebooks" / f"{name}.ipynb"
    committed = nbformat.read(path, as_version=4)
    assert [c.source for c in committed.cells] == [source for _, source in cells(name)], (
        f"{path.name} differs from the generator: run `python -m experiments workbooks`")
    assert "parameters" in committed.cells[0].metadata.get("tags", [])
    for cell in committed.cells[1:]:
        if cell.cell_type == "code":
            assert cell.get("outputs"), f"{path.name} is committed without outputs"
    text = path.read_text()
    assert not re.search(r"/(?:work|home|tmp|Users)/", text), f"{path.name} names a machine path"


def test_the_command_names_a_workbook_it_does_not_know(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workbooks", "nope"]) == 2
    said = capsys.readouterr()
    assert "no workbook 'nope'" in said.err and said.out == ""
