"""What the repository commits speaks of the project only: no path of the machine a run was
made on (a scratch folder, a home directory) in the results, the notebooks or the docs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: An absolute path into a machine's own folders, not one inside a URL or a relative path.
MACHINE = re.compile(r"(?<![\w./:])/(?:tmp|root|home|work|Users|var/folders)/")
#: Where runs leave their metadata and prose; tables (CSV) hold numbers and names only.
KINDS = ("*.json", "*.md", "*.ipynb")
PLACES = ("results", "notebooks", "docs")


def test_no_committed_result_notebook_or_page_names_a_machine_path() -> None:
    paths = [ROOT / "README.md"] + [
        path for place in PLACES for kind in KINDS for path in sorted((ROOT / place).rglob(kind))
    ]
    assert len(paths) > 20  # the reference run's metadata and the notebooks are read
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in paths
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if MACHINE.search(line)
    ]
    assert not found, f"machine paths in: {found[:10]}"
    assert MACHINE.search('"command": "run --results /tmp/cx/ab/after1"')
    assert not MACHINE.search("sqlite:///tmp/x.db and results/ab/x")
