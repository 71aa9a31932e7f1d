"""Who may do what in a team's PostgreSQL queue, as the database enforces it (a real
PostgreSQL with real login roles): an entry's owner is the role that connected, another
role neither sees, changes nor cancels it, nor reads its `--env` values; only the tickers
open those; quotas and teams need podctl_admin; every state change says who made it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from podctl.base.errors import InvalidValueError, NoSuchEntryError, QueueDatabaseError, QueueDeniedError
from podctl.queue.interface import Quota
from podctl.queue.pgstore import PgStore
from podctl.queue.sealing import KEY_FILE, SealedEnv
from podctl.queue.shares import Ledger, Shares
from tests.cli_in_process import podctl_here
from tests.conftest import assert_one_line_error
from tests.pg_support import role_url
from tests.unit.test_queue_store import _entry

ALICE, BOB, TICKER = "alice@example.com", "bob@example.com", "ticker-1"


@pytest.fixture
def roles(pg_url, tmp_path):
    """The queue made by the database's owner (an admin), and its three login roles."""
    PgStore(pg_url).close()
    urls = {"admin": pg_url, ALICE: role_url(pg_url, ALICE, "podctl_user"),
            BOB: role_url(pg_url, BOB, "podctl_user"), TICKER: role_url(pg_url, TICKER, "podctl_ticker")}
    with PgStore(urls[TICKER], key_dir=tmp_path / "ticker") as ticker:
        ticker.register_ticker()  # its key joins those --env values are sealed to
    return urls


