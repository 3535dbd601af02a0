"""`quoted`: a workflow id or a value as text a terminal or a page shows as it is.

Ids and recorded values are user data: a control character, a bidirectional override or a
quote in one must be seen, not obeyed or mistaken for the end of the text.
"""

from __future__ import annotations

__all__ = ["escaped", "quoted"]

_PLAIN_SPECIALS = frozenset("\"'\\")


def escaped(text: str, *, backslash: bool = True) -> str:
    """`text` with every character that is not printable (controls, format characters such as
    a bidirectional override, line and paragraph separators) written as a `\\u` escape, and a
    backslash doubled, so the result shows every character it stands for. JSON text keeps its
    backslashes (`backslash=False`): it has escaped its own, and a `\\u` escape is JSON's too."""
    out = []
    for character in text:
        if character == "\\" and backslash:
            out.append("\\\\")
        elif character.isprintable():
            out.append(character)
        else:
            point = ord(character)
            out.append(f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}")
    return "".join(out)


def quoted(text: str) -> str:
    """`text` as it is if it is plain (printable, no space, no quote or backslash), else in
    double quotes with its specials escaped: a script reading a table splits on spaces."""
    if text and text.isprintable() and not any(c.isspace() or c in _PLAIN_SPECIALS for c in text):
        return text
    return '"' + escaped(text).replace('"', '\\"') + '"'
