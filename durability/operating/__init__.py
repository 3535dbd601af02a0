"""What an operator sees of a store and may do to it, for the `durability` command and the
operator's page alike: the two differ in how they show it, never in what they ask the store.

| module | owns |
|---|---|
| `views` | the overview (counts, backlog, a page of workflows) and one workflow in detail |
| `actions` | the moves that change a workflow (`retry`, `delete`), one table entry each |
| `shown` | an id or a value as text a terminal or a page shows as it is |
"""

from durability.operating.actions import ACTIONS, Acted, Action, Done, Gone, Refused, act
from durability.operating.shown import quoted
from durability.operating.views import Detail, Missing, Overview, detail, overview

__all__ = [
    "ACTIONS",
    "Acted",
    "Action",
    "Detail",
    "Done",
    "Gone",
    "Missing",
    "Overview",
    "Refused",
    "act",
    "detail",
    "overview",
    "quoted",
]
