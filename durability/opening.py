"""`Opening`: a store URL on its way to a `Durable`, and what every store's opener checks of it.

`durability.connect.open_durable` checks the arguments and the URL's text, then hands an
`Opening` to the opener its scheme names; each store package parses its own options (its
`url` module). What they share sits here, below the stores, so a store imports it and never
`connect`: the refusal of an unknown or repeated option, the call bound, the password kept
out of messages.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Collection
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durability.checks import positive
from durability.interfaces import Durable

__all__ = [
    "CALL_TIMEOUT",
    "CONNECT_TIMEOUT",
    "Opener",
    "Opening",
    "check_text",
    "shown",
]

#: How long `open_durable` waits for a store's first answer by default.
CONNECT_TIMEOUT = timedelta(seconds=10)

#: How long one store call waits for its answer by default (`call_timeout_ms`); a blocking
#: read waits its own block first.
CALL_TIMEOUT = timedelta(seconds=10)


@dataclass(frozen=True, slots=True)
class Opening:
    """What `open_durable` was asked, checked: the URL (its text already refused if a parser
    would misread it) and the settings every store takes."""

    url: str
    lease: timedelta
    poll: timedelta | None
    housekeeping: bool
    connect_timeout: timedelta

    @property
    def shown(self) -> str:
        """The URL without its password, for messages."""
        return shown(self.url)

    def options(
        self, ours: tuple[str, ...], driver: Collection[str] = (), whose: str = ""
    ) -> tuple[dict[str, str], str]:
        """Split the URL's query into our options and the query left for the driver.

        Raises `ValueError` for an option given twice (drivers silently keep one of them) and
        for one that is neither ours nor in `driver` (a typo would otherwise be ignored, or
        surface as a driver's `TypeError`, or as a connection that never succeeds).
        """
        pairs = parse_qsl(urlsplit(self.url).query, keep_blank_values=True)
        counts = Counter(name for name, _ in pairs)
        repeated = sorted(name for name, count in counts.items() if count > 1)
        if repeated:
            raise ValueError(
                f"option(s) {repeated} given more than once in store URL {self.shown!r};"
                " give each option once"
            )
        unknown = sorted(name for name in counts if name not in ours and name not in driver)
        if unknown:
            allowed = f"{', '.join(ours)}"
            if driver:
                allowed += f"; and {whose}'s: {', '.join(sorted(driver))}"
            raise ValueError(
                f"unknown option(s) {unknown} in store URL {self.shown!r}; allowed: {allowed}"
            )
        mine = {name: value for name, value in pairs if name in ours}
        return mine, urlencode([(name, value) for name, value in pairs if name not in ours])

    def rebuilt(self, query: str) -> str:
        """The URL with `query` as its query, keeping the `//` of an empty host (`urlunsplit`
        drops it, and libpq cannot read `postgresql:/db`)."""
        parts = urlsplit(self.url)
        text = f"{parts.scheme}://{parts.netloc}{parts.path}"
        return f"{text}?{query}" if query else text

    def milliseconds(self, text: str, name: str) -> timedelta:
        """A URL option that is a positive number of milliseconds, or a `ValueError` naming
        it."""
        try:
            value = timedelta(milliseconds=float(text))
        except (ValueError, OverflowError):
            raise ValueError(
                f"{name} must be a number of milliseconds, got {text!r} in {self.url!r}"
            ) from None
        return positive(name, value)

    def call_timeout(self, ours: dict[str, str]) -> timedelta:
        """`call_timeout_ms` of the URL's options, or `CALL_TIMEOUT`."""
        given = ours.get("call_timeout_ms")
        return CALL_TIMEOUT if given is None else self.milliseconds(given, "call_timeout_ms")

    def switch(
        self, ours: dict[str, str], name: str, message: str, default: str = "on"
    ) -> bool:
        """An `on`/`off` option (`default` unless given), or a `ValueError` saying
        `message`."""
        value = ours.get(name, default)
        if value not in ("on", "off"):
            raise ValueError(message)
        return value == "on"


class Opener(Protocol):
    """What a store's URL module offers `open_durable`: from an `Opening` to the open store,
    closed when the block ends. Every setting is refused (`ValueError`, by name) before
    anything connects; a store that does not answer is `StoreUnavailable`."""

    def __call__(self, opening: Opening) -> AbstractAsyncContextManager[Durable]: ...


def shown(url: str) -> str:
    """`url` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))


def check_text(url: str) -> None:
    """Refuse what the URL parser would silently drop or keep: spaces around the URL (it strips
    them, and tabs and newlines anywhere), other control characters, and a `#` (what follows
    it is a fragment, which no store reads: `sqlite:///a#b.db` would open `/a`)."""
    if not isinstance(url, str):
        raise TypeError(f"a store URL must be a str, not {type(url).__name__}")
    if url != url.strip():
        raise ValueError(
            f"store URL {shown(url.strip())!r} begins or ends with a space, tab or newline;"
            " remove it"
        )
    for character in url:
        if unicodedata.category(character) == "Cc":
            raise ValueError(
                f"store URL {shown(url)!r} holds the control character {character!r};"
                " percent-encode it if it is meant"
            )
    if "#" in url:
        raise ValueError(
            f"store URL {shown(url)!r} holds '#', which would end it there: no store takes a"
            " fragment"
        )
