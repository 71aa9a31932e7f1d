"""The two queue stores behave alike (SQLite, and a real PostgreSQL): compare-and-set
updates, one tick at a time with the lock freed by a SIGKILL, quotas and teams; and
PostgreSQL's own failures said in one line, its password never shown."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from podctl.errors import ConfigError, NoSuchEntryError, QueueDatabaseError, QueueUnreachableError
from podctl.queue.entry import Entry
from podctl.queue.interface import Quota
from podctl.queue.place import open_store
from podctl.queue.shares import WEEK, Ledger, Shares


@pytest.fixture(params=["sqlite", "postgresql"])
def opener(request, tmp_path):
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    return lambda: open_store(tmp_path / "state", url)


def _entry(owner: str = "alice", **fields) -> Entry:
    return Entry(id=0, name="job", accelerator_type=fields.pop("accelerator_type", "v5p-8"),
                 project="p", zone="us-central1-a", bucket="b", script="train.py",
                 bundle_hash="0" * 64, owner=owner, env={"TOKEN": "secret"}, **fields)


def test_entries_round_trip_and_a_stale_update_loses(opener):
    with opener() as a, opener() as b:
        e = a.add(_entry(args=["--steps", "5"], attempts=[{"attempt": 1, "slice": "s"}]))
        assert len(a.token) == 6 and a.token == b.token
        seen = b.get(e.id)
        assert (seen.owner, seen.args, seen.env, seen.attempts) == (
            "alice", ["--steps", "5"], {"TOKEN": "secret"}, [{"attempt": 1, "slice": "s"}])
        assert a.update(e, state="provisioning", attempt=1)
        # B still believes it pending: its move is refused, and its copy is left as it was
        assert not b.update(seen, state="provisioning", attempt=2)
        assert seen.attempt == 0 and a.get(e.id).attempt == 1
        with pytest.raises(NoSuchEntryError):
            a.get(e.id + 1000)
        with pytest.raises(NoSuchEntryError):
            a.get(2 ** 70)


def test_entries_come_highest_priority_first_then_in_order(opener):
    with opener() as store:
        ids = [store.add(_entry(priority=p)).id for p in (0, 100, 0, -100)]
        assert [e.id for e in store.entries()] == [ids[1], ids[0], ids[2], ids[3]]
        assert [e.id for e in store.entries(["pending"])] == [ids[1], ids[0], ids[2], ids[3]]
        assert store.entries(["running"]) == []


def test_one_tick_lock_at_a_time(opener):
    with opener() as a, opener() as b:
        first, second = a.tick_lock(), b.tick_lock()
        assert first.acquire()
        assert not second.acquire(wait=0.3)
        first.release()
        assert second.acquire()
        second.release()


def test_a_killed_holders_lock_is_free_at_once(opener, tmp_path):
    """A tick SIGKILLed while it holds the lock: the kernel drops the flock, the
    server the advisory lock, as soon as the process is gone."""
    with opener() as store:
        url = getattr(store, "url", None)
    holder = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from podctl.queue.place import open_store
        store = open_store(Path({str(tmp_path / 'state')!r}), {url!r})
        assert store.tick_lock().acquire()
        print("held", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parents[1])
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with opener() as store:
            assert not store.tick_lock().acquire()
            proc.kill()
            proc.wait(timeout=10)
            assert store.tick_lock().acquire(wait=10)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_quotas_and_teams_are_set_replaced_and_cleared(opener):
    with opener() as store:
        store.set_quota(Quota("alice", 100.0, 8))
        store.set_quota(Quota("research", None, 64))
        store.set_quota(Quota("alice", 50.0, None))  # replaced whole
        assert store.quotas() == [Quota("alice", 50.0, None), Quota("research", None, 64)]
        store.set_quota(Quota("research"))  # neither limit: cleared
        assert store.quotas() == [Quota("alice", 50.0, None)]
        store.set_team("research", ["alice", "bob"])
        store.set_team("infra", ["carol", "bob"])  # bob moves
        assert store.teams() == {"alice": "research", "bob": "infra", "carol": "infra"}
        store.set_team("research", [])
        assert store.teams() == {"bob": "infra", "carol": "infra"}


def test_a_sqlite_queue_of_the_last_schema_is_grown_in_place_its_entries_kept(tmp_path):
    import sqlite3

    from podctl.queue import store as sqlite_store

    path = tmp_path / "queue.db"
    with sqlite3.connect(path) as conn:  # a queue.db as the podctl before owners left it
        for version in (1, 2):
            sqlite_store.MIGRATIONS[version](conn)
        conn.execute("PRAGMA user_version = 2")
        conn.execute("INSERT INTO entries (name, accelerator_type, project, zone, bucket, script, "
                     "bundle_hash, args, env, priority, tier, max_attempts, state, attempt, attempts, "
                     "created, updated, next_try_at, backoff) VALUES ('old', 'v5p-8', 'p', 'z', 'b', "
                     "'t.py', 'h', '[]', '{}', 0, 'on-demand', 3, 'running', 1, '[]', 1, 1, 0, 0)")
    with sqlite_store.Store(path) as store:
        (old,) = store.entries()
        assert (old.name, old.state, old.owner, old.waiting) == ("old", "running", "", None)
        store.set_quota(Quota("alice", 1.0, 4))
        assert store.quotas() == [Quota("alice", 1.0, 4)]


def test_a_postgresql_queue_from_a_newer_podctl_is_refused(pg_url):
    import psycopg

    open_store(Path("/nonexistent"), pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE podctl.meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(QueueDatabaseError, match="schema 99; this podctl knows up to 1: upgrade podctl"):
        open_store(Path("/nonexistent"), pg_url)


def test_many_processes_opening_a_new_postgresql_queue_at_once_make_one_schema(pg_url):
    code = (f"from podctl.queue.pgstore import PgStore\n"
            f"s = PgStore({pg_url!r}); print(s.token); s.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    tokens = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert [p.returncode for p in procs] == [0] * 4
    assert len(tokens) == 1 and len(tokens.pop()) == 6


@pytest.mark.parametrize("url, error, words", [
    ("mysql://db/queue", ConfigError, "must be a PostgreSQL URL"),
    ("postgresql://u:hunter2@h/db?sslmode=bogus&x=%", ConfigError, "not a valid PostgreSQL URL"),
    ("postgresql://podctl:hunter2@127.0.0.1:9/queue", QueueUnreachableError,
     "cannot reach the queue database postgresql://podctl@127.0.0.1:9/queue"),
])
def test_a_bad_or_unreachable_url_is_said_without_its_password(url, error, words):
    with pytest.raises(error) as caught:
        open_store(Path("/nonexistent"), url)
    assert words in str(caught.value) and "hunter2" not in str(caught.value)
    assert "\n" not in str(caught.value)


def _held(state: str, hours_ago: float, hours: float | None, now: float, **fields) -> Entry:
    start = now - hours_ago * 3600
    end = None if hours is None else start + hours * 3600
    return _entry(state=state, attempt=1, attempts=[{"attempt": 1, "ready_at": start, "ended": end}],
                  **fields)


def test_chip_hours_count_ready_to_end_within_the_window():
    now = 1_000_000_000.0
    done = _held("succeeded", hours_ago=10, hours=2, now=now)  # v5p-8: 4 chips
    assert done.chip_hours(now - WEEK, now) == pytest.approx(8.0)
    running = _held("running", hours_ago=3, hours=None, now=now)
    assert running.chip_hours(now - WEEK, now) == pytest.approx(12.0)
    old = _held("succeeded", hours_ago=7 * 24 + 1, hours=2, now=now)  # half of it in the window
    assert old.chip_hours(now - WEEK, now) == pytest.approx(4.0)


def test_the_ledger_orders_by_priority_then_least_use_and_holds_quotas():
    now = 1_000_000_000.0
    shares = Shares.combine([Quota("alice", chip_hours_week=10.0), Quota("research", max_chips=8)],
                            {"alice": "research", "bob": "research"},
                            [Quota("carol", max_chips=4, source="podctl.toml"),
                             Quota("alice", chip_hours_week=1e9, source="podctl.toml")], {})
    assert shares.quotas["alice"].chip_hours_week == 10.0  # the queue's own wins
    history = [_held("succeeded", 5, 2, now, owner="alice"),  # 8 chip-hours
               _held("running", 1, None, now, owner="bob")]  # 4 chips held, 4 chip-hours
    ledger = Ledger(history, shares, now)
    assert (ledger.week["alice"], ledger.week["bob"], ledger.week["research"]) == pytest.approx((8, 4, 12))
    pending = [_entry("alice", created=1.0), _entry("bob", created=2.0),
               _entry("carol", created=3.0), _entry("dave", created=4.0, priority=-100)]
    for i, e in enumerate(pending, 1):
        e.id = i
    assert [e.owner for e in ledger.order(pending)] == ["carol", "bob", "alice", "dave"]
    # alice (8 of 10 chip-hours): a run capped at 1 hour on 4 chips would pass them
    capped = _entry("alice", max_hours=1.0)
    assert ledger.admit(capped) == "quota: alice used 8.0 of 10 chip-hours in 7 days and 4.0 at --max-hours"
    assert ledger.admit(_entry("alice")) is None  # uncapped, and under: it starts; 8 of 8 team chips
    assert ledger.admit(_entry("bob")) == "quota: team research holds 8 of 8 chips at once; this needs 4"
    assert ledger.admit(_entry("carol")) is None
    assert ledger.admit(_entry("carol")) == "quota: carol holds 4 of 4 chips at once; this needs 4"
    assert ledger.admit(_entry("dave", accelerator_type="v5p-4096")) is None  # no quota, no limit
