"""Durations as users type them: 90s, 45m, 6h, 1h30m, 2d (or plain seconds)."""

from __future__ import annotations

import re

from podctl.base.errors import InvalidValueError

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"^(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")  # ASCII digits only


def parse_duration(text: str, option: str = "duration") -> int:
    """'1h30m' -> 5400 seconds; refuses empty, zero and malformed durations."""
    value = text.strip().lower()
    if value.isascii() and value.isdigit():
        seconds = int(value)
    else:
        match = _DURATION.match(value)
        if not value or not match or not any(match.groups()):
            raise InvalidValueError(f"{option}: {text!r} is not a duration; use e.g. 90m, 6h, 1h30m, 2d.")
        seconds = sum(int(n) * _UNITS[u] for n, u in zip(match.groups(), "dhms") if n)
    if seconds <= 0:
        raise InvalidValueError(f"{option}: {text!r} must be longer than zero.")
    return seconds


def format_duration(seconds: float) -> str:
    """5400 -> '1h30m'; short and exact enough for ages and waits."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2])
