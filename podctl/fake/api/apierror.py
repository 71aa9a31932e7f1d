"""Errors in Google's shape, timestamps, durations and paging for the fake API."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any, TypeVar

T = TypeVar("T")  # page(): whatever the list holds


class ApiError(Exception):
    """An error the fake API answers with, in Google's shape."""

    def __init__(self, http_status: int, status: str, message: str, details: list[Any] | None = None):
        super().__init__(message)
        self.http_status, self.status, self.message, self.details = (
            http_status, status, message, details,
        )


def invalid(message: str) -> ApiError:
    return ApiError(400, "INVALID_ARGUMENT", message)


def precondition(message: str) -> ApiError:
    return ApiError(400, "FAILED_PRECONDITION", message)


def not_found(name: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"Resource '{name}' was not found")


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_duration(text: str) -> float:
    """A protobuf JSON Duration ("3600s", "1.5s") -> seconds."""
    if not isinstance(text, str) or not text.endswith("s"):
        raise invalid(f"Invalid duration {text!r}: expected a string like '3600s'")
    try:
        return float(text[:-1])
    except ValueError as e:
        raise invalid(f"Invalid duration {text!r}") from e


def parse_timestamp(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError) as e:
        raise invalid(f"Invalid timestamp {text!r}") from e


def page(items: list[T], page_size: int, page_token: str) -> tuple[list[T], str]:
    """Google-style paging: an opaque token that resumes after the last item."""
    size = page_size if 0 < page_size <= 1000 else 50
    try:
        start = int(base64.urlsafe_b64decode(page_token.encode()).decode()) if page_token else 0
    except ValueError as e:
        raise invalid(f"Invalid page token {page_token!r}") from e
    chunk = items[start:start + size]
    more = start + size < len(items)
    return chunk, base64.urlsafe_b64encode(str(start + size).encode()).decode() if more else ""
