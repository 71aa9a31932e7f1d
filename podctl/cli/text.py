"""The one way podctl prints text that someone else wrote (a queue entry's name, a
script's name and output, a run record read from the bucket) to a person.

Such text must not move the cursor, clear or retitle the terminal, start a new line
(and so forge a row of a table, a host's line or a line of podctl's own), or turn the
rest of the line around (Unicode's bidirectional overrides, U+202E): every such
character is shown as an escape (ESC as \\x1b, U+202E as \\u202e) instead.
"""

from __future__ import annotations

import re

# C0 and C1 controls (tab apart: see `shown`), DEL, the line and paragraph separators,
# and the invisible format characters that reorder or hide text (bidi marks, embeddings,
# overrides and isolates; zero-width space; word joiner and invisible operators; BOM).
# The zero-width (non-)joiners stay: emoji and some scripts need them, and they move nothing.
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e"
                     "\u2060-\u2064\u2066-\u2069\ufeff]")
_UNSAFE_OR_TAB = re.compile(f"\t|{_UNSAFE.pattern}")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str, *, tabs: bool = False) -> str:
    """TEXT safe to print on a terminal, on one line. TABS: keep tabs (a script's own
    lines keep their layout); in a table's cell a tab is escaped too."""
    return (_UNSAFE if tabs else _UNSAFE_OR_TAB).sub(_escape, text)
