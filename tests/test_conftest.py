"""The suite's own conftest: under pytest-xdist a file holding a `slow` test is handed out
before the others, whatever its size or name, and a file's tests keep their order."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FILES = {
    # Collected first, and the most tests: xdist on its own would hand it out first.
    "test_a_many.py": "".join(f"def test_many_{n}():\n    pass\n\n" for n in range(5)),
    "test_b_some.py": "".join(f"def test_some_{n}():\n    pass\n\n" for n in range(3)),
    # Collected last, and the fewest tests: xdist on its own would leave it to the end.
    "test_c_slow.py": (
        "import pytest\n\n"
        "def test_slow_before():\n    pass\n\n"
        "@pytest.mark.slow\n"
        "def test_slow_itself():\n    pass\n\n"
        "def test_slow_after():\n    pass\n"
    ),
}


def test_a_file_with_a_slow_test_is_handed_out_first_and_keeps_its_order(tmp_path: Path) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: many seconds\n")
    # One worker runs the files in the order the scheduler hands them out; no other plugin
    # is loaded, so the inner run takes a moment, not the suite's start-up.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", "1", "--dist", "loadfile",
         "-v", "-p", "no:cacheprovider"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = re.findall(r"PASSED (\S+)", done.stdout)
    assert ran == [
        "test_c_slow.py::test_slow_before",
        "test_c_slow.py::test_slow_itself",
        "test_c_slow.py::test_slow_after",
        *(f"test_a_many.py::test_many_{n}" for n in range(5)),
        *(f"test_b_some.py::test_some_{n}" for n in range(3)),
    ], done.stdout
