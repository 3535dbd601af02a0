"""The page's HTML, rendered on the server from `durability.operating`'s values. Every id, key
and value goes through `text` (or `href` for a link), which shows a character a browser would
act on or hide as an escape and escapes HTML's specials: what a workflow holds is data, never
markup."""

from __future__ import annotations

import base64
import binascii
import html
import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from urllib.parse import urlencode

from durability.operating import ACTIONS, Action, Detail, Overview
from durability.operating.shown import escaped
from durability.status import Status
from durability.values import STATES

__all__ = [
    "confirm",
    "dereference",
    "href",
    "layout",
    "lines",
    "overview",
    "problem",
    "reference",
    "result",
    "text",
    "workflow",
]


def text(value: str) -> str:
    """`value` as HTML text (or an attribute's value): escaped, invisible characters shown."""
    return html.escape(escaped(value), quote=True)


def lines(value: str) -> str:
    """`text` for text of many lines (a traceback): its line breaks kept as they are."""
    return "\n".join(text(line) for line in value.split("\n"))


def reference(workflow_id: str) -> str:
    """An id as a form carries it: base64url of its UTF-8, since a browser rewrites the line
    breaks of a field's value (and an id may hold any character but NUL)."""
    return base64.urlsafe_b64encode(workflow_id.encode()).decode()


def dereference(given: str) -> str:
    """The id a `reference` stands for (`ValueError` if it stands for none)."""
    try:
        return base64.urlsafe_b64decode(given.encode("ascii")).decode()
    except (UnicodeError, binascii.Error) as bad:
        raise ValueError("the form's workflow reference is not one this page made") from bad


def href(root: str, path: str, **params: str | None) -> str:
    """A link within the page, escaped for an attribute."""
    given = {name: value for name, value in params.items() if value}
    query = f"?{urlencode(given)}" if given else ""
    return html.escape(f"{root}{path}{query}", quote=True)


def _when(at: datetime | None) -> str:
    if at is None:
        return '<span class="muted">-</span>'
    return f'<time datetime="{at.isoformat()}">{at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]}</time>'


def _span(value: timedelta | None) -> str:
    if value is None:
        return "-"
    seconds = value.total_seconds()
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _state(state: str) -> str:
    return f'<span class="state {text(state)}">{text(state)}</span>'


#: A recorded value longer than this (as JSON) is folded: its start shown, the rest on a click.
FOLD = 160


def _value(value: object) -> str:
    shown = escaped(json.dumps(value, ensure_ascii=False, default=str), backslash=False)
    if len(shown) <= FOLD:
        return f"<pre>{html.escape(shown)}</pre>"
    return (
        f"<details><summary><code>{html.escape(shown[: FOLD - 40])}…</code>"
        f' <span class="muted">({len(shown)} characters)</span></summary>'
        f"<pre>{html.escape(shown)}</pre></details>"
    )


def layout(title: str, body: str, *, root: str, store: str, acting: bool) -> str:
    mode = "actions on" if acting else "read-only"
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>{text(title)} · durability</title>
<link rel="stylesheet" href="{href(root, "/style.css")}">
</head>
<body>
<header><a href="{href(root, "/")}">durability</a><span class="store">{text(store)}</span>
<span class="mode">{mode}</span></header>
<main>
{body}
</main>
</body>
</html>
"""


def _summary(found: Status) -> str:
    if found.failure is not None:
        failure = found.failure
        step = "" if failure.step is None else f" in step {text(failure.step)}"
        return f"{text(failure.type)}{step}: {text(failure.message)}"
    if found.until is not None:
        return f"until {_when(found.until)}"
    keys = sorted(found.waiting) + sorted(found.listening)
    if keys:
        return "waiting on " + ", ".join(f"<code>{text(key)}</code>" for key in keys)
    return ""


def overview(view: Overview, *, root: str) -> str:
    counts = view.counts
    cards = []
    for state in STATES:
        chosen = " chosen" if view.state == state else ""
        link = href(root, "/", state=state, prefix=view.prefix)
        cards.append(
            f'<a class="card{chosen}" href="{link}"><span class="n">{counts.get(state, 0)}</span>'
            f'<span class="what">{_state(state)}</span></a>'
        )
    every = sum(counts.values())
    chosen = " chosen" if view.state is None else ""
    cards.insert(
        0,
        f'<a class="card{chosen}" href="{href(root, "/", prefix=view.prefix)}">'
        f'<span class="n">{every}</span><span class="what">all workflows</span></a>',
    )
    if view.backlog is not None:
        cards.append(
            f'<div class="card queue"><span class="n">{view.backlog.ready}</span>'
            '<span class="what">ready in the queue</span></div>'
            f'<div class="card queue"><span class="n">{_span(view.backlog.oldest)}</span>'
            '<span class="what">oldest ready wait</span></div>'
        )
    options = "".join(
        f'<option value="{state}"{" selected" if view.state == state else ""}>{state}</option>'
        for state in STATES
    )
    search = f"""<form class="filter" method="get" action="{href(root, "/")}">
<select name="state" aria-label="state"><option value="">every state</option>{options}</select>
<input name="prefix" placeholder="id starts with…" aria-label="id prefix"
 value="{text(view.prefix or "")}">
<button type="submit">Search</button>
<a class="button quiet" href="{href(root, "/", format="json", state=view.state,
                                    prefix=view.prefix, after=view.after)}">JSON</a>
