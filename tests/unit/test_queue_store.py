"""The two queue stores behave alike (SQLite, and a real PostgreSQL): compare-and-set
updates, one tick at a time with the lock freed by a SIGKILL, quotas and teams; and
PostgreSQL's own failures said in one line, its password never shown."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from podctl.base.errors import ConfigError, NoSuchEntryError, QueueDatabaseError, QueueUnreachableError
from podctl.queue.entry import Entry
from podctl.queue.interface import Quota
from podctl.queue.place import open_store
from podctl.queue.shares import WEEK, Ledger, Shares


def _entry(owner: str = "alice", **fields) -> Entry:
    return Entry(id=0, name="job", accelerator_type=fields.pop("accelerator_type", "v5p-8"),
                 project="p", zone="us-central1-a", bucket="b", script="train.py",
                 bundle_hash="0" * 64, owner=owner, env=fields.pop("env", {"TOKEN": "secret"}), **fields)


def _held(state: str, hours_ago: float, hours: float | None, now: float, **fields) -> Entry:
    start = now - hours_ago * 3600
    end = None if hours is None else start + hours * 3600
    return _entry(state=state, attempt=1, attempts=[{"attempt": 1, "ready_at": start, "ended": end}],
                  **fields)


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
        assert (old.name, old.state, old.owner, old.waiting, old.via) == ("old", "running", "", None, None)
        # schema 5 (`queue add --num-slices K --elastic`): an old entry is one slice, not elastic
        assert (old.num_slices, old.elastic, old.min_slices, old.grow_deadline) == (1, False, None, None)
        new = store.add(_entry(num_slices=3, elastic=True, min_slices=2, grow_deadline=600.0))
        got = store.get(new.id)
        assert (got.num_slices, got.elastic, got.min_slices, got.grow_deadline) == (3, True, 2, 600.0)
        assert got.chips == 3 * old.chips  # quotas count every slice
        store.set_quota(Quota("alice", 1.0, 4))
        assert store.quotas() == [Quota("alice", 1.0, 4)]


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

