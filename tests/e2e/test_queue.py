"""`podctl queue` as cron meets it: separate processes on the fake cloud's daemon,
bad input and bad databases answered in one line, ticks that race or are killed."""

from __future__ import annotations

import json
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.cli_in_process import podctl_here, shared_daemon
from tests.conftest import Podctl, assert_one_line_error, stop_fake_and_check

SCRIPTS = Path(__file__).parents[1] / "scripts"
TERMINAL = {"succeeded", "failed", "cancelled"}


class QueueCli(Podctl):
    @property
    def db(self) -> Path:
        return self.tmp / "state" / "queue.db"

    def here(self, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        """`podctl ARGS` in this process (tests/cli_in_process.py): what reads the queue's
        and the fake's state between ticks, the refusals, and the ticks that only bring an
        entry along (settle's); the ticks a case is about (cron's: racing, killed, looping,
        their output) stay `podctl` processes."""
        return podctl_here(self.tmp, *args, env={**self.env, **(env or {})}, check=check)

    def admin(self) -> FakeAdmin:
        return FakeAdmin(json.loads(self.here("fake", "status", "--json").stdout)["admin"])

    def entries(self) -> list[dict]:
        return json.loads(self.here("queue", "ls", "--json").stdout)

    def settle(self, limit: float = 120) -> list[dict]:
        """Tick (in this process) until every entry has ended and nothing it made is left."""
        deadline = time.monotonic() + limit
        while True:
            self.here("queue", "tick")
            entries = self.entries()
            if all(e["state"] in TERMINAL and all(a.get("cleaned") for a in e["attempts"])
                   for e in entries) and self.admin().is_empty():
                return entries
            assert time.monotonic() < deadline, entries
            time.sleep(0.2)


@pytest.fixture
def q(tmp_path: Path):
    cli = QueueCli(tmp_path)
    cli.env["PODCTL_BACKEND"] = "fake"
    yield cli
    stop_fake_and_check(cli)


@pytest.fixture(scope="module")
def _adding_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("adding")
    with shared_daemon(tmp):
        yield tmp


@pytest.fixture
def adding(_adding_home: Path) -> Iterator[QueueCli]:
    """A queue of its own on the module's one fake daemon, for the cases that add, read and
    cancel entries but never make a slice (a daemon started and stopped for each cost about
    2 s of CPU): its database and lock are deleted after the case; their bundles stay in
    the fake's bucket, which is stopped, and checked to hold nothing billable, at the end."""
    cli = QueueCli(_adding_home)
    cli.env["PODCTL_BACKEND"] = "fake"
    yield cli
    for made in cli.db.parent.glob("queue.*"):
        made.unlink()


def test_add_ls_show_keep_env_values_to_themselves(adding):
    q = adding
    # --json before the script: what follows the script is the script's
    added = json.loads(q("queue", "add", "--slice", "v5p-8", "--env", "API_TOKEN=hunter2-secret",
                         "--priority", "5", "--max-hours", "2", "--name", "nightly", "--json",
                         str(SCRIPTS / "show_env.py"), "API_TOKEN").stdout)
    assert (added["state"], added["name"], added["priority"], added["env_keys"]) == (
        "pending", "nightly", 5, ["API_TOKEN"])
    assert added["script"] == "show_env.py" and added["args"] == ["API_TOKEN"]
    assert len(added["bundle_hash"]) == 64
    # what reads it back in this process; `ls` as a process: the next case
    shown = q.here("queue", "show", str(added["id"])).stdout + q.here(
        "queue", "show", str(added["id"]), "--json").stdout
    listed = q.here("queue", "ls").stdout + q.here("queue", "ls", "--json").stdout
    assert "hunter2-secret" not in shown + listed and "API_TOKEN" in shown
    assert "next_try_at      -" in shown and "0.0" not in shown.split("next_try_at", 1)[1].split("\n")[0]
    assert stat.S_IMODE(q.db.stat().st_mode) == 0o600
    q.here("queue", "cancel", str(added["id"]))
    assert q.entries()[0]["state"] == "cancelled"


def test_queue_ls_and_show_print_a_names_escapes_newlines_and_bidi_overrides_as_escapes(adding):
    q = adding
    name = "evil\x1b[2J\x1b]0;owned\x07\nforged row\u202eexe.txt"
    added = json.loads(q.here("queue", "add", "--slice", "v5p-8", "--name", name, "--json",
                              str(SCRIPTS / "show_env.py")).stdout)
    assert added["name"] == name  # kept as given; JSON escapes it itself
    listed = q("queue", "ls").stdout  # what a terminal gets from a `podctl` process
    assert len(listed.splitlines()) == 2  # the header and one row: no forged row
    assert "evil\\x1b[2J\\x1b" in listed.splitlines()[1]
    shown = q.here("queue", "show", str(added["id"])).stdout
    assert "\\x0aforged row\\u202eexe.txt" in shown
    for out in (listed, shown):
        assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    q.here("queue", "cancel", str(added["id"]))


@pytest.mark.parametrize("args, code, words", [
    (["add", "--slice", "v5p-7", str(SCRIPTS / "show_env.py")], 2, ["v5p-8"]),
    (["add", "--slice", "v5p-8", "--spot", "--queued", str(SCRIPTS / "show_env.py")], 2, ["choose one"]),
    (["add", "--slice", "v5p-8", "--valid-for", "2h", str(SCRIPTS / "show_env.py")], 2, ["--queued"]),
    (["add", "--slice", "v5p-8", "--max-hours", "0", str(SCRIPTS / "show_env.py")], 2, ["--max-hours"]),
    (["add", "--slice", "v5p-8", "--env", "NOPE", str(SCRIPTS / "show_env.py")], 2, ["NOPE is not set"]),
    (["add", "--slice", "v5p-8", "--env", "1X=y", str(SCRIPTS / "show_env.py")], 2, ["KEY=VALUE"]),
    (["add", "--slice", "v5p-8", "missing.py"], 2, ["no script"]),  # bad input
    (["show", "42"], 1, ["no queue entry 42"]),
    (["cancel", "42"], 1, ["no queue entry 42"]),
    # no entry can have an id past the store's 64-bit column: bad input, said with the range
    (["show", "1234567890123456789012345678901"], 2, ["ENTRY_ID 1234567890123456789012345678901",
                                                      "9223372036854775807"]),
    (["cancel", "1234567890123456789012345678901"], 2, ["ENTRY_ID"]),
    (["tick", "--loop", "soon"], 2, ["not a duration"]),
    (["add", "--slice", "v5p-8", "--priority", "urgent", str(SCRIPTS / "show_env.py")], 2,
     ["--priority takes high, normal, low or a whole number", "'urgent'"]),
    (["quota", "set", "alice@example.com"], 2, ["give --chip-hours-week and/or --max-chips"]),
    (["quota", "set", "alice@example.com", "--max-chips", "-1"], 2, ["--max-chips -1", "0 or more"]),
    (["migrate", "--to", "sqlite:///x.db"], 2, ["--to must be a PostgreSQL URL"]),
])
def test_bad_queue_input(q, args, code, words):
    # in this process; through `podctl` processes: test_a_bad_database_is_refused_and_left_as_it_is
    # and test_queue_cancel_of_an_entry_that_already_ended_exits_non_zero_and_says_so
    assert_one_line_error(q.here("queue", *args, check=False), code, *words)


@pytest.mark.parametrize("damage", ["corrupt", "newer"])
def test_a_bad_database_is_refused_and_left_as_it_is(q, damage):
    q.db.parent.mkdir(parents=True, exist_ok=True)
    if damage == "corrupt":
        q.db.write_bytes(b"this is not sqlite, just bytes\n" * 100)
        words = ["not a SQLite database", "delete its slices"]
    else:
        with sqlite3.connect(q.db) as conn:
            conn.execute("CREATE TABLE future (x)")
            conn.execute("PRAGMA user_version = 7")
        from podctl.queue.store import SCHEMA_VERSION

        words = [f"has schema 7; this podctl knows up to {SCHEMA_VERSION}: upgrade podctl"]
    before = q.db.read_bytes()
    for args in (["ls"], ["tick"], ["show", "1"],
                 ["add", "--slice", "v5p-8", str(SCRIPTS / "show_env.py")]):
        # `tick` (cron's) through a `podctl` process, the others in this process
        run = q if args == ["tick"] else q.here
        assert_one_line_error(run("queue", *args, check=False), 1, str(q.db), *words)
    assert q.db.read_bytes() == before
    assert not Path(f"{q.db}-wal").exists()


def test_queue_cancel_of_an_entry_that_already_ended_exits_non_zero_and_says_so(adding):
    q = adding
    added = json.loads(q.here("queue", "add", "--json", "--slice", "v5p-8", str(SCRIPTS / "show_env.py")).stdout)
    q.here("queue", "cancel", str(added["id"]))
    assert_one_line_error(q("queue", "cancel", str(added["id"]), check=False), 1,
                          f"entry {added['id']} had already ended (cancelled)")


def test_two_ticks_at_once_make_one_slice(q):
    q.here("queue", "add", "--slice", "v5p-8", "--queued", str(SCRIPTS / "many_lines.py"), "5")
    q.here("fake", "start")
    cmd = [sys.executable, "-m", "podctl", "queue", "tick"]
    procs = [subprocess.Popen(cmd, env=q.env, cwd=q.tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert q.admin().stats()["by_call"].get("queuedResources.create") == 1
    assert len(q.admin().resources()["queued_resources"]) == 1
    entries = q.settle()
    assert entries[0]["state"] == "succeeded"
    assert q.admin().stats()["by_call"].get("queuedResources.create") == 1


def test_a_tick_that_finds_the_lock_held_says_so_and_exits_0(adding):
    from podctl.queue.lock import QueueLock

    q = adding
    q.here("queue", "add", "--slice", "v5p-8", str(SCRIPTS / "many_lines.py"), "5")
    lock = QueueLock(q.tmp / "state")
    assert lock.acquire()
    try:
        proc = q("queue", "tick")
    finally:
        lock.release()
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [e["event"] for e in events] == ["another tick is running"]
    assert q.entries()[0]["state"] == "pending"
    q.here("queue", "cancel", "1")


def test_tick_output_off_a_terminal_is_json_lines(q):
    q.here("queue", "add", "--slice", "v5p-8", "--env", "SECRET=s3cr3t-value", str(SCRIPTS / "many_lines.py"), "5")
    out = ""
    for _ in range(200):
        proc = q("queue", "tick")
        out += proc.stdout
        if q.entries()[0]["state"] in TERMINAL:
            break
        time.sleep(0.2)
    q.settle()
    events = [json.loads(line) for line in out.splitlines()]  # every line is one object
    assert all({"timestamp", "level", "event"} <= set(e) for e in events)
    moves = [(e["from"], e["to"]) for e in events if e["event"] == "transition"]
    assert moves[0] == ("pending", "provisioning") and moves[-1] == ("running", "succeeded")
    assert any(e.get("run_id") for e in events if e["event"] == "transition")
    assert "\x1b" not in out and "s3cr3t-value" not in out


PHASES = ["provisioning-intent", "provisioning-sent", "starting-intent", "starting-sent",
          "ending-intent", "ending-sent"]


# the state an entry is in when a tick can meet each phase (podctl/queue/machine.py): the
# ticks that bring it there run in this process, only those that may meet it are processes
READY_FOR = {"provisioning": "pending", "starting": "provisioning", "ending": "running"}


@pytest.mark.parametrize("phase", PHASES)
def test_a_tick_killed_at_any_phase_is_finished_by_the_next(q, phase):
    q.here("queue", "add", "--slice", "v5p-8", str(SCRIPTS / "many_lines.py"), "20")
    ready = READY_FOR[phase.split("-")[0]]
    killed = False
    for _ in range(200):
        if q.entries()[0]["state"] != ready:
            q.here("queue", "tick")
            time.sleep(0.2)
            continue
        proc = q("queue", "tick", check=False, env={"PODCTL_QUEUE_KILL_AT": phase})
        if proc.returncode == -signal.SIGKILL:
            killed = True
            break
        assert proc.returncode == 0, proc.stderr
        time.sleep(0.2)
    assert killed
    entries = q.settle()
    e = entries[0]
    assert (e["state"], e["attempt"], e["exit_code"]) == ("succeeded", 1, 0)
    assert q.admin().stats()["by_call"]["nodes.create"] == 1  # one slice, never a second
    proc = q.here("logs", e["run_id"])  # the run started once: every line once
    assert [line.split("] ", 1)[1] for line in proc.stdout.splitlines()] == [f"0 {i}" for i in range(20)]


def test_tick_loop_ends_cleanly_on_sigterm(q):
    q.here("queue", "add", "--slice", "v5p-8", str(SCRIPTS / "many_lines.py"), "3")
    q.here("fake", "start")
    proc = subprocess.Popen([sys.executable, "-m", "podctl", "queue", "tick", "--loop", "1s"],
                            env=q.env, cwd=q.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while q.entries()[0]["state"] not in TERMINAL:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["event"] == "loop_stopped"
    assert q.settle()[0]["state"] == "succeeded"


def test_tick_loop_rides_out_a_20_s_gcs_outage_and_keeps_watching(q):
    q.here("queue", "add", "--slice", "v5p-8", str(SCRIPTS / "sleep_then_exit.py"), "25")
    q.here("fake", "start")
    proc = subprocess.Popen([sys.executable, "-m", "podctl", "queue", "tick", "--loop", "1s"],
                            env=q.env, cwd=q.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while q.entries()[0]["state"] != "running":
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.3)
    q.admin().gcs_outage(20.0)
    deadline = time.monotonic() + 150
    while q.entries()[0]["state"] not in TERMINAL:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.5)
    proc.send_signal(signal.SIGHUP)  # a closed terminal ends the loop as SIGTERM does
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "tick_failed" in out, out[-3000:]
    assert json.loads(out.splitlines()[-1])["event"] == "loop_stopped"
    assert q.settle()[0]["state"] == "succeeded"


def test_a_full_disk_says_free_space_and_never_advises_moving_the_queue_aside(tmp_path):
    """SQLite's own words for a full disk; the advice keeps the database (and so the
    slices its entries own) where it is."""
    from podctl.queue.store import _disk_trouble, full_disk_message

    error = sqlite3.OperationalError("database or disk is full")
    assert _disk_trouble(error)
    message = full_disk_message(tmp_path / "queue.db", error)
    assert "free some space" in message and "move it aside" not in message
