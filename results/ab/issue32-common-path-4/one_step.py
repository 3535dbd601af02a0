"""The third sitting's workload, unchanged: `../issue32-common-path-3/one_step.py`, run as a
script (`work`, `arrive` or `calls`, as there) or imported for its `one_step` body
(`bytecodes.py`).

    PYTHONPATH=<tree> PYTHONHASHSEED=0 python one_step.py work|arrive|calls [N]
"""

import runpy
from pathlib import Path
from typing import Any

_THIRD = str(Path(__file__).resolve().parent.parent / "issue32-common-path-3" / "one_step.py")

if __name__ == "__main__":
    runpy.run_path(_THIRD, run_name="__main__")
else:
    one_step: Any = runpy.run_path(_THIRD)["one_step"]
