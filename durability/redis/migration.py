"""`move_checkpoints`: bring workflows written before namespaces under one.

Before namespaces, a workflow's keys were `workflow:{<id>}`, `workflow:{<id>}:pass` and
`workflow:{<id>}:order` whatever the application; now they are the same names behind
`<ns>:` (see checkpointer.py). Queue keys (`{<ns>}:...`) always carried the namespace and do
not move. Each workflow moves in one script (`move.lua`, three `RENAME`s on the workflow's own
slot, keeping the expiry), so no workflow is ever half here and half there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from durability.redis.checkpointer import workflow_keys, workflow_tag
from durability.redis.lua import script
from durability.redis.namespace import DEFAULT, check_namespace, text

__all__ = ["LEGACY", "Moved", "move_checkpoints"]

#: The SCAN pattern of the keys checkpointers wrote before namespaces.
LEGACY = "workflow:{*"
_LEGACY_KEY = re.compile(r"^workflow:\{([^{}]+)\}(?::pass|:order)?$")


@dataclass(frozen=True, slots=True)
class Moved:
    """What `move_checkpoints` did: workflows moved, and workflows left because the namespace
    already held keys of the same id."""

    workflows: int
    conflicts: tuple[str, ...]


async def move_checkpoints(redis: Any, namespace: str = DEFAULT, *, count: int = 1000) -> Moved:
    """Rename every `workflow:{<id>}...` key on `redis` (a client or a cluster client) to its
    name under `namespace`. Idempotent: a second run finds nothing left to move.

    Run it once per application with its workers and API stopped (a process still on the old
    version would go on writing the old names), then start the new version. A workflow whose
    new keys already exist (written by the new version meanwhile) is left where it is and
    named in `Moved.conflicts`. The same move by hand in `redis-cli`, per workflow:
    `RENAME workflow:{ID} NS:workflow:{ID}` and the same for `:pass` and `:order`."""
    check_namespace(namespace)
    move = script(redis, "move")
    moved = 0
    conflicts: dict[str, None] = {}
    async for name in redis.scan_iter(match=LEGACY, count=count):
        found = _LEGACY_KEY.match(text(name))
        if found is None:
            continue  # a key of somebody else's that happens to start alike
        workflow = found.group(1)
        old = f"workflow:{workflow_tag(workflow)}"
        # Each of a workflow's keys is found on its own; after the first, nothing is left to
        # move and the script answers 0 (cheaper than remembering every id seen).
        keys = [old, f"{old}:pass", f"{old}:order", *workflow_keys(workflow, namespace)]
        reply = int(await move(keys=keys))
        if reply > 0:
            moved += 1
        elif reply < 0:
            conflicts[workflow] = None
    return Moved(moved, tuple(conflicts))
