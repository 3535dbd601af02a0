#!/usr/bin/env python3
"""Set up and run the project with nothing but Python installed.

    python3 dev.py lab [ARGS]   the lab, quick: every experiment on every backend it finds,
                                results in a new folder under runs/ (it says which) and the
                                comparison tables printed; ARGS go to `python -m experiments
                                run`; `--full` is the reference run, written to results/
    python3 dev.py test         ruff, mypy --strict and the whole test suite
    python3 dev.py notebooks    JupyterLab on the checkout, opened in work/ (git ignores it:
                                what you make there stays yours); as root too
    python3 dev.py demo         a workflow with a step, a sleep and an approval, in memory

Each command first makes `.venv` beside this file and installs the project with its `dev` extra
into it (again only when pyproject.toml changed), so a fresh clone needs no other step; `lab`
also makes `.venv-rivals` for the job queues it compares against (their drivers conflict with
ours). `lab --full` is the reference run that writes results/ itself (tens of minutes); a
quick run never touches results/.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".installed"
CHECKED = ["durability", "integration", "experiments"]


def run(*argv: str | Path, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(a) for a in argv), flush=True)
    done = subprocess.run([str(a) for a in argv], cwd=ROOT, env=env)
    if done.returncode:
        sys.exit(done.returncode)


def ensure() -> None:
    """Create the virtualenv and install the project into it, unless already current."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        return
    if not PYTHON.exists():
        print(f"creating {VENV.name}/", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    run(PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(PYTHON, "-m", "pip", "install", "--quiet", "-e", ".[dev]")
    STAMP.write_text(wanted)


def demo() -> None:
    run(PYTHON, ROOT / "examples" / "demo.py")


def rivals() -> subprocess.Popen[bytes] | None:
    """Start making `.venv-rivals` if it is missing, beside the making of `.venv` (its maker
    needs nothing but the standard library); None if it is there."""
    if (ROOT / ".venv-rivals" / "bin" / "python").exists():
        return None
    print("+ python -m experiments rivals (beside the install)", flush=True)
    return subprocess.Popen([sys.executable, "-m", "experiments", "rivals"], cwd=ROOT)


def lab(args: list[str], making: subprocess.Popen[bytes] | None = None) -> None:
    if making is not None and making.wait():
        sys.exit(making.returncode)
    if not (ROOT / ".venv-rivals" / "bin" / "python").exists():
        run(PYTHON, "-m", "experiments", "rivals")
    if "--full" in args:
        args = [a for a in args if a != "--full"]
        if not any(a == "--results" or a.startswith("--results=") for a in args):
            args = ["--reference", *args]  # the full run is the reference run
    else:
        args = ["--quick", *args]  # into a folder of its own under runs/ (it says which)
    run(PYTHON, "-m", "experiments", "run", *args)


#: Where JupyterLab opens: a folder of the checkout that git ignores, so a notebook or module
#: made there is the researcher's own and never a change to the project.
SCRATCH = ROOT / "work"


def notebook_command(args: list[str], as_root: bool) -> list[str | Path]:
    """JupyterLab over the whole checkout (the notebooks, results/, runs/ one click apart),
    its file browser opened in `SCRATCH`; as root (a container's usual user) it says
    --allow-root itself, as Jupyter refuses to start there otherwise."""
    command: list[str | Path] = [PYTHON, "-m", "jupyter", "lab", f"--ServerApp.root_dir={ROOT}",
                                 f"--LabApp.default_url=/lab/tree/{SCRATCH.name}"]
    if as_root and "--allow-root" not in args:
        command.append("--allow-root")
    return [*command, *args]


def notebooks(args: list[str]) -> None:
    # The kernels import `experiments` from the install (`ensure`), wherever they start.
    SCRATCH.mkdir(exist_ok=True)
    run(*notebook_command(args, as_root=hasattr(os, "geteuid") and os.geteuid() == 0))


def test(args: list[str]) -> None:
    checked = [name for name in CHECKED if (ROOT / name).is_dir()]
    run(PYTHON, "-m", "ruff", "check", ".")
    run(PYTHON, "-m", "mypy", "--strict", *checked, "examples")
    # Three processes on two cores: most tests wait on real servers and real leases, so the
    # suite takes about half as long; a file's tests stay together (its fixtures, its order).
    if not any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in args):
        args = ["-n", "3", "--dist", "loadfile", *args]
    run(PYTHON, "-m", "pytest", *args)


def main() -> None:
    commands = {"demo": lambda _: demo(), "test": test, "lab": lab, "notebooks": notebooks}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(__doc__.strip())
        sys.exit(2)
    if sys.argv[1] == "lab":
        making = rivals()
        try:
            ensure()
        except BaseException:
            if making is not None:
                making.kill()
            raise
        lab(sys.argv[2:], making)
        return
    ensure()
    commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
