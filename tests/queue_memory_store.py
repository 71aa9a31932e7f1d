"""A stand-in queue store for tests/unit/test_queue_stores.py: the queue in this
process's memory, at `memory://NAME`. It is what a new store must be to join podctl:
this one module (check + open, and a class answering interface.QueueStore) and one line
in podctl/queue/stores/REGISTRY."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podctl.base.errors import ConfigError, NoSuchEntryError, QueueBusyError
from podctl.queue.entry import Entry, stamped
from podctl.queue.interface import QueueStore, Quota


@dataclass
class _Queue:
    token: str
    entries: dict[int, Entry] = field(default_factory=dict)
    quotas: dict[str, Quota] = field(default_factory=dict)
    teams: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


QUEUES: dict[str, _Queue] = {}


def check(url: str | None, name: str) -> None:
    if not (url or "").removeprefix("memory://"):
        raise ConfigError(f"{name} must name its memory queue: memory://NAME.")


def open(url: str | None, state_dir: Path) -> QueueStore:  # noqa: A001 (the registry's verb)
    assert url
    return MemoryStore(url)


class _Lock:
    def __init__(self, queue: _Queue, where: str):
        self.queue, self.path, self.held = queue, f"{where} (lock)", False

    def acquire(self, wait: float = 0.0) -> bool:
        self.held = self.queue.lock.acquire(timeout=wait) if wait else self.queue.lock.acquire(False)
        return self.held

    def release(self) -> None:
        if self.held:
            self.queue.lock.release()
            self.held = False

    def hold(self, wait: float, what: str) -> _Lock:
        if not self.acquire(wait):
            raise QueueBusyError(f"a tick holds the queue; try {what} again in a moment.")
        return self

    def __enter__(self) -> _Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class MemoryStore:
    def __init__(self, url: str):
        self.where = url
        self.queue = QUEUES.setdefault(url, _Queue(token="abc123"))
        self.token = self.queue.token

    def add(self, entry: Entry) -> Entry:
        entry.id = max(self.queue.entries, default=0) + 1
        self.queue.entries[entry.id] = copy.deepcopy(entry)
        return entry

    def me(self, account: str) -> str:
        return account

    def get(self, entry_id: int) -> Entry:
        if entry_id not in self.queue.entries:
            raise NoSuchEntryError(f"no queue entry {entry_id}; `podctl queue ls` lists them.")
        return copy.deepcopy(self.queue.entries[entry_id])

    def entries(self, states: Iterable[str] | None = None) -> list[Entry]:
        wanted = None if states is None else set(states)
        return [copy.deepcopy(e) for e in sorted(self.queue.entries.values(), key=lambda e: (-e.priority, e.id))
                if wanted is None or e.state in wanted]

    def update(self, entry: Entry, expect_state: str | None = None, **changes: Any) -> bool:
        stored = self.queue.entries.get(entry.id)
        if stored is None or stored.state != (expect_state or entry.state):
            return False
        changes = stamped(changes)
        vars(stored).update(copy.deepcopy(changes))
        vars(entry).update(changes)
        return True

    def history(self, entry_id: int) -> list[dict[str, Any]]:
        return []

    def register_ticker(self) -> None:
        pass

    def tick_lock(self) -> _Lock:
        return _Lock(self.queue, self.where)

    def quotas(self) -> list[Quota]:
        return sorted(self.queue.quotas.values(), key=lambda q: q.name)

    def set_quota(self, quota: Quota) -> None:
        quota.check()
        if quota.chip_hours_week is None and quota.max_chips is None:
            self.queue.quotas.pop(quota.name, None)
        else:
            self.queue.quotas[quota.name] = quota

    def teams(self) -> dict[str, str]:
        return dict(self.queue.teams)

    def set_team(self, team: str, members: list[str]) -> None:
        self.queue.teams = {m: t for m, t in self.queue.teams.items() if t != team}
        self.queue.teams.update({m: team for m in members})

    @contextmanager
    def batch(self) -> Iterator[None]:
        saved = copy.deepcopy((self.queue.entries, self.queue.quotas, self.queue.teams, self.queue.token))
        try:
            yield
        except BaseException:
            self.queue.entries, self.queue.quotas, self.queue.teams, self.queue.token = saved
            raise

    def import_entry(self, entry: Entry) -> Entry:
        self.queue.entries[entry.id] = copy.deepcopy(entry)
        return entry

    def set_token(self, token: str) -> None:
        self.queue.token = self.token = token

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
