"""The command-line options `durability-api` and `durability-worker` share, and durations.

A duration is written as a number and a unit (`500ms`, `2s`, `5m`, `1h`, `2d`) or as plain
seconds (`1.5`), and must be positive, like every timing in the library.
"""

from __future__ import annotations

import argparse
import os
import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")


def duration(text: str) -> timedelta:
    """Parse `500ms`, `2s`, `5m`, `1h`, `2d` or plain seconds into a positive `timedelta`."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 500ms, 2s, 5m, 1h, 2d)")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive, got {text!r}")
    return timedelta(seconds=seconds)


def count(text: str) -> int:
    """A whole number, zero or more."""
    try:
        made = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if made < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, got {made}")
    return made


def positive_count(text: str) -> int:
    made = count(text)
    if made < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {made}")
    return made


def cron(text: str) -> str:
    """A cron expression, checked as a schedule would check it."""
    from datetime import UTC, datetime

    from durability.schedules import Cadence

    try:
        Cadence(text, None, "UTC", datetime.now(UTC))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser with the options both processes take."""
    made = argparse.ArgumentParser(prog=prog, description=description)
    made.add_argument(
        "--store",
        default=os.environ.get("DURABILITY_STORE", "memory://"),
        help="the store URL: memory://, redis://host:port/0?scheduler=stream|set,"
        " postgresql://..., sqlite:///path/to/file.db (default: $DURABILITY_STORE or memory://)",
    )
    made.add_argument(
        "--pool", type=positive_count, default=16, help="passes run at once (default 16)"
    )
    made.add_argument(
        "--lease",
        type=duration,
        default=timedelta(seconds=30),
        help="how long a worker's silence is tolerated before its workflow is taken over"
        " (default 30s)",
    )
    limit = os.environ.get("DURABILITY_GATEWAY_LIMIT")
    made.add_argument(
        "--gateway-limit",
        type=positive_count,
        default=None if limit is None else positive_count(limit),
        metavar="N",
        help="at most N passes that call the payment gateway at once, across every worker:"
        " the API's wakeups of paying orders, the worker's of refunds (a limit on the key"
        " 'payment-gateway'; give both processes the same N); default"
        " $DURABILITY_GATEWAY_LIMIT, else no limit",
    )
    made.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="default info",
    )
    return made


def add_worker_options(made: argparse.ArgumentParser) -> None:
    """The options that configure running workflows (the worker's, and the API's on memory)."""
    made.add_argument(
        "--tick",
        type=duration,
        default=timedelta(seconds=1),
        help="how often claims are renewed and abandoned work is looked for (default 1s)",
    )
    made.add_argument(
        "--grace",
        type=duration,
        default=timedelta(seconds=30),
        help="on SIGTERM or SIGINT, how long running passes get to finish before what is left"
        " is handed back (default 30s; a second signal hands it back at once)",
    )
    made.add_argument(
        "--attempts",
        type=positive_count,
        default=1,
        help="how many times a failing step is tried before its order fails (default 1)",
    )
    made.add_argument(
        "--backoff",
        type=duration,
        default=timedelta(seconds=1),
        help="the pause after the first failed attempt, doubling after each (default 1s)",
    )
    made.add_argument(
        "--settlement",
        type=duration,
        default=timedelta(days=2),
        help="the payout's settlement window (default 2d)",
    )
    made.add_argument(
        "--capture-delay",
        type=duration,
        default=None,
        help="make every capture take this long (to watch, or kill, a worker mid-payout)",
    )
    made.add_argument(
        "--declines",
        type=count,
        default=0,
        help="decline the first N captures, to watch an order fail and be retried (default 0)",
    )
    made.add_argument(
        "--nightly",
        type=cron,
        default=None,
        metavar="CRON",
        help="keep the schedule nightly-report on this cron expression, in UTC (e.g. '0 2 * * *')"
        " and fire it; without it the schedule is left as the store has it",
    )
    made.add_argument(
        "--effects-log",
        default=os.environ.get("DURABILITY_EFFECTS_LOG"),
        help="append one line per gateway or warehouse call to this file"
        " (default: $DURABILITY_EFFECTS_LOG)",
    )
