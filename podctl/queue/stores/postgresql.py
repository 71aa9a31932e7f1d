"""The PostgreSQL store (queue/pgstore.py): a team's queue; the state dir keeps a
ticker's key for the sealed `--env` values."""

from __future__ import annotations

from pathlib import Path

from podctl.queue.interface import QueueStore


def check(url: str | None, name: str) -> None:
    from podctl.queue.pgstore import check_url

    check_url(url or "", name)


def open(url: str | None, state_dir: Path) -> QueueStore:  # noqa: A001 (the registry's verb)
    from podctl.queue.pgstore import PgStore

    return PgStore(url or "", key_dir=state_dir)
