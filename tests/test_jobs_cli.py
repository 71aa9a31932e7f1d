"""`podctl run / logs / runs / exec` as separate processes on the fake daemon."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Podctl, assert_one_line_error, stop_fake_and_check

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture
def podctl(tmp_path: Path):
    cli = Podctl(tmp_path)
    cli.env["PODCTL_BACKEND"] = "fake"
    cli("up", "--slice", "v5p-16", "--name", "cli16")
    yield cli
    cli("down", "cli16", "--yes", check=False)
    stop_fake_and_check(cli)


def test_run_streams_host_lines_and_exits_with_the_jobs_code(podctl):
    # podctl's options come before the script; what follows it is the script's
    proc = podctl("run", "cli16", "--env", "FAIL_HOST=1", "--env", "FAIL_CODE=3", "--hosts", "all",
                  str(SCRIPTS / "exit_on_host.py"), check=False)
    assert proc.returncode == 3, proc.stderr
    assert "[host 0000] host 0 started" in proc.stdout
    assert "[host 0001] host 1 failing" in proc.stdout
    assert "host 0001 exited 3" in proc.stderr
    runs = json.loads(podctl("runs", "--json").stdout)
    assert runs[0]["state"] == "failed" and runs[0]["exit_code"] == 3


def test_secrets_never_reach_podctls_output(podctl):
    proc = podctl("run", "cli16", "--env", "API_TOKEN=hunter2-very-secret",
                  str(SCRIPTS / "show_env.py"), "PODCTL_RUN_ID")
    assert proc.returncode == 0
    assert "hunter2-very-secret" not in proc.stdout + proc.stderr
    listing = podctl("runs", "--json").stdout
    assert "hunter2-very-secret" not in listing and "API_TOKEN" in listing


def test_logs_after_the_client_was_killed_show_every_line(podctl):
    cmd = [sys.executable, "-m", "podctl", "run", "cli16", "--hosts", "all",
           str(SCRIPTS / "many_lines.py"), "3000"]
    client = subprocess.Popen(cmd, env=podctl.env, cwd=podctl.tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    run_id = None
    deadline = time.time() + 60
    started = False
    while not started and time.time() < deadline:
        line = client.stderr.readline()
        if line.startswith("podctl: run "):
            run_id = line.split()[2]
        started = line.startswith("podctl: started on all")
    client.send_signal(signal.SIGKILL)
    client.wait()
    assert run_id
    proc = podctl("logs", run_id, "--follow")
    for host in (0, 1):
        lines = [l.split("] ", 1)[1] for l in proc.stdout.splitlines() if l.startswith(f"[host {host:04d}]")]
        assert lines == [f"{host} {i}" for i in range(3000)]


def test_exec_runs_a_plain_command_everywhere(podctl):
    # a bare host: the system python3, no jax until a run's requirements ask for it
    proc = podctl("exec", "cli16", "--", "python3", "-c", "import sys; print(sys.executable)")
    assert sorted(proc.stdout.splitlines()) == ["[host 0000] /usr/bin/python3", "[host 0001] /usr/bin/python3"]
    proc = podctl("exec", "cli16", "--hosts", "1", "--", "bash", "-c", "exit 5", check=False)
    assert proc.returncode == 5 and "host 0001 exited 5" in proc.stderr


@pytest.mark.parametrize("args, code, words", [
    (["run", "cli16", "nope.py"], 1, ["no script"]),
    (["run", "nosuch", str(SCRIPTS / "show_env.py")], 1, ["no slice named 'nosuch'"]),
    (["run", "cli16", "--env", "BAD", str(SCRIPTS / "show_env.py")], 2, ["KEY=VALUE"]),
    (["run", "cli16", "--hosts", "7", str(SCRIPTS / "show_env.py")], 2, ["hosts 0-1"]),
    (["logs", "not-a-run"], 2, ["not a run id"]),
    (["logs", "cli16-20260101-000000-abcd"], 1, ["no run"]),
])
def test_bad_job_input(podctl, args, code, words):
    assert_one_line_error(podctl(*args, check=False), code, *words)


def test_a_slice_that_is_not_ready_is_refused(podctl):
    from podctl.fake.admin_client import FakeAdmin

    FakeAdmin(json.loads(podctl("fake", "status", "--json").stdout)["admin"]).set_capacity(0)
    podctl("up", "--slice", "v5p-8", "--name", "notyet", "--queued", "--no-wait")
    proc = podctl("run", "notyet", str(SCRIPTS / "show_env.py"), check=False)
    assert_one_line_error(proc, 1, "not ready")
    podctl("down", "notyet", "--yes")


def test_ctrl_c_stops_the_job_on_every_host(podctl):
    cmd = [sys.executable, "-m", "podctl", "run", "cli16", "--env", "FAIL_HOST=99",
           str(SCRIPTS / "exit_on_host.py")]
    client = subprocess.Popen(cmd, env=podctl.env, cwd=podctl.tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    run_id, deadline = None, time.time() + 60
    while time.time() < deadline:
        line = client.stderr.readline()
        if line.startswith("podctl: run "):
            run_id = line.split()[2]
        if line.startswith("podctl: started on all"):
            break
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=60)
    assert client.returncode == 130 and "stopped on every host" in err
    # both agents were told to stop: their statuses say so, and the replay ends
    proc = podctl("logs", run_id, "--follow", check=False)
    assert proc.returncode != 0 and "should have been stopped" not in proc.stdout
    runs = {r["run_id"]: r for r in json.loads(podctl("runs", "--json").stdout)}
    assert runs[run_id]["state"] == "stopped"


def test_detach_returns_the_run_id_and_logs_follow_it(podctl):
    proc = podctl("run", "cli16", "--detach", str(SCRIPTS / "many_lines.py"), "50")
    run_id = proc.stdout.strip()
    assert run_id.startswith("cli16-")
    follow = podctl("logs", run_id, "--follow", "--host", "1")
    assert [l for l in follow.stdout.splitlines()] == [f"[host 0001] 1 {i}" for i in range(50)]
