"""Which queue a queue command works on, shared by `queue add/ls/...` (queue_cmds.py) and
`queue quota/team/migrate` (queue_admin.py): the store of PODCTL_QUEUE_URL's or
podctl.toml's queue_url (queue/stores/), else SQLite in the state directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def state_dir() -> Path:
    from podctl.base import settings

    return settings.state_dir()


def opener() -> Any:
    """Opens the queue's store. The URL is checked now (a bad one: exit 2)."""
    from podctl.queue.place import open_store, queue_url
    from podctl.queue.stores import check_url

    url, where = queue_url(), state_dir()
    check_url(url)
    return lambda: open_store(where, url)


def open_queue() -> Any:
    return opener()()