def test_a_second_role_cannot_see_change_or_cancel_the_firsts_entry_nor_read_its_secrets(roles, tmp_path):
    with PgStore(roles[ALICE], key_dir=tmp_path / "alice") as alice:
        # the owner the client sends is ignored: the database's is the role that connected
        entry = alice.add(_entry(owner=BOB, env={"API_TOKEN": "hunter2-secret"}))
        assert entry.owner == ALICE and alice.me("anything") == ALICE
        mine = alice.get(entry.id)
        # not even the owner reads the value back: it is sealed to the tickers' key
        assert isinstance(mine.env, SealedEnv) and mine.env == {"API_TOKEN": ""}
    with psycopg.connect(roles[ALICE]) as conn:
        stored = conn.execute("SELECT env FROM podctl.entries").fetchone()[0]
    assert "API_TOKEN" in stored and "hunter2" not in stored

    with PgStore(roles[BOB], key_dir=tmp_path / "bob") as bob:
        assert bob.entries() == []
        with pytest.raises(NoSuchEntryError, match=f"no queue entry {entry.id} of role {BOB}'s"):
            bob.get(entry.id)
        assert not bob.update(entry, state="cancelled")  # row-level security: no row to update
    with psycopg.connect(roles[BOB], autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM podctl.entries").fetchone()[0] == 0
        assert conn.execute("UPDATE podctl.entries SET state = 'cancelled'").rowcount == 0
        assert conn.execute("SELECT count(*) FROM podctl.events").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor forge who did what
            conn.execute("INSERT INTO podctl.events (entry, owner, actor, to_state) "
                         "VALUES (1, 'x', 'x', 'x')")

    with PgStore(roles[ALICE]) as alice:
        mine = alice.get(entry.id)
        with pytest.raises(QueueDeniedError, match="was added as it is"):
            alice.update(mine, priority=10**6)  # her own request is fixed once added
        with pytest.raises(QueueDeniedError, match="was added as it is"):
            alice.update(mine, via="boot")  # `queue add --via` too
        with pytest.raises(QueueDeniedError, match="may cancel entry .* but not move it to running"):
            alice.update(mine, state="running")
        with pytest.raises(QueueDeniedError, match="only a podctl_admin changes the owner"):
            alice.update(mine, owner=BOB)
        assert alice.update(mine, state="cancelled", last_error="cancelled by alice")

    with PgStore(roles[TICKER], key_dir=tmp_path / "ticker") as ticker:
        seen = ticker.get(entry.id)
        assert seen.env == {"API_TOKEN": "hunter2-secret"} and seen.owner == ALICE
        other = ticker.entries()
        assert [e.id for e in other] == [entry.id]
        history = ticker.history(entry.id)
    assert [(h["actor"], h["from_state"], h["to_state"]) for h in history] == [
        (ALICE, None, "pending"), (ALICE, "pending", "cancelled")]
    assert oct((tmp_path / "ticker" / KEY_FILE).stat().st_mode & 0o777) == "0o600"


def test_tickers_advance_anyones_entry_and_a_ticker_added_later_cannot_open_older_secrets(roles, tmp_path):
    with PgStore(roles[ALICE]) as alice:
        entry = alice.add(_entry(env={"K": "v"}))
    with PgStore(roles[TICKER], key_dir=tmp_path / "ticker") as ticker:
        seen = ticker.get(entry.id)
        assert ticker.update(seen, state="provisioning", attempt=1)
        assert ticker.history(entry.id)[-1]["actor"] == TICKER
    # a second ticker machine, registered after the entry was sealed: it knows it cannot
    with PgStore(roles[TICKER], key_dir=tmp_path / "ticker2") as late:
        late.register_ticker()
        assert isinstance(late.get(entry.id).env, SealedEnv)
    with PgStore(roles[ALICE]) as alice:  # new entries are sealed to both
        second = alice.add(_entry(env={"K": "w"}))
    with PgStore(roles[TICKER], key_dir=tmp_path / "ticker2") as late:
        assert late.get(second.id).env == {"K": "w"}


def test_no_registered_ticker_no_env_and_a_ticker_without_the_key_fails_the_entry_saying_why(roles, tmp_path):
    from podctl.base.errors import ConfigError, QueueError
    from podctl.queue.execution import run_options

    with psycopg.connect(roles["admin"], autocommit=True) as conn:
        conn.execute("DELETE FROM podctl.ticker_keys")  # the one ticker machine, gone
    with PgStore(roles[ALICE]) as alice:
        with pytest.raises(QueueError, match="no ticker .* has registered its key yet.*podctl queue tick"):
            alice.add(_entry(env={"K": "v"}))
        assert alice.entries() == []
        plain = alice.add(_entry(env={}))  # nothing to seal
    assert plain.env == {}
    sealed = PgStore(roles[TICKER], key_dir=tmp_path / "ticker")
    with sealed:
        sealed.register_ticker()
        with PgStore(roles[ALICE]) as alice:
            entry = alice.add(_entry(env={"K": "v"}))
    with PgStore(roles[TICKER], key_dir=tmp_path / "other") as other:
        seen = other.get(entry.id)
    seen.run_id = "r-1"
    with pytest.raises(ConfigError, match="sealed to the tickers registered when it was added"):
        run_options(seen)


def test_quotas_and_teams_need_the_admin_role_and_no_owner_can_be_named(roles, tmp_path):
    with PgStore(roles[BOB]) as bob:
        for attempt in (lambda: bob.set_quota(Quota(BOB, None, 10_000)),
                        lambda: bob.set_quota(Quota(ALICE, None, None)),  # --clear another's
                        lambda: bob.set_team("research", [BOB])):
            with pytest.raises(QueueDeniedError, match=f"role {BOB}.*need podctl_admin"):
                attempt()
        assert bob.quotas() == [] and bob.teams() == {}
    with PgStore(roles[TICKER]) as ticker, pytest.raises(QueueDeniedError):
        ticker.set_quota(Quota(BOB, None, 0))
    with PgStore(roles["admin"]) as admin:
        admin.set_quota(Quota(BOB, None, 4))
        admin.set_quota(Quota(ALICE, None, 64))
        with pytest.raises(InvalidValueError, match="--chip-hours-week nan: give a finite number"):
            admin.set_quota(Quota(BOB, float("nan"), None))
    with psycopg.connect(roles["admin"], autocommit=True) as conn:  # the database's own check
        for bad in ("'NaN'", "'Infinity'", "-1"):
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute(f"INSERT INTO podctl.quotas VALUES ('carol', {bad}, NULL)")
    with PgStore(roles[BOB]) as bob:  # over his quota, bob names alice: the entry is his
        bobs = bob.add(_entry(owner=ALICE, accelerator_type="v5p-16"))
    assert bobs.owner == BOB
    with PgStore(roles[TICKER]) as ticker:
        ledger = Ledger(ticker.entries(), Shares.combine(ticker.quotas(), ticker.teams(), [], {}), 0.0)
        assert "holds 0 of 4 chips at once; this needs 8" in (ledger.admit(ticker.get(bobs.id)) or "")


def _podctl(url: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    """`podctl ARGS` as the role of URL, a process of its own: the one refusal below that
    proves the others' path through the real command."""
    env = {**os.environ, "PODCTL_QUEUE_URL": url, "PODCTL_BACKEND": "fake",
           "PODCTL_STATE_DIR": str(home / "state"), "PODCTL_CONFIG_DIR": str(home / "config")}
    return subprocess.run([sys.executable, "-m", "podctl", *args], env=env, cwd=home,
                          capture_output=True, text=True, timeout=120)


def _here(url: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    """`podctl ARGS` as the role of URL in this process (tests/cli_in_process.py): the same
    parsing, store and error guard without a process's 0.5-1 s of imports."""
    return podctl_here(home, *args, env={"PODCTL_QUEUE_URL": url, "PODCTL_BACKEND": "fake",
                                         "PODCTL_STATE_DIR": str(home / "state"),
                                         "PODCTL_CONFIG_DIR": str(home / "config")})


def test_the_cli_says_each_refusal_in_one_line(roles, tmp_path):
    with PgStore(roles[ALICE]) as alice:
        entry = alice.add(_entry())
    bob = roles[BOB]
    assert_one_line_error(_podctl(bob, tmp_path, "queue", "cancel", str(entry.id)), 1,
                          f"no queue entry {entry.id} of role {BOB}'s")
    assert_one_line_error(_here(bob, tmp_path, "queue", "quota", "set", BOB, "--clear"), 1,
                          "need podctl_admin", "permission denied for table quotas")
    assert_one_line_error(_here(bob, tmp_path, "queue", "team", "set", "t", BOB), 1, "need podctl_admin")
    assert_one_line_error(_here(roles["admin"], tmp_path, "queue", "quota", "set", BOB,
                                "--chip-hours-week", "nan"), 2, "--chip-hours-week")
    for huge in ("10^30", "1" + "0" * 30):
        assert_one_line_error(_here(roles[ALICE], tmp_path, "queue", "add", "--slice", "v5p-8",
                                    "--priority", huge, "t.py"), 2, "--priority")
    shown = _here(roles[ALICE], tmp_path, "queue", "show", str(entry.id)).stdout
    assert f"owner            {ALICE}" in shown and f"added -> pending by {ALICE}" in shown
    assert _here(roles[ALICE], tmp_path, "queue", "ls", "--mine", "--json").stdout.count('"id"') == 1


def test_a_user_cannot_migrate_or_register_a_ticker_key(roles, tmp_path):
    with PgStore(roles[BOB], key_dir=tmp_path / "bob") as bob:
        bob.register_ticker()  # not a ticker: nothing registered, no key made
        assert not (tmp_path / "bob" / KEY_FILE).exists()
    with psycopg.connect(roles[BOB], autocommit=True) as conn, pytest.raises(
            psycopg.errors.InsufficientPrivilege):
        conn.execute("INSERT INTO podctl.ticker_keys (key_id, public_key) VALUES ('x', 'y')")
    with PgStore(roles[BOB]) as bob, pytest.raises((QueueDeniedError, QueueDatabaseError)):
        bob.set_token("abcdef")
