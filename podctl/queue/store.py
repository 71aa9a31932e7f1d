"""The queue's database: SQLite in the state dir (`queue.db`), WAL, mode 0600.

The schema is versioned with `PRAGMA user_version` and grown by the functions in
MIGRATIONS, one per version, each run once in its own transaction. A file that is
not a readable SQLite database, or one whose schema is newer than this podctl
knows, is refused with a clear error and never written to: the version is read
before anything (even the switch to WAL) could change the file.

Env values live here (the file is 0600, as the SSH key is); they leave the store
only towards the hosts' configs. `Entry.to_json()` lists their keys, never values.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from podctl.base.errors import NoSuchEntryError, QueueDatabaseError
from podctl.queue.entry import COLUMNS, STATES, TERMINAL, TIERS, Entry, decode, encode, stamped
from podctl.queue.interface import Quota
from podctl.queue.lock import QueueLock

__all__ = ["Store", "Entry", "STATES", "TERMINAL", "TIERS", "db_path", "DB_NAME"]

DB_NAME = "queue.db"
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _v1(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('token', ?)", (secrets.token_hex(3),))
    conn.execute("""CREATE TABLE entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, accelerator_type TEXT NOT NULL,
        project TEXT NOT NULL, zone TEXT NOT NULL, bucket TEXT NOT NULL, script TEXT NOT NULL,
        bundle_hash TEXT NOT NULL, args TEXT NOT NULL, env TEXT NOT NULL, priority INTEGER NOT NULL,
        tier TEXT NOT NULL, valid_for INTEGER, max_hours REAL, max_cost REAL,
        max_attempts INTEGER NOT NULL, state TEXT NOT NULL, attempt INTEGER NOT NULL,
        slice_name TEXT, run_id TEXT, operation TEXT, attempts TEXT NOT NULL,
        created REAL NOT NULL, updated REAL NOT NULL, started REAL, ended REAL,
        next_try_at REAL NOT NULL, backoff INTEGER NOT NULL, last_error TEXT, exit_code INTEGER,
        cost REAL)""")
    conn.execute("CREATE INDEX entries_state ON entries (state, priority DESC, id)")


def _v2(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE entries ADD COLUMN preflight TEXT")  # JSON, or NULL: none made


def _v3(conn: sqlite3.Connection) -> None:
    """Who and how much: each entry's owner and why it waits; quotas and teams."""
    conn.execute("ALTER TABLE entries ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
    conn.execute("ALTER TABLE entries ADD COLUMN waiting TEXT")
    conn.execute("CREATE TABLE quotas (name TEXT PRIMARY KEY, chip_hours_week REAL, max_chips INTEGER)")
    conn.execute("CREATE TABLE teams (member TEXT PRIMARY KEY, team TEXT NOT NULL)")


def _v4(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE entries ADD COLUMN via TEXT")  # `queue add --via`; NULL: the ticker's


def _v5(conn: sqlite3.Connection) -> None:
    """`queue add --num-slices K --elastic`: an old entry is one slice, not elastic."""
    conn.execute("ALTER TABLE entries ADD COLUMN num_slices INTEGER NOT NULL DEFAULT 1")
    conn.execute("ALTER TABLE entries ADD COLUMN elastic INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE entries ADD COLUMN min_slices INTEGER")
    conn.execute("ALTER TABLE entries ADD COLUMN grow_deadline REAL")


# version -> the function that brings a database from version-1 to it
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1, 2: _v2, 3: _v3, 4: _v4, 5: _v5}
SCHEMA_VERSION = max(MIGRATIONS)


def db_path(state_dir: Path) -> Path:
    return state_dir / DB_NAME


def _aside_advice() -> str:
    """Starting an empty queue forgets the slices the old one made: say so first."""
    return ("podctl leaves it as it is. Before moving it aside to start an empty queue, "
            "delete its slices (`podctl ls`: names q-TOKEN-ENTRY-ATTEMPT), which a new queue "
            "would never delete.")


def _disk_trouble(e: BaseException) -> bool:
    text = str(e).lower()
    return "disk is full" in text or "disk i/o error" in text or "no space" in text


def full_disk_message(path: Path, e: BaseException) -> str:
    return (f"the disk holding the queue database {path} is full ({e}); free some space and "
            "run the command again. Keep the database where it is: its entries own their slices.")


def _check_header(path: Path) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as e:
        raise QueueDatabaseError(f"cannot read the queue database {path} ({e}).") from e
    if head and head != _SQLITE_MAGIC:
        raise QueueDatabaseError(f"queue database {path} is not a SQLite database (corrupt?); "
                                 f"{_aside_advice()}")


class Store:
    def __init__(self, path: Path):
        self.path = path
        self.where = str(path)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.exists():
            _check_header(path)
        else:  # made 0600 before SQLite writes a byte (its -wal and -shm files follow its mode)
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)
        self.conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        try:
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise QueueDatabaseError(
                    f"queue database {path} has schema {version}; this podctl knows up to "
                    f"{SCHEMA_VERSION}: upgrade podctl.")
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the schema page
            if version < SCHEMA_VERSION:
                self._migrate(version)
            self.conn.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL cannot corrupt the file; a power cut may lose the last
            # commits, and a lost intent is re-derived from the world by the next tick.
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.token = self.conn.execute("SELECT value FROM meta WHERE key='token'").fetchone()[0]
        except sqlite3.DatabaseError as e:
            self.conn.close()
            if _disk_trouble(e):
                raise QueueDatabaseError(full_disk_message(path, e)) from e
            raise QueueDatabaseError(f"queue database {path} is unreadable ({e}); "
                                     f"{_aside_advice()}") from e
        except BaseException:
            self.conn.close()
            raise

    def _migrate(self, version: int) -> None:
        for target in range(version + 1, SCHEMA_VERSION + 1):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                # another process may have migrated while this one waited for the lock
                if self.conn.execute("PRAGMA user_version").fetchone()[0] >= target:
                    self.conn.execute("ROLLBACK")
                    continue
                MIGRATIONS[target](self.conn)
                self.conn.execute(f"PRAGMA user_version = {int(target)}")
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- entries -----------------------------------------------------------------

    @staticmethod
    def _row(row: sqlite3.Row) -> Entry:
        return decode({k: row[k] for k in row.keys()})  # noqa: SIM118 (a Row iterates its values)

    def tick_lock(self) -> QueueLock:
        return QueueLock(self.path.parent)

    def add(self, entry: Entry) -> Entry:
        now = time.time()
        entry.created = entry.updated = entry.created or now
        values = {k: encode(k, getattr(entry, k)) for k in COLUMNS if k != "id"}
        cursor = self.conn.execute(
            f"INSERT INTO entries ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
            list(values.values()))
        assert cursor.lastrowid is not None  # an INSERT sets it
        entry.id = cursor.lastrowid
        return entry

    def get(self, entry_id: int) -> Entry:
        if not 0 < entry_id < 2 ** 63:  # SQLite's INTEGER: a longer number is no entry's id
            raise NoSuchEntryError(f"no queue entry {entry_id}; `podctl queue ls` lists them.")
        row = self.conn.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise NoSuchEntryError(f"no queue entry {entry_id}; `podctl queue ls` lists them.")
        return self._row(row)

    def entries(self, states: Iterable[str] | None = None) -> list[Entry]:
        """By priority (highest first), then in the order they were added."""
        query, params = "SELECT * FROM entries", []
        if states is not None:
            states = list(states)
            query += f" WHERE state IN ({', '.join('?' * len(states))})"
            params = states
        rows = self.conn.execute(query + " ORDER BY priority DESC, id", params).fetchall()
        return [self._row(r) for r in rows]

    def update(self, entry: Entry, expect_state: str | None = None, **changes: Any) -> bool:
        """Write CHANGES to ENTRY (in memory too), only if its state in the database is
        still EXPECT_STATE (default: ENTRY's): False when another process moved it."""
        expect = expect_state or entry.state
        changes = stamped(changes)
        sets = ", ".join(f"{k} = ?" for k in changes)
        cursor = self.conn.execute(
            f"UPDATE entries SET {sets} WHERE id = ? AND state = ?",
            [encode(k, v) for k, v in changes.items()] + [entry.id, expect])
        if cursor.rowcount != 1:
            return False
        vars(entry).update(changes)
        return True

    def me(self, account: str) -> str:
        return account  # one machine's queue: the owner is who podctl works as

    def register_ticker(self) -> None:
        """Nothing to seal: the 0600 file is its one user's."""

    def history(self, entry_id: int) -> list[dict[str, Any]]:
        """None kept: one machine's queue has one user (a PostgreSQL queue records who)."""
        return []

    def import_entry(self, entry: Entry) -> Entry:
        """ENTRY as it is, its id included (`queue migrate`)."""
        values = {k: encode(k, getattr(entry, k)) for k in COLUMNS}
        self.conn.execute(f"INSERT INTO entries ({', '.join(values)}) VALUES "
                          f"({', '.join('?' * len(values))})", list(values.values()))
        return entry

    def set_token(self, token: str) -> None:
        self.conn.execute("UPDATE meta SET value = ? WHERE key = 'token'", (token,))
        self.token = token

    # ---- quotas and teams ------------------------------------------------------------

    def quotas(self) -> list[Quota]:
        rows = self.conn.execute("SELECT * FROM quotas ORDER BY name").fetchall()
        return [Quota(r["name"], r["chip_hours_week"], r["max_chips"]) for r in rows]

    def set_quota(self, quota: Quota) -> None:
        quota.check()
        if quota.chip_hours_week is None and quota.max_chips is None:
            self.conn.execute("DELETE FROM quotas WHERE name = ?", (quota.name,))
            return
        self.conn.execute("INSERT INTO quotas VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                          "chip_hours_week = excluded.chip_hours_week, max_chips = excluded.max_chips",
                          (quota.name, quota.chip_hours_week, quota.max_chips))

    def teams(self) -> dict[str, str]:
        return {r["member"]: r["team"] for r in self.conn.execute("SELECT * FROM teams")}

    def set_team(self, team: str, members: list[str]) -> None:
        """TEAM is exactly MEMBERS from now on (none: the team is no more)."""
        with self.batch():
            self.conn.execute("DELETE FROM teams WHERE team = ?", (team,))
            self.conn.executemany("INSERT INTO teams VALUES (?, ?) ON CONFLICT (member) DO UPDATE "
                                  "SET team = excluded.team", [(m, team) for m in members])

    @contextmanager
    def batch(self) -> Iterator[None]:
        """What runs inside is one transaction (the write lock taken at once); inside
        another batch, part of that one."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
