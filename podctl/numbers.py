"""Numbers as people type and read them: counts (70B, 1.5e12, 1T), dollars, an MFU, a
price per chip-hour. Checked and formatted here, once, for every caller: the CLI shows
them (it reaches nothing below the steps), cost.py and the planner compute with them."""

from __future__ import annotations

import math
import re

from podctl.errors import InvalidValueError

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