</form>"""
    rows = [
        f'<tr><td class="id"><a class="id" href="{href(root, "/workflow", id=s.workflow)}">'
        f"{text(s.workflow)}</a></td><td>{_state(s.state)}</td><td>{_when(s.at)}</td>"
        f"<td>{_summary(s)}</td></tr>"
        for s in view.page.statuses
    ]
    if rows:
        listed = (
            "<table><thead><tr><th>Workflow</th><th>State</th><th>Since</th><th>Detail</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        )
    else:
        listed = '<p class="empty">No workflow here.</p>'
    pager = []
    if view.after is not None:
        first = href(root, "/", state=view.state, prefix=view.prefix)
        pager.append(f'<a class="button quiet" href="{first}">« First page</a>')
    if view.page.after is not None:
        following = href(root, "/", state=view.state, prefix=view.prefix, after=view.page.after)
        pager.append(f'<a class="button" href="{following}" rel="next">Next page »</a>')
    shown = f"{len(view.page.statuses)} shown" + ("" if view.after is None else " (a later page)")
    pager.append(f'<span class="muted">{shown}</span>')
    heading = "Workflows" if view.state is None else f"Workflows {_state(view.state)}"
    return (
        f'<h1>{heading}</h1><section class="cards">{"".join(cards)}</section>{search}'
        f'{listed}<nav class="pager">{"".join(pager)}</nav>'
    )


def _actions(root: str, found: Status, acting: bool) -> str:
    if not acting:
        return ""
    offered: Iterable[Action] = (a for a in ACTIONS.values() if a.applies(found))
    buttons = [
        f'<a class="button{" danger" if action.lasting else ""}" '
        f'href="{href(root, "/confirm", action=action.name, id=found.workflow)}">'
        f"{text(action.title)}…</a>"
        for action in offered
    ]
    return f'<div class="actions">{"".join(buttons)}</div>' if buttons else ""


def workflow(seen: Detail, *, root: str, acting: bool) -> str:
    found = seen.status
    facts = [
        ("state", _state(found.state)),
        ("since", _when(found.at)),
        ("claim", "held by a live pass" if seen.held else "free"),
        ("retries", str(seen.retries)),
        ("failed attempts since the last retry", str(seen.attempts)),
    ]
    if found.until is not None:
        facts.append(("sleeps until", _when(found.until)))
    for name, keys in (("waiting on", found.waiting), ("listening on", found.listening)):
        if keys:
            facts.append((name, ", ".join(f"<code>{text(k)}</code>" for k in sorted(keys))))
    listed = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    failures = [
        f"<tr><td>{f.attempt}</td><td>{_when(f.at)}</td>"
        f"<td>{'-' if f.step is None else f'<code>{text(f.step)}</code>'}</td>"
        f"<td><strong>{text(f.type)}</strong>: {text(f.message)}"
        f"<details><summary>traceback</summary><pre>{lines(f.traceback)}</pre></details></td>"
        f"<td>{'failed for good' if f.retry_at is None else _when(f.retry_at)}</td></tr>"
        for f in seen.failures
    ]
    failed = (
        "<table><thead><tr><th>Attempt</th><th>At</th><th>Step</th><th>Error</th>"
        f"<th>Tried again</th></tr></thead><tbody>{''.join(failures)}</tbody></table>"
        if failures
        else '<p class="empty">No failure recorded.</p>'
    )
    records = [
        f"<tr><td>{n}</td><td>{_when(w.at)}</td><td><code>{text(w.key)}</code></td>"
        f"<td>{_value(w.value)}</td></tr>"
        for n, w in enumerate(seen.history, 1)
    ]
    recorded = (
        "<table><thead><tr><th>#</th><th>At</th><th>Key</th><th>Value</th></tr></thead>"
        f"<tbody>{''.join(records)}</tbody></table>"
        if records
        else '<p class="empty">No record.</p>'
    )
    json_link = href(root, "/workflow", id=found.workflow, format="json")
    return (
        f'<h1>Workflow <span class="id">{text(found.workflow)}</span></h1>'
        f'<dl class="facts">{listed}</dl>{_actions(root, found, acting)}'
        f"<h2>Failures</h2>{failed}<h2>Records, in order</h2>{recorded}"
        f'<p><a href="{json_link}">This workflow as JSON</a></p>'
    )


def confirm(action: Action, workflow_id: str, nonce: str, *, root: str) -> str:
    question = text(action.question).replace(
        text("{id}"), f'<code class="id">{text(workflow_id)}</code>'
    )
    back = href(root, "/workflow", id=workflow_id)
    kind = ' class="danger"' if action.lasting else ""
    return f"""<h1>{text(action.title)}?</h1>
<form class="confirm" method="post" action="{href(root, "/act")}">
<p>{question}</p>
<input type="hidden" name="action" value="{text(action.name)}">
<input type="hidden" name="ref" value="{reference(workflow_id)}">
<input type="hidden" name="nonce" value="{text(nonce)}">
<label for="token">Operator token</label>
<input id="token" name="token" type="password" autocomplete="off" required>
<p class="actions"><button type="submit"{kind}>{text(action.title)}</button>
<a class="button quiet" href="{back}">Cancel</a></p>
</form>"""


def result(title: str, said: str, good: bool, workflow_id: str, *, root: str) -> str:
    kind = "good" if good else "bad"
    back = href(root, "/workflow", id=workflow_id)
    return (
        f'<h1>{text(title)}</h1><div class="notice {kind}">{text(said)}</div>'
        f'<p><a class="button quiet" href="{back}">Back to the workflow</a> '
        f'<a class="button quiet" href="{href(root, "/")}">All workflows</a></p>'
    )


def problem(title: str, said: str, *, root: str) -> str:
    return (
        f'<h1>{text(title)}</h1><div class="notice bad">{text(said)}</div>'
        f'<p><a class="button quiet" href="{href(root, "/")}">All workflows</a></p>'
    )
