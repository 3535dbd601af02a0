"""Who may act through the page. Actions are off unless the page is built with them on and a
token; a move then needs that token (compared in constant time) and, from a form, a nonce the
page issued for that very move (so a form another site forges carries none), and a request
whose `Origin` or `Sec-Fetch-Site` says it came from elsewhere is refused whatever it carries.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["LONGEST", "SHORTEST_TOKEN", "Guard"]

#: How long a confirmation page's nonce stays good, in seconds.
LONGEST = 3600
#: The shortest token the page accepts for actions: a guessable one would be no lock.
SHORTEST_TOKEN = 16


@dataclass(frozen=True, slots=True)
class Guard:
    """`token` is None when actions are off. `secret` signs nonces (a fresh one per process
    unless given: a restart voids the confirmation pages open)."""

    token: str | None = None
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < SHORTEST_TOKEN:
            raise ValueError(
                f"the actions token must be at least {SHORTEST_TOKEN} characters"
                f" (got {len(self.token)}); make one with: python -c 'import secrets;"
                " print(secrets.token_urlsafe())'"
            )

    @property
    def acting(self) -> bool:
        return self.token is not None

    def nonce(self, action: str, workflow: str, now: float | None = None) -> str:
        """A nonce good for `action` on `workflow` for `LONGEST` seconds."""
        issued = str(int(time.time() if now is None else now))
        return f"{issued}.{self._sign(action, workflow, issued)}"

    def _sign(self, action: str, workflow: str, issued: str) -> str:
        message = "\n".join((action, workflow, issued)).encode("utf-8", "surrogatepass")
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def nonce_holds(self, given: str, action: str, workflow: str) -> bool:
        issued, _, signature = given.partition(".")
        if not issued.isdigit() or not signature:
            return False
        if not 0 <= time.time() - int(issued) <= LONGEST:
            return False
        return hmac.compare_digest(signature, self._sign(action, workflow, issued))

    def token_holds(self, given: str | None) -> bool:
        if self.token is None or given is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self.token.encode())

    @staticmethod
    def same_site(headers: Mapping[str, str], scheme: str) -> bool:
        """Whether the browser says the request came from this page's own origin (a request
        that says nothing, as a script's does, is not refused here: it needs the token)."""
        fetched = headers.get("sec-fetch-site")
        if fetched is not None and fetched not in ("same-origin", "none"):
            return False
        origin = headers.get("origin")
        if origin is None:
            return True
        host = headers.get("host", "")
        return origin in (f"{scheme}://{host}",)
