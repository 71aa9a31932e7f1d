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
from tests.unit.test_queue_store import _entry  # noqa: F401


@pytest.fixture(params=["sqlite", "postgresql"])
def opener(request, tmp_path):
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    return lambda: open_store(tmp_path / "state", url)


def test_entries_round_trip_and_a_stale_update_loses(opener):
    with opener() as a, opener() as b:
        e = a.add(_entry(args=["--steps", "5"], attempts=[{"attempt": 1, "slice": "s"}], via="boot"))
        assert len(a.token) == 6 and a.token == b.token
        seen = b.get(e.id)
        # the owner: the account given in SQLite; in PostgreSQL the role that connected
        assert (seen.owner, seen.args, seen.env, seen.attempts, seen.via) == (
            a.me("alice"), ["--steps", "5"], {"TOKEN": "secret"}, [{"attempt": 1, "slice": "s"}], "boot")
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
                            cwd=Path(__file__).parents[2])
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


def test_a_postgresql_queue_from_a_newer_podctl_is_refused(pg_url):
    import psycopg

    open_store(Path("/nonexistent"), pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE podctl.meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(QueueDatabaseError, match="schema 99; this podctl knows up to 4: upgrade podctl"):
        open_store(Path("/nonexistent"), pg_url)


def test_a_postgresql_queue_of_schema_2_gains_via_its_entries_kept_and_their_request_still_fixed(pg_url):
    """Schema 3 (`queue add --via`): an existing queue is grown in place by the next podctl
    that opens it; its entries take the ticker's channel (None), and the guard that keeps
    an entry's request as added now keeps its `via` too."""
    import psycopg

    from podctl.queue import pg_roles

    with open_store(Path("/nonexistent"), pg_url) as store:
        store.add(_entry())
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as the podctl before --via left it
        conn.execute("ALTER TABLE podctl.entries DROP COLUMN via, DROP COLUMN num_slices, "
                     "DROP COLUMN elastic, DROP COLUMN min_slices, DROP COLUMN grow_deadline")
        conn.execute(pg_roles._guard(pg_roles.REQUEST_V2))
        conn.execute("UPDATE podctl.meta SET value = '2' WHERE key = 'schema'")
    with open_store(Path("/nonexistent"), pg_url) as store:
        (old,) = store.entries()
        assert old.via is None
        new = store.add(_entry(via="ssh"))
        assert store.get(new.id).via == "ssh"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT value FROM podctl.meta WHERE key = 'schema'").fetchone()[0] == "4"
        source = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = 'entry_guard'").fetchone()[0]
    assert "NEW.via" in source


def test_many_processes_opening_a_new_postgresql_queue_at_once_make_one_schema(pg_url):
    code = (f"from podctl.queue.pgstore import PgStore\n"
            f"s = PgStore({pg_url!r}); print(s.token); s.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    tokens = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert [p.returncode for p in procs] == [0] * 4
    assert len(tokens) == 1 and len(tokens.pop()) == 6


