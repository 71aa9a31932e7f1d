"""Every stop signal takes the stop path however podctl was started: in the foreground,
as a background job of a script (which a shell starts with SIGINT ignored), under
`nohup` (SIGHUP ignored) and under `setsid`; for `up`, `run`, `queue tick` and the
Python API. A signal the parent ignored stays ignored, and each case first reads the
process's signal dispositions from /proc, so a handler left stray (a stop signal at its
default, or one the parent ignored taken back) fails the test by name.

One fake daemon for the module; `up` never gets a slice to READY (its create takes
forever), `run` shares one slice, `queue tick` needs none."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.conftest import Podctl, stop_fake_and_check
from tests.e2e.test_stray_child import left_alive

SCRIPTS = Path(__file__).parents[1] / "scripts"
SIGINT, SIGTERM, SIGHUP = signal.SIGINT, signal.SIGTERM, signal.SIGHUP

# How a parent starts podctl ("$@"), writing podctl's own pid to $PIDFILE.
MODES = {
    "foreground": 'echo $$ > "$PIDFILE"; exec "$@"',
    "background": '"$@" & echo $! > "$PIDFILE"; wait $!',  # bash -c: a job with SIGINT ignored
    "nohup": 'echo $$ > "$PIDFILE"; exec nohup "$@"',
    "setsid": 'echo $$ > "$PIDFILE"; exec setsid "$@"',
}
IGNORED_BY = {"background": SIGINT, "nohup": SIGHUP}
# Every stop signal in every mode, but the one the mode's parent ignores (sent first,
# in each case of that mode, and it must change nothing).
CASES = [pytest.param(mode, sig, id=f"{mode}-{sig.name}") for mode in MODES
         for sig in (SIGINT, SIGTERM, SIGHUP) if IGNORED_BY.get(mode) != sig]


class Daemon:
    def __init__(self, cli: Podctl):
        self.cli = cli
        cli.env["PODCTL_BACKEND"] = "fake"
        cli("fake", "start")
        self.admin = FakeAdmin(cli.json("fake", "status")["admin"])

    def calls(self, call: str) -> int:
        return self.admin.stats()["by_call"].get(call, 0)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    cli = Podctl(tmp_path_factory.mktemp("signals"))
    (cli.tmp / "home").mkdir()
    yield Daemon(cli)
    stop_fake_and_check(cli)


_STARTED: list[Started] = []


@pytest.fixture(autouse=True)
def _ends_what_it_started() -> Iterator[None]:
    """A case that failed half-way leaves no podctl (or its parent) running."""
    yield
    while _STARTED:
        started = _STARTED.pop()
        if started.proc.poll() is None:
            for pid in (started.pid, started.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            started.proc.communicate(timeout=30)


class Started:
    """podctl started by a parent as MODE says: the parent's process and podctl's pid."""

    def __init__(self, daemon: Daemon, mode: str, argv: list[str]):
        pidfile = daemon.cli.tmp / f"pid-{time.monotonic_ns()}"
        self.proc = subprocess.Popen(["bash", "-c", MODES[mode], "bash", *argv],
                                     env={**daemon.cli.env, "PIDFILE": str(pidfile)}, cwd=daemon.cli.tmp,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid  # the parent's, until podctl's own is known
        _STARTED.append(self)  # ended at the test's end if it is still running
        until(lambda: pidfile.exists() and pidfile.read_text().strip(), "podctl started")
        self.pid = int(pidfile.read_text())
        self.mode = mode

    def dispositions(self) -> dict[str, str]:
        """What podctl's process does with each stop signal now, from the kernel's view."""
        fields = dict(line.split(":\t", 1) for line in
                      Path(f"/proc/{self.pid}/status").read_text().splitlines() if ":\t" in line)
        ignored, caught = int(fields["SigIgn"], 16), int(fields["SigCgt"], 16)
        return {sig.name: "ignored" if ignored >> (sig - 1) & 1 else
                "caught" if caught >> (sig - 1) & 1 else "default" for sig in (SIGINT, SIGTERM, SIGHUP)}

    def expected(self) -> dict[str, str]:
        ignored = IGNORED_BY.get(self.mode)
        return {sig.name: "ignored" if sig == ignored else "caught" for sig in (SIGINT, SIGTERM, SIGHUP)}

    def stop(self, sig: signal.Signals) -> tuple[str, str]:
        """Check no handler is stray, send the signal the parent ignored (nothing may
        happen), then SIG -> podctl's stdout and stderr once it has ended."""
        assert self.dispositions() == self.expected()
        if self.mode in IGNORED_BY:
            os.kill(self.pid, IGNORED_BY[self.mode])
        os.kill(self.pid, sig)
        return self.proc.communicate(timeout=60)


