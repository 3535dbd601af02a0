"""Every notebook runs from top to bottom against the committed results, every figure cell
draws an image, and the committed copy carries its outputs (so it reads on a repository page)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.__main__ import main
from experiments.catalogue import EXPERIMENTS
from experiments.writing.notebooks import NOTEBOOKS

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
    # The committed copy was executed: every code cell has its outputs already (but the
    # parameter cell, which only sets `RUN`).
    assert all(cell.get("outputs") for cell in committed.cells[1:] if cell.cell_type == "code"), (
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
    """Its cells are `experiments/writing/notebooks.py`'s, after the first two: the `RUN` parameter
    cell that points it at the reference run, and the cell that says so as its first output."""
    import nbformat

    from experiments.writing.notebooks import PARAMETERS, READS

    committed = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    first, second, *rest = committed.cells
    assert first.source == PARAMETERS.format(run=None).strip()
    assert "parameters" in first.metadata.get("tags", [])
    assert second.source == READS.strip()
    assert "Reading the reference run" in second.outputs[0]["data"]["text/markdown"]
    assert [c.source for c in rest] == [source for _, source in NOTEBOOKS[name]], (
        f"{name}.ipynb differs from the generator: run `python -m experiments notebooks`")


def test_the_command_names_a_notebook_it_does_not_know_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["notebooks", "nope", "--results", str(tmp_path)]) == 2
    said = capsys.readouterr()
    assert "no notebook 'nope'" in said.err and said.out == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_notebook_given_another_run_the_papermill_way_reads_and_names_it(
    tmp_path: Path,
) -> None:
    """Papermill puts the values it is given in a cell after the parameter cell: a notebook
    then reads that run, and its first line of output names it."""
    import shutil

    import nbformat
    from nbclient import NotebookClient

    from experiments.writing.notebooks import build

    run = tmp_path / "my-run"
    run.mkdir()
    for suffix in ("csv", "json"):
        shutil.copy(ROOT / "results" / f"growth.{suffix}", run / f"growth.{suffix}")
    (path,) = build(["growth"], execute=False, where=tmp_path)
    book = nbformat.read(path, as_version=4)
    given = nbformat.v4.new_code_cell(f"RUN = {str(run)!r}")
    given.metadata["tags"] = ["injected-parameters"]
    book.cells.insert(1, given)
    NotebookClient(book, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    said = book.cells[2].outputs[0]["data"]["text/markdown"]
    assert said.startswith("*Reading another run, full:") and str(run) in said
    figure = next(c for c in book.cells if c.source == "figure('growth')")
    assert any("image/png" in o.get("data", {}) for o in figure.outputs)


def test_both_kinds_of_notebook_are_written_by_one_function_that_refuses_unknown_names(
    tmp_path: Path,
) -> None:
    """`notebooks.build` and `workbooks.build` share `save`: an unknown name is refused, naming
    the choices, before anything is written; a known one is written with its parameter cell
    tagged, whichever kind it is."""
    import nbformat

    from experiments.writing import workbooks
    from experiments.writing.notebooks import build

    for made, kind in ((build, "notebook"), (workbooks.build, "workbook")):
        with pytest.raises(ValueError, match=f"no {kind} 'nope'; choose from"):
            made(["nope"], execute=False, where=tmp_path / kind)
        assert not (tmp_path / kind).exists()
    written = [*build(["growth"], execute=False, where=tmp_path / "read"),
               *workbooks.build(["run-your-own"], execute=False, where=tmp_path / "run")]
    assert [p.name for p in written] == ["growth.ipynb", "run-your-own.ipynb"]
    for path in written:
        first = nbformat.read(path, as_version=4).cells[0]
        assert first.metadata["tags"] == ["parameters"] and not first.get("outputs")


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_notebook_names_the_kernel_jupyterlab_would_write_so_opening_it_changes_nothing(
        path: Path) -> None:
    # JupyterLab rewrites a notebook's kernelspec to the running kernel's on opening, and
    # autosave then writes it: the committed one must already say what the kernel says
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager

    from experiments.writing.notebooks import KERNEL

    spec = KernelSpecManager().get_kernel_spec(KERNEL["name"])
    assert {"name": KERNEL["name"], "display_name": spec.display_name,
            "language": spec.language} == KERNEL
    committed = nbformat.read(path, as_version=4)
    assert committed.metadata["kernelspec"] == KERNEL
    # and a save by Jupyter's own writer, of the notebook as read, is the same bytes
    assert nbformat.writes(committed) + "\n" == path.read_text()


@pytest.mark.slow
def test_in_a_notebook_a_refusal_is_one_line_and_a_figure_shows_once() -> None:
    import nbformat
    from nbclient import NotebookClient

    made = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import experiments as lab\nlab.figure('idle')"),
        nbformat.v4.new_code_cell("lab.table('latncy')"),
        nbformat.v4.new_code_cell(
            "lab.conformance('sqlite', select='arrive_records or a_second_arrival')")])
    NotebookClient(made, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    drawn, refused, checked = (cell.outputs for cell in made.cells)
    # the bar counted the tests as they ended (a kernel's colours did not hide them)
    assert checked[0]["data"]["text/plain"].startswith("conformance 2/2")
    assert len([o for o in drawn if "image/png" in o.get("data", {})]) == 1
    (error,) = refused
    assert error["output_type"] == "error" and error["ename"] == "BadInput"
    assert error["traceback"] == ["BadInput: no experiment 'latncy'; choose from "
                                  f"{', '.join((*EXPERIMENTS, 'soak'))}"]
