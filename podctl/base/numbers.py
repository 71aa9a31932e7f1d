"""Numbers as people type and read them: counts (70B, 1.5e12, 1T), dollars, an MFU, a
price per chip-hour, and every plain number an option takes (`parse_number`: digits 0-9
only, finite, in the option's range). Checked and formatted here, once, for every caller:
the CLI shows them (it reaches nothing below the steps), money/cost.py and the planner compute
with them, the queue stores them."""

from __future__ import annotations

import math
import re

from podctl.base.errors import InvalidValueError

# Python's int() and float() read more than people mean: other scripts' digits ('１６', '٣'),
# underscores ('1_0'), 'nan' and 'inf' (a NaN limit passes every comparison: it lifts the
# limit). A number podctl reads is ASCII digits, one point and an exponent, and finite.
_WHOLE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?", re.ASCII)
# What a whole number may be: the queue stores it in a 64-bit column (SQLite's INTEGER,
# PostgreSQL's bigint); beyond it the database would refuse it in its own words.
WHOLE_LOWEST, WHOLE_HIGHEST = -(2 ** 63), 2 ** 63 - 1

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = re.compile(r"^(-?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)([kmbgt]?)$")


def parse_count(text: str, option: str) -> float:
    """'70B', '7b', '1T', '1.5e12', '500M', '1_000' -> a positive number."""
    value = text.strip().lower().replace("_", "").replace(",", "")
    match = _NUMBER.match(value)
    if not match:
        raise InvalidValueError(f"{option} {text!r}: expected a number like 70B, 1.5e12, 500M or 1T.")
    number = float(match[1]) * _SUFFIX[match[2]]
    if math.isinf(number):
        raise InvalidValueError(f"{option} {text!r} is too large to compute with (above 1e308).")
    if not number > 0:
        raise InvalidValueError(f"{option} {text!r} must be above zero.")
    return number


def plain_number(text: str, whole: bool = False) -> float | int | None:
    """The finite number TEXT writes in ASCII ('3', '-2', '0.5', '1e3'; WHOLE: an integer
    of any size), else None."""
    value = text.strip().lower()
    if whole:
        return int(value) if _WHOLE.fullmatch(value) else None
    if not _DECIMAL.fullmatch(value):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def parse_number(text: str, option: str, *, whole: bool = False, low: float | None = None,
                 high: float | None = None, above: float | None = None) -> float | int:
    """An option's number: TEXT as `plain_number` reads it, in `check_number`'s range."""
    number = plain_number(text, whole)
    if number is None:
        kind = "a whole number" if whole else "a finite number"
        raise InvalidValueError(f"{option} {text!r}: expected {kind} in digits 0-9 "
                                f"(e.g. {option} {_example(whole, low, above)}).")
    wrong = _out_of_range(number, whole, low, high, above)
    if wrong:
        raise InvalidValueError(f"{option} {text.strip()}: {wrong}.")
    return number


def check_number(number: float | int, option: str, *, whole: bool = False,
                 low: float | None = None, high: float | None = None,
                 above: float | None = None) -> float | int:
    """NUMBER when it is finite and in range: at least LOW, at most HIGH, more than ABOVE
    (a whole one also within 64 bits); else one line that says the range. For values that
    come as numbers already (the API, podctl.toml, the queue), as for those typed."""
    wrong = _out_of_range(number, whole, low, high, above)
    if wrong:
        raise InvalidValueError(f"{option} {number!r}: {wrong}.")
    return number


def _out_of_range(number: float | int, whole: bool, low: float | None, high: float | None,
                  above: float | None) -> str | None:
    """What is wrong with NUMBER in words (the bound it fails), or None."""
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
        return "give a finite number"
    if whole and number != int(number):
        return "give a whole number"
    if above is not None and not number > above:
        return f"give a number above {above:g}"
    if low is not None and not number >= low:
        return f"give a number from {low:g} to {high:g}" if high is not None else f"give {low:g} or more"
    if high is not None and not number <= high:
        return f"give a number from {low:g} to {high:g}" if low is not None else f"give at most {high:g}"
    if whole and not WHOLE_LOWEST <= number <= WHOLE_HIGHEST:
        lowest = WHOLE_LOWEST if low is None else int(low)
        return f"give a whole number from {lowest} to {WHOLE_HIGHEST} (the largest 64-bit one)"
    return None


def _example(whole: bool, low: float | None, above: float | None) -> str:
    if above is not None:
        return f"{above + 1:g}"
    start = low if low is not None else 0
    return str(int(start)) if whole else f"{start:g}"


def parse_hosts_text(text: str, option: str = "--hosts") -> set[int] | None:
    """'all' -> None; '0' or '0,3' -> {0, 3} (which hosts a slice has is the caller's
    check); an empty list, or anything but ASCII host numbers, is refused."""
    if text.strip().lower() == "all":
        return None
    parts = [part.strip() for part in text.split(",")]
    if not all(_WHOLE.fullmatch(part) and not part.startswith(("-", "+")) for part in parts):
        raise InvalidValueError(f"{option} {text!r}: expected all, or host numbers like 0,3.")
    return {int(part) for part in parts}


def check_mfu(mfu: float, where: str = "--mfu") -> float:
    if not (math.isfinite(mfu) and 0 < mfu <= 1):
        raise InvalidValueError(f"{where} {mfu}: MFU is a fraction of peak in (0, 1], e.g. 0.45.")
    return mfu


def check_price(value: float | None, option: str = "--price") -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InvalidValueError(f"{option} {value}: a price is US dollars per chip-hour above 0 "
                                "(e.g. 4.20).")
    return value


def fmt_usd(usd: float | None) -> str:
    """$1,234.56, or ? when unknown."""
    return "?" if usd is None else f"${usd:,.2f}"


def fmt_count(number: float) -> str:
    """70e9 -> '70B', 1.5e12 -> '1.5T', 500e6 -> '500M' (parse_count's inverse)."""
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if number >= size:
            return f"{number / size:.4g}{suffix}"
    return f"{number:.4g}"
