"""The `durability` command: look at and act on the workflows of any store, by its URL.

Each subcommand is one call of `durability.operating`; the moves (`retry`, `cancel`, `delete`)
are made from its `ACTIONS` table, so a move added there is a subcommand here. The exit code is the
contract a script relies on (`EXIT`); the `--help` text says it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

from durability.command.render import acted, history, listing, status
from durability.connect import open_durable, unavailable
from durability.operating import ACTIONS, Missing, act, detail, overview
from durability.operating.actions import Done, Gone, Refused
from durability.status import Page
from durability.values import STATES

__all__ = ["EXIT", "main"]

#: Every exit code, by what it means.
EXIT = {
    "ok": 0,
    "usage": 1,  # bad arguments, a URL no store answers to, an id no store can hold
    "not found": 3,  # no such workflow
    "refused": 4,  # not in a state the move applies to, or held by a live pass: nothing changed
    "store down": 5,  # the store did not answer, or refused the connection
}

_CODES = "\n".join(f"  {code}  {meaning}" for meaning, code in EXIT.items())
_EPILOG = f"""The store is named by --url or the DURABILITY_URL environment variable:
  memory://, redis://host:6379/0?scheduler=stream|set, postgresql://user@host/db,
  sqlite:///path/to/file.db

exit codes:
{_CODES}
"""


class _Parser(argparse.ArgumentParser):
    """argparse, exiting with `EXIT["usage"]` rather than its own 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT["usage"], f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--url", help="the store's URL (default: $DURABILITY_URL)")
    common.add_argument("--json", action="store_true", help="print JSON rather than a table")
    top = _Parser(
        prog="durability",
        description="Look at and act on the workflows of a durability store.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            parents=[common],
            help=summary,
            description=summary,
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    command("status", "One workflow's status (exit 3 if there is none).").add_argument("id")
    listed = command("list", "Workflows in id order, a page at a time.")
    listed.add_argument("--state", choices=STATES, help="only workflows in this stored state")
    listed.add_argument("--prefix", help="only ids that start with this")
    listed.add_argument("--after", metavar="CURSOR", help="the page after this id (printed)")
    listed.add_argument("--limit", type=int, default=50, help="how many (1 to 1000, default 50)")
    command("history", "One workflow's records, in order, with their times.").add_argument("id")
    for action in ACTIONS.values():
        moved = command(action.name, action.question.format(id="ID"))
        moved.add_argument("id")
        if action.lasting:
            moved.add_argument("--yes", action="store_true", help="confirm: it cannot be undone")
    ui = command("ui", "Serve the operator's page (read-only unless --actions).")
    ui.add_argument("store", nargs="?", metavar="URL", help="the store's URL (or --url)")
    ui.add_argument("--host", default="127.0.0.1", help="where to listen (default: loopback)")
    ui.add_argument("--port", type=int, default=8321, help="the port (default 8321)")
    ui.add_argument(
        "--actions",
        action="store_true",
        help="offer retry, cancel and delete; each needs the token in $DURABILITY_UI_TOKEN",
    )
    return top


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run one command; return its exit code (`EXIT`)."""
    out = sys.stdout if out is None else out
    try:
        arguments = parser().parse_args(argv)
    except SystemExit as ended:  # --help, or a usage error (`_Parser.error`)
        return ended.code if isinstance(ended.code, int) else EXIT["usage"]
    url = getattr(arguments, "store", None) or arguments.url or os.environ.get("DURABILITY_URL")
    if not url:
        return _said("no store named: give --url or set DURABILITY_URL", "usage")
    if arguments.command == "ui":
        from durability.command.serving import serve

        return serve(url, arguments.host, arguments.port, arguments.actions)
    action = ACTIONS.get(arguments.command)
    if action is not None and action.lasting and not arguments.yes:
        return _said(f"{action.name} cannot be undone: add --yes to do it", "usage")
    try:
        return asyncio.run(_run(url, arguments, out))
    except Missing as missing:
        if arguments.json:
            print(json.dumps({"error": "not found", "workflow": missing.workflow}), file=out)
        return _said(str(missing), "not found")
    except (ValueError, TypeError) as bad:
        return _said(str(bad), "usage")
    except Exception as error:
        if unavailable(error):
            return _said(f"the store did not answer: {error}", "store down")
        raise


async def _run(url: str, arguments: argparse.Namespace, out: TextIO) -> int:
    shown = arguments.json
    async with open_durable(url) as durable:
        match arguments.command:
            case "status":
                found = (await detail(durable, arguments.id)).status
                print(json.dumps(found.to_json()) if shown else status(found), file=out)
            case "history":
                seen = await detail(durable, arguments.id)
                print(json.dumps(seen.to_json(), default=str) if shown else history(seen),
                      file=out)
            case "list":
                view = await overview(
                    durable,
                    state=arguments.state,
                    prefix=arguments.prefix,
                    after=arguments.after,
                    limit=arguments.limit,
                )
                page: Page = view.page
                if shown:
                    print(json.dumps({"workflows": [s.to_json() for s in page.statuses],
                                      "next": page.after}), file=out)
                else:
                    print(listing(page), file=out)
                    if page.after is not None:
                        print(f"more: --after {shlex.quote(page.after)}", file=sys.stderr)
            case name:
                result = await act(durable, name, arguments.id)
                print(acted(name, arguments.id, result, shown), file=out)
                match result:
                    case Done():
                        return EXIT["ok"]
                    case Refused():
                        return EXIT["refused"]
                    case Gone():
                        return EXIT["not found"]
    return EXIT["ok"]


def _said(message: str, meaning: str) -> int:
    print(f"durability: {message}", file=sys.stderr)
    return EXIT[meaning]
