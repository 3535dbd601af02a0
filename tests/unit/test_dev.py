"""`dev.py notebooks`: JupyterLab starts as root too, over the checkout, opened in a folder
git ignores, so what a researcher makes there never shows as a change to the project."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev", ROOT / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_jupyterlab_is_allowed_to_start_as_root_and_only_then() -> None:
    dev = _dev()
    assert "--allow-root" in dev.notebook_command([], as_root=True)
    assert "--allow-root" not in dev.notebook_command([], as_root=False)
    said = dev.notebook_command(["--allow-root", "--port", "9999"], as_root=True)
    assert said.count("--allow-root") == 1 and said[-2:] == ["--port", "9999"]


def test_jupyterlab_serves_the_checkout_and_opens_in_an_ignored_scratch_folder() -> None:
    dev = _dev()
    command = [str(part) for part in dev.notebook_command([], as_root=False)]
    assert f"--ServerApp.root_dir={ROOT}" in command
    assert f"--LabApp.default_url=/lab/tree/{dev.SCRATCH.name}" in command
    assert dev.SCRATCH.parent == ROOT
    ignored = subprocess.run(["git", "check-ignore", "-q", f"{dev.SCRATCH.name}/Untitled.ipynb"],
                             cwd=ROOT, check=False)
    assert ignored.returncode == 0, f"git does not ignore {dev.SCRATCH.name}/"
