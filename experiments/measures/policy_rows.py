"""What both sides of `policies` share (ours, `policies`, and the rivals', `policies_rivals`):
the arms' sizes and settings, and their rows made from what the workers noted, so a rival's
firings and holds are counted exactly as ours are.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BACKLOG_HOLD_MS", "LIMIT_HOLD_MS", "LOW", "POOL", "URGENT", "firing_rows",
           "limit_rows", "most_at_once", "sizes"]

#: The urgent workflows' priority, and the backlog's (the default: the common path).
URGENT, LOW = 10, 0
#: How long a backlog pass and a limited pass hold their slot (a step that sleeps).
BACKLOG_HOLD_MS = 10.0
LIMIT_HOLD_MS = 5.0
#: The worker's pool: above the largest limit, so every limit is contended.
POOL = 32


def sizes(quick: bool) -> dict[str, int]:
    """Each arm's size in a quick and a full run (a run's `--set` comes first)."""
    if quick:
        return {"firings": 20, "backlog": 400, "urgent": 10, "workflows": 100,
                "common": 400}
    return {"firings": 100, "backlog": 2000, "urgent": 60, "workflows": 400, "common": 4000}


def firing_rows(ledger: list[dict[str, Any]], name: str, every_ms: float
                ) -> list[dict[str, Any]]:
    """The schedule arm's rows from the workers' ledgers (ours and a rival's alike: `ran`
    entries carry the firing's time in ns, `started` the first pass start)."""
    ran: dict[int, int] = {}
    started: dict[str, int] = {}
    for entry in ledger:
        if entry["kind"] == "ran" and entry["workflow"].startswith(name):
            ran[int(entry["firing"])] = ran.get(int(entry["firing"]), 0) + 1
        elif entry["kind"] == "started":
            at = int(entry["at"])
            started[entry["workflow"]] = min(at, started.get(entry["workflow"], at))
    firing_of = {e["workflow"]: int(e["firing"]) for e in ledger if e["kind"] == "ran"}
    first: dict[int, int] = {}
    for workflow, at in started.items():
        if workflow in firing_of:
            firing = firing_of[workflow]
            first[firing] = min(at, first.get(firing, at))
    rows: list[dict[str, Any]] = [
        {"firing": i, "metric": "firing_delay", "value": (first[f] - f) / 1e6, "unit": "ms"}
        for i, f in enumerate(sorted(first))]
    times = sorted(ran)
    step = every_ms * 1e6
    expected = round((times[-1] - times[0]) / step) + 1 if times else 0
    rows += [{"metric": "firings", "value": len(times), "unit": "count"},
             {"metric": "duplicates", "value": sum(n - 1 for n in ran.values()),
              "unit": "count"},
             {"metric": "missing", "value": max(0, expected - len(times)), "unit": "count"},
             {"metric": "every", "value": every_ms, "unit": "ms"}]
    return rows


def limit_rows(held: list[dict[str, Any]], at_most: int, hold_ms: float
               ) -> list[dict[str, Any]]:
    """The limit arm's rows from the holds' spans (`enter`, `exit` in ns on one clock)."""
    most = most_at_once([(int(h["enter"]), int(h["exit"])) for h in held])
    span = (max(int(h["exit"]) for h in held) - min(int(h["enter"]) for h in held)) / 1e9
    rows: list[dict[str, Any]] = [
        {"metric": "passes", "value": len(held), "unit": "count"},
        {"metric": "passes_per_s", "value": len(held) / span, "unit": "1/s"},
        {"metric": "max_holders", "value": most, "unit": "count"},
        {"metric": "overshoot", "value": max(0, most - at_most) if at_most else 0,
         "unit": "count"},
        {"metric": "hold", "value": hold_ms, "unit": "ms"}]
    if at_most:
        rows.append({"metric": "ceiling_per_s", "value": at_most * 1000 / hold_ms,
                     "unit": "1/s"})
    return rows


def most_at_once(spans: list[tuple[int, int]]) -> int:
    """The most spans open at one moment (one ending as another begins counts as apart)."""
    moments = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in moments:
        now += step
        most = max(most, now)
    return most
