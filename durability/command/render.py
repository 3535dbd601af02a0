"""How the command prints what it read: aligned tables whose every id and value is `quoted`,
so a script can split a line on spaces and a terminal never obeys what a workflow holds."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from durability.operating import Acted, Detail, quoted
from durability.operating.actions import Done, Gone, Refused
from durability.operating.shown import escaped
from durability.status import Page, Status

__all__ = ["acted", "history", "listing", "status", "table"]


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.isoformat(timespec="milliseconds")


def _value(value: object) -> str:
    return escaped(json.dumps(value, ensure_ascii=False, default=str), backslash=False)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def _summary(found: Status) -> str:
    if found.failure is not None:
        failure = found.failure
        return quoted(f"{failure.type}: {failure.message}")
    if found.until is not None:
        return f"until {_when(found.until)}"
    keys = sorted(found.waiting | found.listening)
    return " ".join(quoted(key) for key in keys) if keys else "-"


def status(found: Status) -> str:
    rows = [
        ("workflow", quoted(found.workflow)),
        ("state", found.state),
        ("at", _when(found.at)),
    ]
    if found.until is not None:
        rows.append(("until", _when(found.until)))
    if found.waiting:
        rows.append(("waiting", " ".join(quoted(key) for key in sorted(found.waiting))))
    if found.listening:
        rows.append(("listening", " ".join(quoted(key) for key in sorted(found.listening))))
    if found.failure is not None:
        failure = found.failure
        rows.append(("failure", quoted(f"{failure.type}: {failure.message}")))
        rows.append(("step", "-" if failure.step is None else quoted(failure.step)))
        rows.append(("attempt", str(failure.attempt)))
    return table(("field", "value"), rows)


def listing(page: Page) -> str:
    rows = [
        (quoted(found.workflow), found.state, _when(found.at), _summary(found))
        for found in page.statuses
    ]
    return table(("WORKFLOW", "STATE", "AT", "DETAIL"), rows)


def history(seen: Detail) -> str:
    rows = [(_when(w.at), quoted(w.key), _value(w.value)) for w in seen.history]
    head = (
        f"{quoted(seen.status.workflow)}: {seen.status.state}"
        f"{' (held by a live pass)' if seen.held else ''}; {len(seen.failures)} failure(s),"
        f" {seen.retries} retry(ies), {seen.attempts} attempt(s) failed since"
    )
    return head + "\n" + table(("AT", "KEY", "VALUE"), rows)


def acted(name: str, workflow: str, result: Acted, as_json: bool) -> str:
    match result:
        case Done(said=said):
            outcome = "done"
        case Refused(said=said):
            outcome = "refused"
        case Gone(said=said):
            outcome = "not found"
    if as_json:
        return json.dumps(
            {"action": name, "workflow": workflow, "result": outcome, "said": said}
        )
    return f"{name} {quoted(workflow)}: {outcome}: {escaped(said)}"
