"""What the lab refuses (an experiment, a backend, a folder or a parameter it has none of),
and how a notebook shows it: the message in one line, not the library's frames above it,
which say nothing to someone who misspelt a name.

`BadInput` is a `ValueError`, so code catching that still catches it. IPython asks an
exception for its own traceback (`_render_traceback_`); this one gives its message alone,
unless `LAB_TRACEBACK` is set in the environment (`%env LAB_TRACEBACK=1` in a notebook),
which brings the frames back for whoever is debugging the lab itself.
"""

from __future__ import annotations

import os
import traceback

__all__ = ["TRACEBACK", "BadInput"]

#: Set (to anything but "" or "0") and a notebook shows a refusal's frames too.
TRACEBACK = "LAB_TRACEBACK"


class BadInput(ValueError):
    """Input the lab cannot take, said in one line that names what it can."""

    def _render_traceback_(self) -> list[str]:
        if os.environ.get(TRACEBACK, "") not in ("", "0"):
            return "".join(traceback.format_exception(self)).rstrip("\n").splitlines()
        return [f"{type(self).__name__}: {self}"]
