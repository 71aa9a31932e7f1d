"""The queue's log: structlog, one JSON object per line without a terminal (cron,
pipes: for jq and log collectors), readable console lines on one. No colours,
spinners or control codes off a terminal. Env values are never given to the log:
entries are logged by id, name and state only (Entry's repr holds no env either).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO


def configure(stream: TextIO | None = None, tty: bool | None = None) -> Any:
    """A bound logger writing to STREAM (default stdout); TTY None: ask the stream."""
    import structlog

    stream = stream or sys.stdout
    tty = stream.isatty() if tty is None else tty
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if tty:
        renderer: Any = structlog.dev.ConsoleRenderer(colors=False)
    else:
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    structlog.configure(
        processors=[*shared, renderer],
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        wrapper_class=structlog.make_filtering_bound_logger(0),
        cache_logger_on_first_use=False,
    )
    return structlog.get_logger("podctl.queue")
