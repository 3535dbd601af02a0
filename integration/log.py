"""Log lines a person can read and a machine can split: `key=value` pairs, one event a line.

    2025-01-01T12:00:00.123Z info  integration.worker event="pass ended" workflow=o-1 ...

Our own lines pass their fields as `extra={"fields": {...}}` (see `fields`); a library's
ordinary `%`-formatted message becomes `msg="..."`. Values with spaces or quotes are quoted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/+@,")


def _value(value: object) -> str:
    if isinstance(value, datetime):
        text = value.isoformat()
    elif isinstance(value, timedelta):
        text = f"{value.total_seconds():g}s"
    else:
        text = str(value)
    if text and all(char in _PLAIN for char in text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def fields(**values: object) -> dict[str, object]:
    """`extra=` for a log call carrying `values` as key=value pairs."""
    return {"fields": values}


class KeyValueFormatter(logging.Formatter):
    """Formats a record as `time level logger key=value ...`."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, UTC)
        stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        parts = [stamp, f"{record.levelname.lower():<5}", record.name]
        given = getattr(record, "fields", None)
        message = record.getMessage()
        if isinstance(given, Mapping):
            parts.append(f"event={_value(message)}")
            parts.extend(f"{key}={_value(value)}" for key, value in given.items())
        else:
            parts.append(f"msg={_value(message)}")
        if record.exc_info:
            error = record.exc_info[1]
            parts.append(f"error={_value(f'{type(error).__name__}: {error}')}")
            parts.append("\n" + self.formatException(record.exc_info))
        return " ".join(parts)


def configure(level: str) -> None:
    """Send every logger's lines to stderr as key=value at `level` (a name such as `info`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
