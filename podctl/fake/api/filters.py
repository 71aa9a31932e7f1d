"""`filter` and `orderBy` of the list calls that document them (acceleratorTypes.list,
runtimeVersions.list in tpu.v2.json), in the subset of AIP-160 / AIP-132 such
lists take: `field OP value` terms (OP one of = != : < > <= >=, a value bare or in
double quotes, `*` a wildcard in = and :), joined by AND / OR (AND binds tighter),
each perhaps negated by NOT or -; `orderBy` a comma list of `field [asc|desc]`.
Anything else, or a field the resource does not have, is 400 INVALID_ARGUMENT, as
Google refuses a malformed filter rather than ignore it."""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from podctl.fake.api.apierror import invalid

_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op><=|>=|!=|=|:|<|>)|(?P<word>[^\s"=!:<>]+))')
_OPS = {"=", "!=", ":", "<", ">", "<=", ">="}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        found = _TOKEN.match(text, pos)
        if not found or found.end() == pos:
            raise invalid(f"Invalid filter {text!r}: unexpected {text[pos:]!r}")
        kind = found.lastgroup or "word"
        value = found.group(kind)
        out.append((kind, value[1:-1].replace('\\"', '"') if kind == "str" else value))
        pos = found.end()
    return out


def _field(item: dict[str, Any], path: str, fields: set[str]) -> Any:
    if path.split(".")[0] not in fields:
        raise invalid(f"Invalid filter: unknown field {path!r}; known: {', '.join(sorted(fields))}")
    value: Any = item
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _compare(actual: Any, op: str, wanted: str) -> bool:
    if isinstance(actual, list):
        return any(_compare(a, op, wanted) for a in actual)
    text = "" if actual is None else str(actual)
    if op in {"=", ":"}:
        return fnmatch.fnmatchcase(text, wanted) if "*" in wanted else (
            text == wanted if op == "=" else wanted in text)
    if op == "!=":
        return text != wanted
    try:
        a, w = float(text), float(wanted)
    except ValueError:
        a, w = text, wanted  # type: ignore[assignment]
    return {"<": a < w, ">": a > w, "<=": a <= w, ">=": a >= w}[op]


def apply_filter(items: list[dict[str, Any]], text: str, fields: set[str]) -> list[dict[str, Any]]:
    if not text or not text.strip():
        return items
    tokens = _tokens(text)
    # parse into OR-groups of AND-terms: [[(negate, field, op, value), ...], ...]
    groups: list[list[tuple[bool, str, str, str]]] = [[]]
    i = 0
    while i < len(tokens):
        negate = False
        if tokens[i] == ("word", "NOT") or (tokens[i][0] == "word" and tokens[i][1].startswith("-")
                                            and len(tokens[i][1]) > 1):
            negate = True
            if tokens[i][1] == "NOT":
                i += 1
            else:
                tokens[i] = ("word", tokens[i][1][1:])
        if i + 2 >= len(tokens):
            raise invalid(f"Invalid filter {text!r}: expected FIELD OP VALUE")
        field, op, value = tokens[i], tokens[i + 1], tokens[i + 2]
        if field[0] != "word" or op[0] != "op" or op[1] not in _OPS or value[0] == "op":
            raise invalid(f"Invalid filter {text!r}: expected FIELD OP VALUE")
        groups[-1].append((negate, field[1], op[1], value[1]))
        i += 3
        if i < len(tokens):
            if tokens[i] == ("word", "AND"):
                i += 1
            elif tokens[i] == ("word", "OR"):
                groups.append([])
                i += 1
            else:
                raise invalid(f"Invalid filter {text!r}: expected AND or OR, got {tokens[i][1]!r}")
            if i >= len(tokens):
                raise invalid(f"Invalid filter {text!r}: ends after an operator")

    def keep(item: dict[str, Any]) -> bool:
        return any(all(_compare(_field(item, f, fields), op, v) != neg for neg, f, op, v in group)
                   for group in groups)

    return [item for item in items if keep(item)]


def apply_order(items: list[dict[str, Any]], text: str, fields: set[str]) -> list[dict[str, Any]]:
    if not text or not text.strip():
        return items
    keys = []
    for part in text.split(","):
        words = part.split()
        if not 1 <= len(words) <= 2 or (len(words) == 2 and words[1].lower() not in {"asc", "desc"}):
            raise invalid(f"Invalid order_by {text!r}: expected FIELD [asc|desc], ...")
        if words[0].split(".")[0] not in fields:
            raise invalid(f"Invalid order_by: unknown field {words[0]!r}")
        keys.append((words[0], len(words) == 2 and words[1].lower() == "desc"))
    for path, descending in reversed(keys):  # stable sorts, last key first
        items = sorted(items, key=lambda item: str(_field(item, path, fields) or ""), reverse=descending)
    return items
