"""The SQLite store (queue/store.py): one machine's queue, `queue.db` in the state dir."""

from __future__ import annotations

from pathlib import Path

from podctl.queue.interface import QueueStore


def check(url: str | None, name: str) -> None:
    """No URL to check: the state dir holds it."""


def open(url: str | None, state_dir: Path) -> QueueStore:  # noqa: A001 (the registry's verb)
    from podctl.queue.store import Store, db_path

    return Store(db_path(state_dir))
