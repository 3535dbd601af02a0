"""Every notebook runs from top to bottom against the committed results, every figure cell
draws an image, and the committed copy carries its outputs (so it reads on a repository page)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.notebooks import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NOTEBOOKS))
def test_the_notebook_runs_and_draws_its_figures(name: str) -> None:
    # Imported here, not at the top: every xdist worker collects this file, and the two take
    # seconds to import (Jupyter's client and schemas), which only the worker that runs it needs.
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "notebooks" / f"{name}.ipynb"
    committed = nbformat.read(path, as_version=4)
    # The committed copy was executed: every code cell has its outputs already.
    assert all(cell.get("outputs") for cell in committed.cells if cell.cell_type == "code"), (
        f"{path.name} is committed without outputs: run `python -m experiments notebooks`"
    )
    fresh = nbformat.read(path, as_version=4)
    NotebookClient(fresh, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()  # raises on error
    for cell in fresh.cells:
        if cell.cell_type != "code":
            continue
        assert not [o for o in cell.outputs if o.get("output_type") == "error"]
        if "figure(" in cell.source:
            images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            assert images, f"{path.name}: the cell {cell.source!r} drew no image"
            assert all(len(o["data"]["image/png"]) > 10_000 for o in images)
        if "say(" in cell.source:
            said = [o for o in cell.outputs if "text/markdown" in o.get("data", {})]
            assert said and "nan" not in said[0]["data"]["text/markdown"].lower().split()


@pytest.mark.parametrize("name", list(NOTEBOOKS))
def test_the_committed_notebook_is_what_the_generator_writes(name: str) -> None:
    import nbformat

    """Its cells are `experiments/notebooks.py`'s, after the first: the `RUN` parameter cell
    that points it at the reference run and says so."""
    from experiments.notebooks import _PARAMETERS

    committed = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    first, *rest = committed.cells
    assert first.source == _PARAMETERS.format(run=None).strip()
    assert "parameters" in first.metadata.get("tags", [])
    assert "Reading the reference run" in first.outputs[0]["data"]["text/markdown"]
    assert [c.source for c in rest] == [source for _, source in NOTEBOOKS[name]], (
        f"{name}.ipynb differs from the generator: run `python -m experiments notebooks`")


def test_the_command_names_a_notebook_it_does_not_know_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["notebooks", "nope", "--results", str(tmp_path)]) == 2
    said = capsys.readouterr()
    assert "no notebook 'nope'" in said.err and said.out == ""
    assert list(tmp_path.iterdir()) == []