def until(test, what: str, limit: float = 60.0) -> None:
    """Poll TEST until true; LIMIT only turns a hang into a failure that says what."""
    end = time.monotonic() + limit
    while not test():
        if time.monotonic() > end:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


def podctl_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "podctl", *args]


def _undone(daemon: Daemon, name: str) -> None:
    """The slice NAME that a stopped `up` was making was deleted, once."""
    assert daemon.calls("nodes.delete") == 1
    daemon.admin.set_timings(node_create=90.0)
    until(daemon.admin.is_empty, f"{name} was deleted")


# ---- up ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,sig", CASES)
def test_a_stop_signal_during_up_deletes_the_slice_however_podctl_was_started(daemon, mode, sig):
    name = f"u-{mode[:2]}-{sig.name[3:].lower()}"
    daemon.admin.set_timings(node_create=1e6)  # CREATING until the signal
    daemon.admin.reset_stats()
    started = Started(daemon, mode, podctl_argv("up", "--slice", "v5p-8", "--name", name))
    until(lambda: daemon.calls("operations.get") >= 1, "up waits on its operation")
    _, err = started.stop(sig)
    assert started.proc.returncode == 128 + sig, err
    assert f"deleting {name}, which this failed `up` created" in err, err
    assert f"podctl: interrupted ({sig.name})" in err and "Traceback" not in err, err
    _undone(daemon, name)


# ---- the Python API ---------------------------------------------------------------------

_API_UP = """
import json, signal, sys
import podctl

def handlers():
    return [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]

before = handlers()
try:
    with podctl.connect("fake") as cloud:
        cloud.up("v5p-8", name=sys.argv[1])
    print("up returned", flush=True)
except KeyboardInterrupt:
    print(json.dumps({"interrupted": True, "handlers_restored": handlers() == before}), flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize("mode,sig", CASES)
def test_a_stop_signal_during_cloud_up_deletes_the_slice_and_puts_the_handlers_back(daemon, mode, sig):
    name = f"a-{mode[:2]}-{sig.name[3:].lower()}"
    daemon.admin.set_timings(node_create=1e6)
    daemon.admin.reset_stats()
    started = Started(daemon, mode, [sys.executable, "-c", _API_UP, name])
    until(lambda: daemon.calls("operations.get") >= 1, "cloud.up() waits on its operation")
    out, err = started.stop(sig)
    assert started.proc.returncode == 3, err
    assert json.loads(out.splitlines()[-1]) == {"interrupted": True, "handlers_restored": True}
    _undone(daemon, name)


_NOTEBOOK_UP = """
import asyncio, sys
import podctl

async def cell():  # a notebook's cell: podctl called inside a running event loop
    with podctl.connect("fake") as cloud:
        cloud.up("v5p-8", name=sys.argv[1])

