"""The queue's stores behind one registry, chosen by the queue URL's scheme: the one
place that knows which stores there are. `queue_url` unset means SQLite.

    (no URL)              sqlite.py      one machine's queue (queue/store.py)
    postgresql://, postgres://   postgresql.py  a team's (queue/pgstore.py)

A store is a module with `check(url, name)` (a URL it can use, or ConfigError) and
`open(url, state_dir)` (a `QueueStore`, interface.py); a new one is that module and one
line in REGISTRY. The CLI, `queue migrate`, `gc` and the tick reach stores only through
`check_url` and `open_store` here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from podctl.base.errors import ConfigError
from podctl.queue.interface import QueueStore

LOCAL = ""  # the scheme of no URL: this machine's SQLite queue
# scheme(s) -> the module that opens them; imported only when its queue is used
REGISTRY: dict[tuple[str, ...], str] = {
    (LOCAL,): "podctl.queue.stores.sqlite",
    ("postgresql", "postgres"): "podctl.queue.stores.postgresql",
}


def scheme_of(url: str | None) -> str:
    return url.split("://", 1)[0].lower() if url and "://" in url else LOCAL if not url else "?"


def _module(url: str | None, name: str) -> ModuleType:
    scheme = scheme_of(url)
    for schemes, module in REGISTRY.items():
        if scheme in schemes:
            return importlib.import_module(module)
    known = ", ".join(f"{s}://" for schemes in REGISTRY for s in schemes if s)
    got = f"{scheme}://..." if scheme != "?" else "no URL"
    raise ConfigError(f"{name} must be a PostgreSQL URL, postgresql://USER@HOST:PORT/DATABASE "
                      f"(got {got}; the queue stores podctl knows: {known}).")


def check_url(url: str | None, name: str = "queue_url") -> None:
    """URL names a store podctl knows and that store can use it; else ConfigError (exit 2)."""
    _module(url, name).check(url, name)


def open_store(url: str | None, state_dir: Path) -> QueueStore:
    """The queue at URL (None: this machine's SQLite queue in STATE_DIR)."""
    store: QueueStore = _module(url, "queue_url").open(url, state_dir)
    return store
