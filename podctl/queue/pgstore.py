"""The queue in PostgreSQL (`queue_url = "postgresql://..."`): a team's one queue, which
any number of `podctl queue tick` on any number of machines work on as one.

Its tables live in their own schema, `podctl`, so the queue can share a database:

    podctl.meta     key/value: the queue's token, the schema version
    podctl.entries  one row per entry (the columns of queue/entry.py's Entry)
    podctl.quotas   chip-hours per week and chips at once, per owner or team
    podctl.teams    member -> team
    podctl.events   every state change of an entry, and the role that made it
    podctl.ticker_keys  the tickers' public keys, which `--env` values are sealed to

Who may do what is the database's (schema 2, pg_roles.py): an entry's owner is the role
that connected, row-level security keeps a user to its own entries, quotas and teams
need podctl_admin; `--env` values are sealed to the tickers' keys (sealing.py).

Concurrency is the database's:
  - every statement runs in its own transaction (autocommit), and every state change
    is one compare-and-set UPDATE (`WHERE id = .. AND state = ..`): of two ticks that
    raced, one moves the entry and the other sees it moved;
  - ticks take turns through a session advisory lock (`pg_try_advisory_lock`), which
    the server frees when the holder's connection ends; a SIGKILLed tick's lock is
    gone as soon as the kernel closes its socket, and `idle_session_timeout` frees one
    whose machine vanished without closing it;
  - a slice is asked for under a deterministic name after its intent is committed, so
    a second create of one attempt is refused by the TPU API and adopted (the cloud
    call's idempotency key is the name).
Schema changes run under a transaction-level advisory lock, once, however many podctl
processes start at the same moment.

psycopg's errors are translated here: a server that cannot be reached (or refuses the
login) is QueueUnreachableError, anything else the database says QueueDatabaseError;
the URL's password never appears in either.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from podctl.base.errors import (
    ConfigError,
    NoSuchEntryError,
    QueueDatabaseError,
    QueueDeniedError,
    QueueError,
    QueueUnreachableError,
)
from podctl.queue import pg_roles, sealing
from podctl.queue.entry import COLUMNS, Entry, decode, encode, stamped
from podctl.queue.interface import Quota

SCHEME = ("postgresql://", "postgres://")
TICK_LOCK_KEY = 0x706F64_7469636B  # "podtick": the one tick lock of the queue in this database
MIGRATE_LOCK_KEY = 0x706F64_6D696772  # "podmigr"
# A tick's connection idle this long (its machine gone without a FIN) is closed by the
# server, freeing the tick lock; a live tick is never idle for a tenth of it.
IDLE_SESSION_TIMEOUT = "10min"
CONNECT_TIMEOUT = 10  # seconds


def _v1(cur: Any) -> None:
    cur.execute("CREATE TABLE podctl.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    cur.execute("INSERT INTO podctl.meta VALUES ('token', %s)", (secrets.token_hex(3),))
    cur.execute("""CREATE TABLE podctl.entries (
        id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, accelerator_type TEXT NOT NULL,
        project TEXT NOT NULL, zone TEXT NOT NULL, bucket TEXT NOT NULL, script TEXT NOT NULL,
        bundle_hash TEXT NOT NULL, args TEXT NOT NULL, env TEXT NOT NULL, priority BIGINT NOT NULL,
        tier TEXT NOT NULL, valid_for BIGINT, max_hours DOUBLE PRECISION,
        max_cost DOUBLE PRECISION, max_attempts BIGINT NOT NULL, state TEXT NOT NULL,
        attempt BIGINT NOT NULL, slice_name TEXT, run_id TEXT, operation TEXT,
        attempts TEXT NOT NULL, created DOUBLE PRECISION NOT NULL,
        updated DOUBLE PRECISION NOT NULL, started DOUBLE PRECISION, ended DOUBLE PRECISION,
        next_try_at DOUBLE PRECISION NOT NULL, backoff BIGINT NOT NULL, last_error TEXT,
        exit_code BIGINT, cost DOUBLE PRECISION, preflight TEXT,
        owner TEXT NOT NULL DEFAULT '', waiting TEXT)""")
    cur.execute("CREATE INDEX entries_state ON podctl.entries (state, priority DESC, id)")
    cur.execute("CREATE TABLE podctl.quotas (name TEXT PRIMARY KEY, "
                "chip_hours_week DOUBLE PRECISION, max_chips BIGINT)")
    cur.execute("CREATE TABLE podctl.teams (member TEXT PRIMARY KEY, team TEXT NOT NULL)")


MIGRATIONS: dict[int, Callable[[Any], None]] = {1: _v1, 2: pg_roles.v2, 3: pg_roles.v3, 4: pg_roles.v4}
SCHEMA_VERSION = max(MIGRATIONS)


def _driver() -> Any:
    """psycopg, or a ConfigError that says how to get it (it is an extra of podctl's)."""
    try:
        import psycopg
        import psycopg.conninfo
        import psycopg.errors
        import psycopg.rows
    except ImportError as e:
        raise ConfigError(f"a PostgreSQL queue needs psycopg 3 ({e}): pip install 'podctl[postgres]' "
                          "on every machine that uses the queue.") from None
    return psycopg


def shown_url(url: str) -> str:
    """URL without its password, for messages: postgresql://USER@HOST:PORT/DB."""
    conninfo_to_dict = _driver().conninfo.conninfo_to_dict

    try:
        parts = conninfo_to_dict(url)
    except Exception:  # noqa: BLE001 (an unparseable URL is shown as its scheme alone)
        return url.split("://", 1)[0] + "://..."
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = str(parts.get("host") or "localhost")
    if host.startswith("/"):
        host = f"[{host}]"  # a Unix socket directory
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname') or ''}"


def check_url(url: str, name: str = "queue_url") -> None:
    """A URL psycopg can use, or ConfigError (exit 2) saying what one looks like."""
    if not url.startswith(SCHEME):
        raise ConfigError(f"{name} must be a PostgreSQL URL, postgresql://USER@HOST:PORT/DATABASE "
                          f"(got {url.split('://', 1)[0] + '://...' if '://' in url else 'no URL'}).")
    conninfo_to_dict = _driver().conninfo.conninfo_to_dict
    try:
        conninfo_to_dict(url)
    except Exception as e:  # psycopg.ProgrammingError; its text may quote the password
        raise ConfigError(f"{name} is not a valid PostgreSQL URL ({type(e).__name__}); write it as "
                          "postgresql://USER@HOST:PORT/DATABASE (password in ~/.pgpass or "
                          "PGPASSWORD).") from None


class PgStore:
    def __init__(self, url: str, key_dir: Path | None = None):
        """KEY_DIR: the state dir, where a ticker's key for sealed `--env` values lives."""
        check_url(url)
        psycopg = self._psycopg = _driver()
        self.url, self.where, self.key_dir = url, shown_url(url), key_dir
        try:
            self.conn = psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row,
                                        connect_timeout=CONNECT_TIMEOUT, application_name="podctl")
        except psycopg.Error as e:
            raise QueueUnreachableError(
                f"cannot reach the queue database {self.where}: {_first_line(e)}. Check queue_url "
                "(or PODCTL_QUEUE_URL), the network path to it and the credentials.") from None
        try:
            with self._errors():
                self.conn.execute(f"SET idle_session_timeout = '{IDLE_SESSION_TIMEOUT}'")
                self._migrate()
                row = self._one("SELECT value FROM podctl.meta WHERE key = 'token'")
                assert row is not None  # the first migration writes it
                self.token = row["value"]
                me = self._one("SELECT session_user AS role, podctl.is_admin() AS admin, "
                               "podctl.is_ticker() AS ticker")
                assert me is not None
                self.role: str = me["role"]
                self.admin, self.ticker = me["admin"], me["ticker"]
            self._key = sealing.load_key(key_dir) if self.ticker else None
        except BaseException:
            self.conn.close()
            raise

    # ---- plumbing ----------------------------------------------------------------------

    @contextmanager
    def _errors(self) -> Iterator[None]:
        psycopg = self._psycopg
        try:
            yield
        except QueueError:
            raise
        except psycopg.OperationalError as e:  # the connection, the server going away
            raise QueueUnreachableError(
                f"lost the queue database {self.where}: {_first_line(e)}; run the command again "
                "(`queue tick --loop` carries on by itself).") from None
        except psycopg.errors.InsufficientPrivilege as e:  # the roles of pg_roles.py
            who = getattr(self, "role", None)
            raise QueueDeniedError(
                f"the queue database {self.where} refused{f' role {who}' if who else ''}: "
                f"{_first_line(e)}. Quotas, teams and others' entries need {pg_roles.ADMIN} "
                "(docs/guides/queue.md, \"Who may do what\").") from None
        except psycopg.Error as e:
            raise QueueDatabaseError(f"the queue database {self.where} refused: {_first_line(e)}") from None

    def _all(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        with self._errors():
            rows: list[dict[str, Any]] = self.conn.execute(sql, list(params)).fetchall()
            return rows

    def _one(self, sql: str, params: Iterable[Any] = ()) -> dict[str, Any] | None:
        with self._errors():
            row: dict[str, Any] | None = self.conn.execute(sql, list(params)).fetchone()
            return row

    def _run(self, sql: str, params: Iterable[Any] = ()) -> int:
        with self._errors():
            count: int = self.conn.execute(sql, list(params)).rowcount
            return count

    def _version(self) -> int:
        found = self.conn.execute("SELECT to_regclass('podctl.meta') AS t").fetchone()
        if found is None or found["t"] is None:
            return 0
        row = self.conn.execute("SELECT value FROM podctl.meta WHERE key = 'schema'").fetchone()
        return int(row["value"]) if row else 1

    def _migrate(self) -> None:
        if self._version() >= SCHEMA_VERSION:  # current or newer: a plain user makes no schema
            self._refuse_newer(self._version())
            return
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK_KEY,))
            self.conn.execute("CREATE SCHEMA IF NOT EXISTS podctl")
            version = self._version()
            self._refuse_newer(version)
            for target in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[target](self.conn)
            if version < SCHEMA_VERSION:
                self.conn.execute("INSERT INTO podctl.meta VALUES ('schema', %s) ON CONFLICT (key) "
                                  "DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise QueueDatabaseError(f"the queue database {self.where} has schema {version}; "
                                     f"this podctl knows up to {SCHEMA_VERSION}: upgrade podctl.")

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tick_lock(self) -> AdvisoryLock:
        return AdvisoryLock(self)

    # ---- entries -------------------------------------------------------------------------

    def add(self, entry: Entry) -> Entry:
        """The owner is the database's (the role that connected), never ENTRY's own."""
        entry.created = entry.updated = entry.created or time.time()
        values = {k: encode(k, getattr(entry, k)) for k in COLUMNS if k not in ("id", "owner")}
        values["env"] = self._sealed(entry.env)
        row = self._one(f"INSERT INTO podctl.entries ({', '.join(values)}) VALUES "
                        f"({', '.join(['%s'] * len(values))}) RETURNING id, owner", values.values())
        assert row is not None  # RETURNING gives the row
        entry.id, entry.owner = row["id"], row["owner"]
        return entry

    def import_entry(self, entry: Entry) -> Entry:
        """`queue migrate` (an admin's): the entry's id and owner are kept."""
        values = {k: encode(k, getattr(entry, k)) for k in COLUMNS}
        values["env"] = self._sealed(entry.env)
        self._run(f"INSERT INTO podctl.entries ({', '.join(values)}) VALUES "
                  f"({', '.join(['%s'] * len(values))})", values.values())
        # the next new entry's id comes after the imported ones
        self._one("SELECT setval(pg_get_serial_sequence('podctl.entries', 'id'), "
                  "(SELECT max(id) FROM podctl.entries))")
        return entry

    # ---- sealed env values (sealing.py) ------------------------------------------------------

    def register_ticker(self) -> None:
        """This machine's ticker key (made in the state dir at the first use) joins the
        keys that new entries' `--env` values are sealed to. A ticker or an admin only."""
        if self.key_dir is None or not self.ticker:
            return
        self._key = sealing.load_or_make_key(self.key_dir)
        public = sealing.public_b64(self._key)
        self._run("INSERT INTO podctl.ticker_keys (key_id, public_key) VALUES (%s, %s) "
                  "ON CONFLICT (key_id) DO NOTHING", (sealing.key_id(public), public))

    def _sealed(self, env: dict[str, str]) -> str:
        if not env:
            return json.dumps({})  # what encode("env", {}) keeps
        keys = [r["public_key"] for r in self._all("SELECT public_key FROM podctl.ticker_keys ORDER BY key_id")]
        if not keys and self.ticker:  # one role that adds and ticks: this machine is the ticker
            self.register_ticker()
            keys = [r["public_key"] for r in self._all("SELECT public_key FROM podctl.ticker_keys")]
        if not keys:
            raise QueueError(f"no ticker of the queue {self.where} has registered its key yet, and "
                             "--env values are sealed to the tickers' keys: run `podctl queue tick` "
                             f"once as the ticker role ({pg_roles.TICKER}), then add again.")
        return sealing.seal(env, keys)

    def _decode(self, row: dict[str, Any]) -> Entry:
        env = row.get("env")
        data = None if env is None else json.loads(env)
        entry = decode({**row, "env": "{}"})
        if isinstance(data, dict) and sealing.is_sealed(data):
            if self._key is None and self.ticker:  # made since this store opened
                self._key = sealing.load_key(self.key_dir)
            entry.env = sealing.open_env(data, self._key)
        elif data is not None:
            entry.env = data  # schema 1's plain values, from before sealing
        return entry

    def set_token(self, token: str) -> None:
        self._run("UPDATE podctl.meta SET value = %s WHERE key = 'token'", (token,))
        self.token = token

    def get(self, entry_id: int) -> Entry:
        row = (self._one("SELECT * FROM podctl.entries WHERE id = %s", (entry_id,))
               if 0 < entry_id < 2 ** 63 else None)
        if row is None:  # row-level security: another's entry is none to this role
            mine = "" if self.ticker else f" of role {self.role}'s"
            raise NoSuchEntryError(f"no queue entry {entry_id}{mine}; `podctl queue ls` lists them.")
        return self._decode(row)

    def me(self, account: str) -> str:
        return self.role  # the database's: the role that connected

    def history(self, entry_id: int) -> list[dict[str, Any]]:
        """The entry's state changes as the database recorded them: when, who, from, to."""
        return self._all("SELECT extract(epoch FROM at)::float8 AS at, actor, from_state, to_state, "
                         "reason FROM podctl.events WHERE entry = %s ORDER BY id", (entry_id,))

    def entries(self, states: Iterable[str] | None = None) -> list[Entry]:
        """By priority (highest first), then in the order they were added."""
        if states is None:
            rows = self._all("SELECT * FROM podctl.entries ORDER BY priority DESC, id")
        else:
            rows = self._all("SELECT * FROM podctl.entries WHERE state = ANY(%s) "
                             "ORDER BY priority DESC, id", (list(states),))
        return [self._decode(r) for r in rows]

    def update(self, entry: Entry, expect_state: str | None = None, **changes: Any) -> bool:
        """Write CHANGES to ENTRY (in memory too), only if its state in the database is
        still EXPECT_STATE (default: ENTRY's): False when another process moved it."""
        expect = expect_state or entry.state
        changes = stamped(changes)
        sets = ", ".join(f"{k} = %s" for k in changes)
        count = self._run(f"UPDATE podctl.entries SET {sets} WHERE id = %s AND state = %s",
                          [encode(k, v) for k, v in changes.items()] + [entry.id, expect])
        if count != 1:
            return False
        vars(entry).update(changes)
        return True

    # ---- quotas and teams ------------------------------------------------------------------

    def quotas(self) -> list[Quota]:
        return [Quota(r["name"], r["chip_hours_week"], r["max_chips"])
                for r in self._all("SELECT * FROM podctl.quotas ORDER BY name")]

    def set_quota(self, quota: Quota) -> None:
        quota.check()
        if quota.chip_hours_week is None and quota.max_chips is None:
            self._run("DELETE FROM podctl.quotas WHERE name = %s", (quota.name,))
            return
        self._run("INSERT INTO podctl.quotas VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE SET "
                  "chip_hours_week = excluded.chip_hours_week, max_chips = excluded.max_chips",
                  (quota.name, quota.chip_hours_week, quota.max_chips))

    def teams(self) -> dict[str, str]:
        return {r["member"]: r["team"] for r in self._all("SELECT * FROM podctl.teams")}

    @contextmanager
    def batch(self) -> Iterator[None]:
        """What runs inside is one transaction (nested: a savepoint of the outer one)."""
        with self._errors(), self.conn.transaction():
            yield

    def set_team(self, team: str, members: list[str]) -> None:
        with self._errors(), self.conn.transaction():
            self.conn.execute("DELETE FROM podctl.teams WHERE team = %s", (team,))
            for member in members:
                self.conn.execute("INSERT INTO podctl.teams VALUES (%s, %s) ON CONFLICT (member) "
                                  "DO UPDATE SET team = excluded.team", (member, team))


