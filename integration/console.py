"""A workflow that reads its inbox turn by turn: input nobody can name in advance.

Each turn is one `receive` past a cursor the workflow carries itself (`heard[-1].key`; a
receive never returns empty, so the cursor needs no branch) and one step answering what was
heard. The turn's keys are numbered, so turn 3 means the same thing on every pass. A message
whose text is `bye` closes the console: its transcript is recorded under `closed` and the
workflow completes.

What is recorded for a read is the key of the last entry taken, a reference to immutable
entries, so replaying a turn costs no store round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from itertools import count

from durability import INBOX, Entry, Run, as_list, as_text

#: The text that closes a console.
BYE = "bye"


def said(entry: Entry) -> str:
    """The text of one inbox entry (the API delivers `{"text": ...}`)."""
    value = entry.value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return str(value["text"])
    return str(value)


def reply(turn: int, heard: list[Entry]) -> str:
    """The answer to one turn: a pure function of what was heard."""
    texts = [said(entry) for entry in heard]
    return f"turn {turn}: heard {len(texts)} message(s): " + " | ".join(texts)


async def console(run: Run) -> list[object]:
    """Answer every turn of messages until one says `bye`; return the transcript."""
    cursor: str | None = None
    answers: list[str] = []
    for turn in count():
        heard = await run.receive(f"heard:{turn}", after=cursor)
        cursor = heard[-1].key
        answers.append(await run.step(f"answer:{turn}", partial(reply, turn, heard), as_text))
        if any(said(entry).strip().lower() == BYE for entry in heard):
            return await run.step("closed", lambda: list(answers), as_list)
    raise AssertionError("unreachable: count() never ends")


def progress(records: Mapping[str, object]) -> str:
    """`closed` once a `bye` was answered, else `listening`."""
    return "closed" if "closed" in records else "listening"


def messages(records: Mapping[str, object]) -> int:
    """How many messages the inbox holds."""
    return sum(1 for key in records if key.startswith(INBOX))
