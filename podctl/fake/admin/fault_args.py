"""The arguments a fault of the fake takes (faults.py), each with its type's one check.

The same check runs twice: in `podctl fake inject`, on the text a user typed (a bad
value is one line and exit 2 before the daemon is asked), and in the admin API, on the
JSON a test or the CLI sent (a bad value is a 400 there). A check raises ValueError
with a message that names the argument by LABEL: `--grace`/`WORKER` in the CLI, the
JSON key in the admin API.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_COUNT = 10**9  # more calls, chips or workers than any test or slice has
MAX_SECONDS = 30 * 86400.0  # a month: longer than any outage, window or delay a test wants
REQUIRED = object()  # an Arg's default when it has none
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_UNITS = (86400, 3600, 60, 1)


@dataclass(frozen=True)
class Arg:
    """One argument of a fault: its JSON key, its type (KIND) and how the CLI spells it."""

    name: str  # JSON key and keyword of FakeAdmin's method
    kind: str  # node, worker, count, seconds, choice, chips, workers, text, factor, flag
    help: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()
    flag: str = ""  # the CLI option ("--grace"); empty: a positional argument
    metavar: str = ""

    @property
    def positional(self) -> bool:
        return not self.flag

    @property
    def label(self) -> str:
        """How the CLI names it in messages and usage: `--grace` or `WORKER`."""
        return self.flag or self.metavar or self.name.upper()

    def parse(self, value: Any, label: str | None = None) -> Any:
        """VALUE (text from the CLI, or JSON) checked and typed; ValueError if bad."""
        label = label or self.label
        if value is None and self.kind == "chips":
            return None  # JSON null: no limit, as `unlimited` in the CLI
        if value is None:
            if self.default is REQUIRED:
                raise ValueError(f"{label} is required")
            return self.default
        return _KINDS[self.kind](self, value, label)


def _whole(text: Any, label: str, most: int = MAX_COUNT) -> int:
    if isinstance(text, bool):
        text = str(text)
    if isinstance(text, int):
        text = str(text)
    text = str(text)
    # isascii: "²" is a digit to str.isdigit, not to int()
    if not (text.isascii() and text.isdigit()) or int(text) > most:
        raise ValueError(f"{label} must be a whole number from 0 to {most:,}, not {text[:40]!r}.")
    return int(text)


def seconds(value: Any, label: str) -> float:
    """A number of seconds ("2.5", 2.5) or a duration ("90s", "10m", "1h30m"), from 0 to
    MAX_SECONDS (a larger one, 1e308, overflows the clocks it is added to)."""
    bad = ValueError(f"{label} must be 0 or more seconds, at most 30 days (e.g. 2.5, 90s, 10m), "
                     f"not {value!r}.")
    if isinstance(value, bool):
        raise bad
    try:
        number = float(value)
    except (TypeError, ValueError):
        match = _DURATION.match(str(value).strip().lower())
        if not str(value).strip() or not match or not any(match.groups()):
            raise bad from None
        number = float(sum(int(n) * u for n, u in zip(match.groups(), _UNITS) if n))
    if not math.isfinite(number) or not 0 <= number <= MAX_SECONDS:
        raise bad
    return number


def _choice(arg: Arg, value: Any, label: str) -> str:
    text = str(value).upper().removeprefix("SIG") if arg.name == "signal" else str(value)
    if text not in arg.choices:
        options = (" or ".join(arg.choices) if len(arg.choices) == 2
                   else "one of " + ", ".join(arg.choices))
        raise ValueError(f"{label} must be {options}, not {value!r}.")
    return text


def _chips(arg: Arg, value: Any, label: str) -> int | None:
    if value == "unlimited":
        return None
    return _whole(value, f"{label} (or `unlimited`)")


def _workers(arg: Arg, value: Any, label: str) -> list[int]:
    items = value if isinstance(value, list) else [v for v in str(value).split(",") if v.strip()]
    if not items:
        raise ValueError(f"{label} must name one or more workers, e.g. 0 or 0,1.")
    return sorted({_whole(str(v).strip(), label) for v in items})


def _text(arg: Arg, value: Any, label: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{label} must be a non-empty name, not {value!r}.")
    return value


def _flag(arg: Arg, value: Any, label: str) -> bool:
    """An on/off switch: the CLI's flag gives a bool, JSON a bool (or yes/no text)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("yes", "true", "1", "on"):
        return True
    if text in ("no", "false", "0", "off", ""):
        return False
    raise ValueError(f"{label} is a switch (true or false), not {value!r}.")


def _factor(arg: Arg, value: Any, label: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or not 1 <= number <= 100:
        raise ValueError(f"{label} must be a number from 1 (full speed) to 100, not {value!r}.")
    return number


_KINDS: dict[str, Callable[[Arg, Any, str], Any]] = {
    "node": _text, "text": _text, "choice": _choice, "chips": _chips, "workers": _workers,
    "factor": _factor, "flag": _flag,
    "worker": lambda arg, value, label: _whole(value, label),
    "count": lambda arg, value, label: _whole(value, label),
    "seconds": lambda arg, value, label: seconds(value, label),
}