class AdvisoryLock:
    """The queue's tick lock: a session advisory lock on the store's own connection, so
    that it ends with the connection (the process dying, the network failing)."""

    def __init__(self, store: PgStore):
        self.store = store
        self.held = False

    def acquire(self, wait: float = 0.0) -> bool:
        deadline = time.monotonic() + wait
        while True:
            row = self.store._one("SELECT pg_try_advisory_lock(%s) AS got", (TICK_LOCK_KEY,))
            if row is not None and row["got"]:
                self.held = True
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def release(self) -> None:
        if self.held and not self.store.conn.closed:
            try:
                self.store._one("SELECT pg_advisory_unlock(%s)", (TICK_LOCK_KEY,))
            except QueueUnreachableError:
                pass  # the connection is gone, and the lock with it
        self.held = False

    def hold(self, wait: float, what: str) -> AdvisoryLock:
        from podctl.base.errors import QueueBusyError

        if not self.acquire(wait):
            raise QueueBusyError(f"a `podctl queue tick` holds the queue in {self.store.where} (more "
                                 f"than {wait:g} s); try {what} again in a moment.")
        return self

    @property
    def path(self) -> str:  # what a log line names, as the flock's path
        return f"{self.store.where} (advisory lock)"

    def __enter__(self) -> AdvisoryLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
