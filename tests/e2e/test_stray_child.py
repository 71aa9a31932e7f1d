"""A script that leaves children behind (a data loader, a TensorBoard, a server): the
run ends when the script exits, and a stop ends every process the script started.
As a user meets it: separate `podctl` processes on the fake daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Podctl, _share_env_signing_key, slice_on_daemon

SCRIPTS = Path(__file__).parents[1] / "scripts"
STRAY = str(SCRIPTS / "stray_child.py")


@pytest.fixture(scope="module")
def podctl(tmp_path_factory: pytest.TempPathFactory):
    """One daemon and v5p-16 "stray" for the module's cases: each starts and ends its own
    run on it, and none changes the slice (a daemon and a slice each cost about 4 s of CPU)."""
    tmp = tmp_path_factory.mktemp("stray")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    with slice_on_daemon(Podctl(tmp), "v5p-16", "stray") as cli:
        yield cli


def processes_of(run_id: str) -> list[str]:
    """The live processes of RUN_ID on this machine (the fake's hosts are local): its
    agents (the run's directory in their argv) and whatever its script started
    (PODCTL_RUN_ID in their environment)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
            cmdline = Path(entry.path, "cmdline").read_bytes()
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2:][:1] in (b"Z", b"X"):
            continue
        if run_id.encode() in cmdline or f"PODCTL_RUN_ID={run_id}".encode() in environ.split(b"\0"):
            argv = cmdline.replace(b"\0", b" ")[:80].decode(errors="replace")
            found.append(f"{entry.name}: {argv}")
    return found


def left_alive(run_id: str, limit: float = 30.0) -> list[str]:
    """What of RUN_ID is still alive once its agents had LIMIT seconds to finish exiting."""
    deadline = time.monotonic() + limit
    while (alive := processes_of(run_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def start_client(podctl: Podctl, *args: str) -> tuple[subprocess.Popen, str]:
    """`podctl run ...` in the background, returned once every host has started."""
    client = subprocess.Popen([sys.executable, "-m", "podctl", "run", *args], env=podctl.env,
                              cwd=podctl.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id, deadline = None, time.time() + 90
    while time.time() < deadline:
        line = client.stderr.readline()
        if line.startswith("podctl: run "):
            run_id = line.split()[2]
        if line.startswith("podctl: started on all") or not line:
            break
    assert run_id, "the run did not start"
    return client, run_id


def wait_for_line(podctl: Podctl, run_id: str, text: str, hosts: int = 2) -> None:
    """Until TEXT is in the lines of RUN_ID from HOSTS hosts, read from the fake's GCS in
    this process (a `podctl logs` process each half second cost about a second of CPU
    each; the CLI's own `logs` is test_jobs_cli's)."""
    import asyncio

    from podctl.base.settings import FAKE_BUCKET
    from podctl.cloud.storage import Storage
    from podctl.jobs.logs import LogReader

    storage = Storage.connect(FAKE_BUCKET, endpoint=podctl.json("fake", "status")["gcs"])
    deadline = time.time() + 90
    while time.time() < deadline:
        lines: list[str] = []
        asyncio.run(LogReader(storage, run_id, hosts, lambda _, line: lines.append(line)).follow(follow=False))
        if sum(text in line for line in lines) >= hosts:
            return
        time.sleep(0.5)
    raise AssertionError(f"never saw {text!r} from {hosts} hosts")


def test_run_returns_with_the_scripts_exit_code_when_it_exits_and_its_children_are_ended(podctl):
    # the children sleep 300 s; podctl's own limit here is 120 s: a run that waited
    # for them (for the pipe they hold) would never return in time
    proc = podctl("run", "stray", "--hosts", "all", STRAY, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "[host 0000] children started" in proc.stdout
    assert "[host 0001] children started" in proc.stdout
    assert "left 2 processes running; ending them" in proc.stdout
    run_id = next(l.split()[2] for l in proc.stderr.splitlines() if l.startswith("podctl: run "))
    assert left_alive(run_id) == []
    assert {r["run_id"]: r for r in json.loads(podctl("runs", "--json").stdout)}[run_id]["state"] == "succeeded"


def test_ctrl_c_leaves_no_agent_and_no_child_of_the_script_alive(podctl):
    client, run_id = start_client(podctl, "stray", "--hosts", "all", STRAY, "300")
    try:
        wait_for_line(podctl, run_id, "children started")
        client.send_signal(signal.SIGINT)
        _, err = client.communicate(timeout=60)
    finally:  # a failed wait must not leave the client following for 300 s
        if client.poll() is None:
            client.send_signal(signal.SIGINT)
            client.communicate(timeout=60)
    assert client.returncode == 130 and "stopped on every host" in err
    assert left_alive(run_id) == []


def test_podctl_stop_ends_a_detached_run_and_every_process_its_script_started(podctl):
    run_id = podctl("run", "stray", "--detach", STRAY, "300").stdout.strip()
    wait_for_line(podctl, run_id, "children started")
    proc = podctl("stop", run_id)
    assert f"run {run_id} stopped on every host" in proc.stderr
    assert left_alive(run_id) == []
    record = {r["run_id"]: r for r in json.loads(podctl("runs", "--json").stdout)}[run_id]
    assert record["state"] == "stopped"
    # the hosts' statuses say podctl stopped them; a second stop has nothing to do
    again = podctl("stop", run_id)
    assert "is not running" in again.stderr
