"""A team's queue on a real PostgreSQL, as cron and people meet it: separate `podctl`
processes, several tickers at once under SIGKILL, two users (two database roles: the
owner of an entry is the role that added it) with quotas and priorities, a machine's
SQLite queue moved over, and a bad or unreachable database said in one line."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, stop_fake_and_check
from tests.e2e.test_queue import SCRIPTS, TERMINAL, QueueCli
from tests.pg_support import role_url

ALICE, BOB = "alice@example.com", "bob@example.com"


TICKER = "ticker"


@pytest.fixture
def team(tmp_path: Path, pg_url: str):
    """The CLI as the database's owner (an admin: quotas, teams, everyone's entries), with
    login roles for alice and bob (podctl_user) and the tickers (podctl_ticker)."""
    from podctl.queue.pgstore import PgStore

    cli = QueueCli(tmp_path)
    cli.env.update(PODCTL_BACKEND="fake", PODCTL_QUEUE_URL=pg_url)
    PgStore(pg_url).close()  # the schema, and with it the group roles
    cli.role_urls = {ALICE: role_url(pg_url, ALICE, "podctl_user"), BOB: role_url(pg_url, BOB, "podctl_user"),
                     TICKER: role_url(pg_url, TICKER, "podctl_ticker")}
    yield cli
    stop_fake_and_check(cli)


def _as(cli: QueueCli, who: str) -> dict[str, str]:
    """The environment of a command run as WHO: its own database role."""
    return {"PODCTL_QUEUE_URL": cli.role_urls[who]} if hasattr(cli, "role_urls") else {}


def _add(cli: QueueCli, who: str, *args: str) -> dict:
    """`queue add` as WHO, in this process (its own command's output: tests/e2e/test_queue.py)."""
    return json.loads(cli.here("queue", "add", "--json", "--slice", "v5p-8", *args, env=_as(cli, who)).stdout)


def _ticker(cli: QueueCli, log: Path) -> subprocess.Popen:
    env = {**cli.env, **_as(cli, TICKER)}
    with open(log, "a") as out:  # a file, not a pipe: a long loop never blocks on a full one
        return subprocess.Popen([sys.executable, "-m", "podctl", "queue", "tick", "--loop", "1s"],
                                env=env, cwd=cli.tmp, stdout=out, stderr=subprocess.STDOUT)


def test_three_tickers_under_sigkill_make_one_slice_per_attempt_and_one_start_per_run(team, tmp_path):
    team.here("queue", "quota", "set", ALICE, "--max-chips", "4")  # her entries go one at a time
    ids = [_add(team, who, str(SCRIPTS / "many_lines.py"), "6")["id"]
           for who in (ALICE, BOB, ALICE, BOB)]
    team.here("fake", "start")
    chance = random.Random(7)
    logs = [tmp_path / f"ticker{i}.log" for i in range(3)]
    tickers = [_ticker(team, log) for log in logs]
    kills, deadline = 0, time.monotonic() + 180
    try:
        while True:
            entries = team.entries()
            if all(e["state"] in TERMINAL and all(a.get("cleaned") for a in e["attempts"])
                   for e in entries):
                break
            assert time.monotonic() < deadline, entries
            for i, t in enumerate(tickers):  # a ticker never ends by itself
                assert t.poll() is None, logs[i].read_text()[-2000:]
            time.sleep(chance.uniform(0.5, 3.0))
            victim = chance.randrange(3)  # dies wherever it is: mid-pass, mid-write, idle
            tickers[victim].kill()
            tickers[victim].wait(timeout=10)
            tickers[victim] = _ticker(team, logs[victim])
            kills += 1
    finally:
        for t in tickers:
            t.send_signal(signal.SIGTERM)
        for t in tickers:
            try:
                t.wait(timeout=60)
            except subprocess.TimeoutExpired:
                t.kill()
                t.wait()
    assert kills >= 3
    by_id = {e["id"]: e for e in entries}
    assert [by_id[i]["state"] for i in ids] == ["succeeded"] * 4
    assert all(by_id[i]["attempt"] == 1 for i in ids)
    assert team.admin().stats()["by_call"]["nodes.create"] == 4  # one slice per attempt
    for i in ids:  # one start per run: every line once
        lines = team.here("logs", by_id[i]["run_id"]).stdout.splitlines()
        assert [line.split("] ", 1)[1] for line in lines] == [f"0 {n}" for n in range(6)]
    # alice's quota held throughout: her second entry asked for a slice after her first ended
    first, second = (by_id[ids[0]]["attempts"][0], by_id[ids[2]]["attempts"][0])
    assert second["requested"] >= first["ended"] or first["requested"] >= second["ended"]
    assert team.admin().is_empty()


def test_quota_priority_and_owners_as_a_team_sees_them(team):
    team.here("queue", "quota", "set", ALICE, "--max-chips", "4", "--chip-hours-week", "1000")
    normal_a = _add(team, ALICE, "--name", "ablation-a", str(SCRIPTS / "many_lines.py"), "3")
    normal_b = _add(team, ALICE, "--name", "ablation-b", str(SCRIPTS / "many_lines.py"), "3")
    urgent = _add(team, ALICE, "--priority", "high", "--name", "urgent", str(SCRIPTS / "many_lines.py"), "3")
    bobs = _add(team, BOB, "--name", "bobs", str(SCRIPTS / "many_lines.py"), "3")
    assert (urgent["owner"], urgent["priority"], bobs["owner"]) == (ALICE, 100, BOB)
    team("queue", "tick")  # cron's, a process
    states = {e["id"]: e for e in team.entries()}
    assert states[urgent["id"]]["state"] == "provisioning"  # high first, though added last
    assert states[bobs["id"]]["state"] == "provisioning"  # bob has no quota to wait on
    for waiting in (normal_a, normal_b):
        assert states[waiting["id"]]["state"] == "pending"
        assert states[waiting["id"]]["waiting"] == (
            f"quota: {ALICE} holds 4 of 4 chips at once; this needs 4")
    text = team.here("queue", "ls").stdout
    assert "pending (waits: quota)" in text and "ablation-a" in text and "  high  " in text
    assert f"quota: {ALICE} holds 4 of 4 chips at once" in text
    mine = team.here("queue", "ls", "--mine", "--json", env=_as(team, BOB)).stdout
    assert [e["id"] for e in json.loads(mine)] == [bobs["id"]]
    quotas = json.loads(team.here("queue", "quota", "ls", "--json").stdout)
    assert quotas == [{"name": ALICE, "chip_hours_week": 1000.0, "max_chips": 4,
                       "used_chip_hours_7d": 0.0, "chips_now": 4, "source": "queue"}]
    shown = team.here("queue", "show", str(urgent["id"])).stdout
    assert f"owner            {ALICE}" in shown and "chip_hours" in shown
    assert "pending -> provisioning by postgres" in shown  # who moved it: the tick's role
    for e in (normal_a, normal_b, urgent):  # each cancels their own
        team.here("queue", "cancel", str(e["id"]), env=_as(team, ALICE))
    team.here("queue", "cancel", str(bobs["id"]), env=_as(team, BOB))
    shown = team.here("queue", "show", str(bobs["id"])).stdout
    assert f"running -> cancelled by {BOB}" in shown or f"provisioning -> cancelled by {BOB}" in shown
    team.settle()


def test_migrate_moves_a_machines_queue_with_its_history_and_runs_it_there(team, pg_url):
    local = {"PODCTL_QUEUE_URL": ""}  # this machine's SQLite queue
    # what sets it up and reads it in this process; the move itself is a `podctl` process
    done = json.loads(team.here("queue", "add", "--json", "--slice", "v5p-8", str(SCRIPTS / "many_lines.py"),
                                "2", env=local).stdout)
    team.here("queue", "cancel", str(done["id"]), env=local)
    waiting = json.loads(team.here("queue", "add", "--json", "--slice", "v5p-8",
                                   str(SCRIPTS / "many_lines.py"), "2", env=local).stdout)
    team.here("queue", "quota", "set", BOB, "--max-chips", "8", env=local)
    team.here("queue", "team", "set", "research", ALICE, BOB, env=local)
    before = json.loads(team.here("queue", "ls", "--json", env=local).stdout)
    with sqlite3.connect(team.db) as db:
        token = db.execute("SELECT value FROM meta WHERE key = 'token'").fetchone()[0]

    out = team("queue", "migrate", "--to", pg_url).stdout
    assert out.startswith("moved 2 entries, 1 quotas and 2 team members to postgresql://")
    assert not team.db.exists() and team.db.with_name("queue.db.migrated").exists()
    after = team.entries()
    assert after == before  # ids, states, attempts, owners: all of it
    assert "research: alice@example.com, bob@example.com" in team.here("queue", "team", "ls").stdout
    again = team.here("queue", "migrate", "--to", pg_url, check=False)
    assert_one_line_error(again, 1, "no queue on this machine")
    # the moved entry runs from the team's queue, under the same token (its slices' names)
    entries = team.settle()
    assert {e["id"]: e["state"] for e in entries} == {done["id"]: "cancelled", waiting["id"]: "succeeded"}
    assert entries[-1]["attempts"][0]["slice"] == f"q-{token}-{waiting['id']}-1"
    # a non-empty team queue takes no second machine's queue
    team.here("queue", "add", "--slice", "v5p-8", str(SCRIPTS / "many_lines.py"), "1", env=local)
    refused = team.here("queue", "migrate", "--to", pg_url, check=False)
    assert_one_line_error(refused, 1, "already has 2 entries", "migrate into an empty one")
    team.here("queue", "cancel", "1", env=local)


@pytest.mark.parametrize("url, args, code, words", [
    ("mysql://db/queue", ("queue", "ls"), 2, "must be a PostgreSQL URL"),
    ("postgresql://podctl:hunter2@127.0.0.1:9/queue", ("queue", "ls"), 1,
     "cannot reach the queue database postgresql://podctl@127.0.0.1:9/queue"),
    ("postgresql://podctl:hunter2@127.0.0.1:9/queue", ("queue", "tick"), 1, "cannot reach"),
    ("postgresql://podctl:hunter2@127.0.0.1:9/queue", ("queue", "show", "1"), 1, "cannot reach"),
])
def test_a_bad_or_unreachable_queue_database_is_one_line_without_its_password(tmp_path, url, args, code,
                                                                              words):
    """Said before any database answers: no queue of the team's, and in this process but
    for cron's tick, a `podctl` process that proves the same path."""
    cli = QueueCli(tmp_path)
    cli.env.update(PODCTL_BACKEND="fake", PODCTL_QUEUE_URL=url)
    try:
        proc = (cli if args == ("queue", "tick") else cli.here)(*args, check=False)
    finally:
        stop_fake_and_check(cli)
    assert_one_line_error(proc, code, words)
    assert "hunter2" not in proc.stderr + proc.stdout


def test_tick_loop_rides_out_the_database_going_away_and_finishes_the_run(tmp_path: Path):
    """A server of its own, stopped under a running `tick --loop` and started again: the
    loop logs the lost database and carries on; the entry it was running ends once."""
    import tempfile

    import pgserver

    data = tempfile.mkdtemp(prefix="podctl-pg-outage-")
    server = pgserver.get_server(data, cleanup_mode="stop")
    cli = QueueCli(tmp_path)
    cli.env.update(PODCTL_BACKEND="fake", PODCTL_QUEUE_URL=server.get_uri())
    log = tmp_path / "ticker.log"
    ticker = None
    try:
        entry = _add(cli, ALICE, str(SCRIPTS / "many_lines.py"), "4")
        cli.here("fake", "start")
        ticker = _ticker(cli, log)
        deadline = time.monotonic() + 90
        while cli.entries()[0]["state"] != "running":
            assert time.monotonic() < deadline and ticker.poll() is None, log.read_text()[-2000:]
            time.sleep(0.3)
        server.cleanup()  # the database goes away under the loop
        deadline = time.monotonic() + 60
        while '"tick_failed"' not in log.read_text():
            assert time.monotonic() < deadline and ticker.poll() is None, log.read_text()[-2000:]
            time.sleep(0.3)
        assert_one_line_error(cli.here("queue", "ls", check=False), 1, "cannot reach the queue database")
        server = pgserver.get_server(data, cleanup_mode="delete")  # back, same data
        deadline = time.monotonic() + 90
        while (e := cli.entries()[0])["state"] not in TERMINAL:
            assert time.monotonic() < deadline and ticker.poll() is None, log.read_text()[-2000:]
            time.sleep(0.3)
        assert (e["id"], e["state"], e["attempt"]) == (entry["id"], "succeeded", 1)
        assert cli.admin().stats()["by_call"]["nodes.create"] == 1
    finally:
        if ticker is not None:
            ticker.send_signal(signal.SIGTERM)
            ticker.wait(timeout=60)
        cli.env["PODCTL_QUEUE_URL"] = server.get_uri()
        cli.settle()
        stop_fake_and_check(cli)
        server.cleanup()
