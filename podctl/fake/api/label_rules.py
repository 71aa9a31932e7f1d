"""Google Cloud's label rules (cloud.google.com/compute/docs/labeling-resources):
at most 64 labels; keys 1-63 characters, values 0-63, of lowercase letters
(international ones included), digits, underscores and dashes; a key starts with
a lowercase letter."""

from __future__ import annotations

import unicodedata

from podctl.fake.api.apierror import invalid

MAX_LABELS = 64


def _allowed(ch: str) -> bool:
    if ch in "_-" or ch.isdigit():
        return True
    category = unicodedata.category(ch)
    return category == "Ll" or category == "Lo"  # lowercase, or a letter with no case


def _lower_letter(ch: str) -> bool:
    return unicodedata.category(ch) in {"Ll", "Lo"}


def check(labels: object) -> None:
    if not isinstance(labels, dict):
        raise invalid("labels must be a map of strings")
    if len(labels) > MAX_LABELS:
        raise invalid(f"Too many labels: {len(labels)}; a resource takes at most {MAX_LABELS}")
    for key, value in labels.items():
        value = "" if value is None else str(value)
        if not (1 <= len(key) <= 63 and _lower_letter(key[0]) and all(map(_allowed, key))):
            raise invalid(f"Invalid label key {key!r}: 1-63 lowercase letters, digits, _ and -, "
                          "starting with a lowercase letter")
        if len(value) > 63 or not all(map(_allowed, value)):
            raise invalid(f"Invalid label value {value!r} for {key!r}: at most 63 lowercase "
                          "letters, digits, _ and -")
