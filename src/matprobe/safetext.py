"""Text from a profile or a manifest, made safe for where it is shown.

Names in a profile (op names, backends, shape keys) are the user's data, never
markup: on a terminal a name must not drive the terminal (ESC sequences) nor
forge a line; in Markdown it must not make table cells, code spans, links or
HTML. Every renderer passes such text through one of these.
"""

from __future__ import annotations

import re

#: C0 controls (ESC, newline, …), DEL and C1 controls: a terminal acts on them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

#: Characters Markdown (GFM tables, inline HTML, code spans, links) would act on.
_MD_ESCAPES = {
    "\\": "\\\\",
    "`": "\\`",
    "|": "\\|",
    "[": "\\[",
    "]": "\\]",
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
}

#: How a control character is shown: as Python writes it in a string literal.
_SHOWN = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def term_safe(text: str) -> str:
    """``text`` with every control character shown as ``\\n`` or ``\\xNN``: a name
    read from a profile can neither drive the terminal (ESC sequences) nor forge a
    line."""
    return _CONTROL.sub(lambda m: _SHOWN.get(m.group(), f"\\x{ord(m.group()):02x}"), text)


def md_safe(text: str) -> str:
    """``text`` as literal Markdown: line breaks become spaces, other controls
    ``\\xNN``, and ``| ` [ ] \\`` and ``< > &`` cannot make table cells, code,
    links or HTML."""
    text = term_safe(re.sub(r"[\r\n\t]+", " ", text))
    return "".join(_MD_ESCAPES.get(c, c) for c in text)