try:
    asyncio.run(cell())
    print("up returned", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_ctrl_c_inside_asyncio_run_during_cloud_up_deletes_the_slice_up_was_making(daemon):
    daemon.admin.set_timings(node_create=1e6)
    daemon.admin.reset_stats()
    started = Started(daemon, "foreground", [sys.executable, "-c", _NOTEBOOK_UP, "nb-up"])
    until(lambda: daemon.calls("operations.get") >= 1, "cloud.up() waits on its operation")
    out, err = started.stop(SIGINT)
    assert started.proc.returncode == 3 and out.splitlines()[-1] == "interrupted", err
    _undone(daemon, "nb-up")


_NOTEBOOK_BETWEEN = """
import asyncio, sys, time
import podctl

async def cell():
    with podctl.connect("fake") as cloud:
        with cloud.up("v5p-8", name=sys.argv[1]):
            print("up", flush=True)
            time.sleep(5)  # the cell's own work: a Ctrl-C here is asyncio's, a cancel
            cloud.slices()  # podctl's next call sees it
            print("slices returned", flush=True)

try:
    asyncio.run(cell())
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_ctrl_c_inside_asyncio_run_between_podctl_calls_ends_the_next_one_and_deletes_the_slice(
        daemon):
    daemon.admin.set_timings(node_create=90.0)
    started = Started(daemon, "foreground", [sys.executable, "-c", _NOTEBOOK_BETWEEN, "nb-between"])
    assert started.proc.stdout is not None
    assert started.proc.stdout.readline().strip() == "up"
    out, err = started.stop(SIGINT)
    assert started.proc.returncode == 3 and out.splitlines() == ["interrupted"], err
    until(daemon.admin.is_empty, "the with block deleted nb-between")


# ---- queue tick -------------------------------------------------------------------------

@pytest.mark.parametrize("mode,sig", CASES)
def test_a_stop_signal_ends_queue_tick_loop_after_its_pass_however_podctl_was_started(daemon, mode, sig):
    started = Started(daemon, mode, podctl_argv("queue", "tick", "--loop", "1s"))  # an empty queue
    assert started.proc.stdout is not None
    until(lambda: "tick_done" in started.proc.stdout.readline(), "a pass was done")
    out, err = started.stop(sig)
    assert started.proc.returncode == 0, err  # as documented: the loop ends after its pass
    assert json.loads(out.splitlines()[-1])["event"] == "loop_stopped", out


# ---- run --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run_slice(daemon: Daemon) -> Iterator[str]:
    daemon.admin.set_timings(node_create=90.0)
    daemon.cli("up", "--slice", "v5p-8", "--name", "sigrun")
    yield "sigrun"
    daemon.cli("down", "sigrun", "--yes")


def _run_stopped_by(daemon: Daemon, slice_name: str, mode: str, sig: signal.Signals, via: str = "ssh") -> None:
    started = Started(daemon, mode, podctl_argv("run", slice_name, "--via", via, str(SCRIPTS / "ticker.py"),
                                                "3000", "0.1"))
    assert started.proc.stderr is not None
    run_id = None
    for line in started.proc.stderr:
        if line.startswith("podctl: run "):
            run_id = line.split()[2]
        if line.startswith("podctl: started on all"):
            break
    assert run_id, "the run did not start"
    _, err = started.stop(sig)
    assert started.proc.returncode == 128 + sig, err
    assert f"podctl: interrupted ({sig.name}); run {run_id} stopped on every host" in err, err
    assert left_alive(run_id) == []
    runs = {r["run_id"]: r for r in daemon.cli.json("runs")}
    assert runs[run_id]["state"] == "stopped"


# Each mode, each signal: the background job's SIGTERM is the case scripts, CI and
# supervisors meet; a run takes a while to start, so not the whole matrix.
@pytest.mark.parametrize("mode,sig", [
    pytest.param("background", SIGTERM, id="background-SIGTERM"),
    pytest.param("nohup", SIGINT, id="nohup-SIGINT"),
    pytest.param("setsid", SIGHUP, id="setsid-SIGHUP"),
])
def test_a_stop_signal_ends_run_and_every_process_of_it_on_the_hosts(daemon, run_slice, mode, sig):
    _run_stopped_by(daemon, run_slice, mode, sig)


def test_sigterm_to_a_foreground_run_exits_143_with_the_run_stopped(daemon, run_slice):
    _run_stopped_by(daemon, run_slice, "foreground", SIGTERM)


# Through the watchers, a stop is the halt request in GCS that every agent polls for: no
# connection to the hosts is open when the signal lands, and none is opened for it.
@pytest.mark.parametrize("mode,sig", [
    pytest.param("foreground", SIGINT, id="foreground-SIGINT"),
    pytest.param("background", SIGTERM, id="background-SIGTERM"),
    pytest.param("setsid", SIGHUP, id="setsid-SIGHUP"),
])
def test_a_stop_signal_ends_a_run_started_through_the_watchers_on_every_host(daemon, run_slice, mode, sig):
    sessions = sum(h["sessions_total"] for h in daemon.admin.host_stats(run_slice))
    _run_stopped_by(daemon, run_slice, mode, sig, via="boot")
    assert sum(h["sessions_total"] for h in daemon.admin.host_stats(run_slice)) == sessions


_NOTEBOOK_WAIT = """
import asyncio, sys
import podctl

async def cell():  # a notebook's cell: podctl called inside a running event loop
    with podctl.connect("fake") as cloud:
        run = cloud.slice(sys.argv[1]).run(sys.argv[2], args=["3000", "0.1"])
        print(run.run_id, flush=True)
        run.wait()

try:
    asyncio.run(cell())
    print("wait returned", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_ctrl_c_inside_asyncio_run_during_run_wait_stops_the_run_on_every_host(daemon, run_slice):
    started = Started(daemon, "foreground",
                      [sys.executable, "-c", _NOTEBOOK_WAIT, run_slice, str(SCRIPTS / "ticker.py")])
    assert started.proc.stdout is not None
    run_id = started.proc.stdout.readline().strip()  # printed once it started on every host
    out, err = started.stop(SIGINT)
    assert started.proc.returncode == 3 and out.splitlines()[-1] == "interrupted", err
    assert left_alive(run_id) == []
    assert {r["run_id"]: r for r in daemon.cli.json("runs")}[run_id]["state"] == "stopped"


# The Ctrl-C lands after run() returned and before wait() began (asyncio.run's own
# handler takes it and cancels the cell's task): the wait that follows still stops the
# run on every host before the cell ends, as a Ctrl-C during the wait does.
# BUSY: podctl's loop is held up meanwhile (as on a loaded machine), so that the wait's
# cancel reaches its task before that task's first step.
_NOTEBOOK_CTRL_C_BEFORE_WAIT = _NOTEBOOK_WAIT.replace("        run.wait()", """\
        import os, signal, time
        if sys.argv[3] == "busy":
            cloud._loop.loop.call_soon_threadsafe(time.sleep, 1.0)
        os.kill(os.getpid(), signal.SIGINT)
        run.wait()""")


@pytest.mark.parametrize("loop", ["busy", "idle"])
def test_ctrl_c_inside_asyncio_run_just_before_run_wait_stops_the_run_on_every_host(daemon, run_slice, loop):
    assert "os.kill" in _NOTEBOOK_CTRL_C_BEFORE_WAIT
    proc = subprocess.run([sys.executable, "-c", _NOTEBOOK_CTRL_C_BEFORE_WAIT, run_slice,
                           str(SCRIPTS / "ticker.py"), loop], env=daemon.cli.env, cwd=daemon.cli.tmp,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    run_id, *_ = proc.stdout.splitlines()
    assert proc.returncode == 3 and proc.stdout.splitlines()[-1] == "interrupted", proc.stderr
    assert left_alive(run_id) == []
    assert {r["run_id"]: r for r in daemon.cli.json("runs")}[run_id]["state"] == "stopped"
