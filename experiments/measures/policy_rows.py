"""What both sides of `policies` share (ours, `policies`, and the rivals', `policies_rivals`):
the arms' sizes and settings, and their rows made from what the workers noted, so a rival's
firings and holds are counted exactly as ours are.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BACKLOG_HOLD_MS", "LIMIT_HOLD_MS", "LOW", "POOL", "RATE_PATIENCE", "RATE_PER_MS",
           "RATE_SLACK_MS",
           "URGENT", "firing_rows", "limit_rows", "most_at_once", "most_in_window", "rate_rows",
           "sizes"]

#: The urgent workflows' priority, and the backlog's (the default: the common path).
URGENT, LOW = 10, 0
#: How long a backlog pass and a limited pass hold their slot (a step that sleeps).
BACKLOG_HOLD_MS = 10.0
LIMIT_HOLD_MS = 5.0
#: The worker's pool: above the largest limit, so every limit is contended.
POOL = 32
#: A rate limit's window: `at_most` starts in any `per` of this.
RATE_PER_MS = 1000.0
#: What a window is shortened by when starts are counted from inside the bodies: the store
#: bounds its takes, and a body starts a little after its take (a claim, a load), by more for
#: one of a burst than for the next (tens of ms for a burst of 100, measured); so two takes a
#: whole window apart can start a little less than one apart. 10% of the window: a store that
#: let one take too many per window still shows, as the extra one starts with its burst.
RATE_SLACK_MS = 100.0
#: How many of a rate arm's windows it waits at most for its work to start: a store slow to
#: hand out what the window has room for shows as a low rate, not as a long configuration.
RATE_PATIENCE = 4


def sizes(quick: bool) -> dict[str, int]:
    """Each arm's size in a quick and a full run (a run's `--set` comes first)."""
    if quick:
        return {"firings": 20, "backlog": 400, "urgent": 10, "workflows": 100,
                "common": 400, "windows": 3}
    return {"firings": 100, "backlog": 2000, "urgent": 60, "workflows": 400, "common": 4000,
            "windows": 4}


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


def rate_rows(starts: list[int], at_most: int, per_ms: float, queued: int,
              cut: int | None = None, slack_ms: float = RATE_SLACK_MS) -> list[dict[str, Any]]:
    """The rate arm's rows from the bodies' start times (ns on one clock) of `queued`
    workflows: the most starts in any window of `per_ms` less `slack_ms` (above `at_most`: an
    overshoot, which must be 0), and the rate achieved after the first window's burst (the
    `at_most` a fresh limit lets through at once) against the allowed `at_most / per`: to the
    last start, or to `cut` (same clock) where the arm stopped waiting with some unstarted."""
    times = sorted(starts)
    most = most_in_window(times, int((per_ms - slack_ms) * 1e6))
    end = cut if cut is not None and len(times) < queued else (times[-1] if times else 0)
    span = (end - times[0]) / 1e9 if times else 0.0
    rows: list[dict[str, Any]] = [
        {"metric": "passes", "value": len(times), "unit": "count"},
        {"metric": "never_started", "value": queued - len(times), "unit": "count"},
        {"metric": "most_in_window", "value": most, "unit": "count"},
        {"metric": "overshoot", "value": max(0, most - at_most), "unit": "count"},
        {"metric": "ceiling_per_s", "value": at_most * 1000 / per_ms, "unit": "1/s"},
        {"metric": "per", "value": per_ms, "unit": "ms"},
        {"metric": "slack", "value": slack_ms, "unit": "ms"}]
    if span > 0:
        rate = max(0, len(times) - at_most) / span
        rows.append({"metric": "passes_per_s", "value": rate, "unit": "1/s"})
    return rows


def most_in_window(times: list[int], width: int) -> int:
    """The most of the sorted `times` in any half-open window `[t, t + width)`."""
    most = first = 0
    for last, at in enumerate(times):
        while times[first] <= at - width:
            first += 1
        most = max(most, last - first + 1)
    return most


def most_at_once(spans: list[tuple[int, int]]) -> int:
    """The most spans open at one moment (one ending as another begins counts as apart)."""
    moments = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in moments:
        now += step
        most = max(most, now)
    return most
