"""`durability ui`: the operator's page served by uvicorn, on loopback unless told otherwise,
read-only unless `--actions` (whose token comes from the environment, never the command line,
where any user of the machine could read it)."""

from __future__ import annotations

import ipaddress
import os
import sys

__all__ = ["TOKEN_VARIABLE", "serve"]

#: Where `--actions` reads its token.
TOKEN_VARIABLE = "DURABILITY_UI_TOKEN"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(url: str, host: str, port: int, actions: bool) -> int:
    """Serve the page until interrupted; the exit code `durability.command.EXIT` names."""
    from durability.web import OperatorPage

    token = os.environ.get(TOKEN_VARIABLE) if actions else None
    if actions and not token:
        print(f"durability: --actions needs a token in ${TOKEN_VARIABLE}", file=sys.stderr)
        return 1
    try:
        page = OperatorPage(url=url, token=token)
    except ValueError as bad:
        print(f"durability: {bad}", file=sys.stderr)
        return 1
    try:
        import uvicorn
    except ImportError:
        print("durability: the page needs uvicorn: pip install 'durability[ui]'", file=sys.stderr)
        return 1
    if not _loopback(host):
        print(
            f"durability: listening on {host}, beyond this machine: anyone who can reach it"
            " reads every workflow",
            file=sys.stderr,
        )
    mode = "with actions" if token else "read-only"
    print(f"durability: the page for {page.store} on http://{host}:{port}/ ({mode})",
          file=sys.stderr)
    uvicorn.run(page, host=host, port=port, log_level="warning", lifespan="on")
    return 0
