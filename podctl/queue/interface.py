"""What a queue store is: the narrow interface the tick, the CLI and `gc` use, with two
implementations that behave alike (the same tests run against both), chosen by the
queue URL's scheme in queue/stores/ (the registry):

    Store    (store.py)    SQLite in the state dir: one machine's queue, the default
    PgStore  (pgstore.py)  PostgreSQL at `queue_url`: a team's queue, ticked from anywhere

Every state change is a compare-and-set (`update(..., expect_state=)`), so two
processes that raced see one of them win; `tick_lock()` makes ticks take turns (a
flock on one machine; an advisory lock in PostgreSQL, which the server frees when the
holder's connection dies, SIGKILL included).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from podctl.queue.entry import Entry


@dataclass(frozen=True)
class Quota:
    """A user's or a team's share: chip-hours per rolling 7 days, chips at once."""

    name: str  # an owner (account) or a team
    chip_hours_week: float | None = None
    max_chips: int | None = None
    source: str = "queue"  # "queue" (`queue quota set`) or "podctl.toml"

    def check(self, where: str = "") -> Quota:
        """This quota when its numbers are finite and 0 or more (a NaN limit passes every
        comparison: it would lift the limit) and its name fits; else one line. WHERE names
        the source in that line (podctl.toml's table)."""
        from podctl.base.numbers import check_number
        from podctl.queue.entry import ACCOUNT_MOST, check_name

        check_name(self.name, f"quota NAME{where}", ACCOUNT_MOST)
        if self.chip_hours_week is not None:
            check_number(self.chip_hours_week, f"--chip-hours-week{where}", low=0)
        if self.max_chips is not None:
            check_number(self.max_chips, f"--max-chips{where}", whole=True, low=0)
        return self


class TickLock(Protocol):
    @property
    def path(self) -> Any: ...  # what a log line names: the lock file, or the database
    def acquire(self, wait: float = 0.0) -> bool: ...
    def release(self) -> None: ...
    def hold(self, wait: float, what: str) -> Any: ...


class QueueStore(Protocol):
    token: str  # six hex digits of this queue's own, in its slices' names and labels
    where: str  # the file or the database, for messages (no password)

    def add(self, entry: Entry) -> Entry: ...  # a PostgreSQL queue sets the owner itself
    def me(self, account: str) -> str: ...  # whom `add` makes the owner (ACCOUNT: podctl's own)
    def get(self, entry_id: int) -> Entry: ...
    def entries(self, states: Iterable[str] | None = None) -> list[Entry]: ...
    def update(self, entry: Entry, expect_state: str | None = None, **changes: Any) -> bool: ...
    # the entry's state changes and who made them, as the store recorded them (none in SQLite)
    def history(self, entry_id: int) -> list[dict[str, Any]]: ...
    def register_ticker(self) -> None: ...  # `queue tick`: its key for sealed --env (PostgreSQL)
    def tick_lock(self) -> TickLock: ...
    def quotas(self) -> list[Quota]: ...
    def set_quota(self, quota: Quota) -> None: ...
    def teams(self) -> dict[str, str]: ...  # member -> team
    def set_team(self, team: str, members: list[str]) -> None: ...
    def batch(self) -> AbstractContextManager[None]: ...  # all or nothing (`queue migrate`)
    def import_entry(self, entry: Entry) -> Entry: ...  # `queue migrate`: id and history kept
    def set_token(self, token: str) -> None: ...  # `queue migrate`: the slices keep their owner
    def close(self) -> None: ...
    def __enter__(self) -> QueueStore: ...
    def __exit__(self, *exc: object) -> None: ...
