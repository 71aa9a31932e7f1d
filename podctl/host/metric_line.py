"""The one reader of the template's metric lines, and of any JSON a script writes.

The training template (templates/train_pjit.py) prints one JSON object per line on
process 0: `{"kind": "config", ...}`, `{"kind": "step", "step", "loss", "step_time_s",
"tokens_per_s", "mfu", ["compile": true]}`, `{"kind": "checkpoint", "step"}`,
`{"kind": "done", "step"}`, `{"kind": "preempted", "step"}`. Any script can print
anything, so a line is a metric record only when it is small, shallow, well-formed
and its fields have the types podctl computes with; every other line is text.

Standard library only, importing nothing from podctl: the host agent ships it in its
zip (launch.AGENT_MODULES) and reads the script's progress file with `loads_bounded`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

KINDS = ("config", "step", "checkpoint", "done", "preempted")
MAX_CHARS = 64 * 1024  # a template line is a few hundred characters; a config line a few K
MAX_DEPTH = 32  # the template nests 2 deep ("mesh"); json.loads recurses once per level
MAX_INT = 1 << 63  # larger ints overflow float() in the sums below

# The fields podctl computes with, by type. A field of the wrong type is dropped (the
# record stays, without it); a record missing one of its kind's REQUIRED fields is text.
_INTS = ("step", "start_step", "params", "devices", "processes", "batch", "seq_len",
         "slices", "full_slices", "micro_batches")  # the last three: an elastic run's
_NUMBERS = ("step_time_s", "tokens_per_s", "mfu", "t", "peak_flops_per_s", "wall_s",
            "save_s", "restore_s")
_LOSS = ("loss",)  # a number, NaN and infinity included: a diverged run says so
_BOOLS = ("compile",)
_TEXTS = ("mfu_note",)
_NAMES = ("platform",)  # a device platform ("cpu", "tpu"): a short plain word, as plots print it
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")
REQUIRED = {"step": ("step",), "checkpoint": ("step",), "preempted": ("step",)}


def too_deep(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """Whether TEXT's JSON nests more than MAX_DEPTH brackets deep (counted outside
    strings), checked before json.loads, which would recurse that deep."""
    if text.count("[") + text.count("{") <= max_depth:
        return False  # too few brackets to be too deep: no need to walk the text
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def loads_bounded(text: str, *, max_chars: int = MAX_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads for text a script wrote: ValueError (never RecursionError, nor a
    parse of megabytes) when TEXT is longer than MAX_CHARS, nests deeper than
    MAX_DEPTH, or is not JSON."""
    if len(text) > max_chars:
        raise ValueError(f"longer than {max_chars} characters")
    if too_deep(text, max_depth):
        raise ValueError(f"nested deeper than {max_depth}")
    try:
        return json.loads(text)
    except RecursionError as e:  # a smaller stack than expected: still only a bad line
        raise ValueError("nested too deep") from e


def _int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < MAX_INT
    return value if ok else None


def _number(value: Any, finite: bool = True) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and abs(value) >= MAX_INT:
        return None
    number = float(value)
    return number if math.isfinite(number) or not finite else None


def _checked(data: dict[str, Any]) -> dict[str, Any] | None:
    """DATA with its known fields type-checked (wrong ones dropped), or None when its
    kind is unknown or it lacks a required field."""
    kind = data.get("kind")
    if kind not in KINDS:
        return None
    record: dict[str, Any] = {}
    for key, value in data.items():
        if key in _INTS:
            value = _int(value)
        elif key in _NUMBERS:
            value = _number(value)
        elif key in _LOSS:
            value = _number(value, finite=False)
        elif key in _BOOLS:
            value = value if isinstance(value, bool) else None
        elif key in _TEXTS:
            value = value if isinstance(value, str) else None
        elif key in _NAMES:
            value = value if isinstance(value, str) and _NAME.fullmatch(value) else None
        if value is not None:
            record[key] = value
    if any(key not in record for key in REQUIRED.get(kind, ())):
        return None
    return record


def parse(line: str) -> dict[str, Any] | None:
    """LINE as a metric record (a dict whose "kind" is one of KINDS, its fields of the
    types above), or None: the line is text."""
    text = line.strip()
    if not text.startswith("{") or not text.endswith("}"):
        return None
    try:
        data = loads_bounded(text)
    except ValueError:
        return None
    return _checked(data) if isinstance(data, dict) else None


def parse_all(lines: list[str]) -> list[dict[str, Any]]:
    """The metric records among LINES, in order."""
    return [r for r in map(parse, lines) if r is not None]


def step_summary(record: dict[str, Any]) -> str:
    """A step record in a few words: "step 12, loss 2.3456, 41,000 tokens/s"."""
    parts = [f"step {record['step']}"]
    if "loss" in record:
        parts.append(f"loss {record['loss']:.4f}")
    if "tokens_per_s" in record:
        parts.append(f"{record['tokens_per_s']:,.0f} tokens/s")
    return ", ".join(parts)
