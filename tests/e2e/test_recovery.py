"""`podctl run --recover N`: a preempted run is relaunched on a new slice from its
latest checkpoint, through the CLI and the fake cloud's daemon."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.conftest import Podctl, assert_one_line_error

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "train_pjit.py"
SCRIPTS = Path(__file__).parents[1] / "scripts"
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "32",
        "--seq-len", "16", "--batch", "8", "--lr", "1e-2"]


def _start(cli: Podctl, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "podctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli.env, cwd=cli.tmp,
                            stdin=subprocess.DEVNULL)


def _collect(stream, lines: list[str]) -> threading.Thread:
    thread = threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True)
    thread.start()
    return thread


def _wait_for(lines: list[str], text: str, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in list(lines)):
        assert proc.poll() is None, "".join(lines)[-3000:]
        assert time.monotonic() < deadline, f"no {text!r} in:\n" + "".join(lines)[-3000:]
        time.sleep(0.2)


def run_with_fault(cli: Podctl, args: list[str], wait_text: str, fault, *,
                   timeout: float = 900, then: float = 300) -> tuple[int, str, str]:
    """`podctl ARGS` followed to its end: FAULT(its stderr lines so far) once WAIT_TEXT
    is on its stderr (up to TIMEOUT: under pytest-xdist this may be the session's first
    run on bare hosts, which builds the template's env from the package index), then up
    to THEN seconds for it to end. FAULT may return a callable, called after the run
    ended or was killed (to undo the fault). Returns (exit code, stderr, stdout)."""
    proc = _start(cli, *args)
    err: list[str] = []
    out: list[str] = []
    readers = [_collect(proc.stderr, err), _collect(proc.stdout, out)]  # the only readers
    undo = None
    try:
        _wait_for(err, wait_text, proc, timeout=timeout)
        undo = fault(err)
        proc.wait(timeout=then)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if callable(undo):
            undo()
    for reader in readers:
        reader.join(timeout=10)
    return proc.returncode, "".join(err), "".join(out)


@pytest.mark.host_env
def test_a_preempted_run_recovers_from_its_last_checkpoint(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    admin = FakeAdmin(podctl.json("fake", "status")["admin"])
    podctl("up", "--slice", "v5p-16", "--name", "rec")
    _a_code_error_is_not_recovered(podctl)  # on the same slice: a daemon and a slice fewer
    code, log, out = run_with_fault(
        podctl, ["run", "rec", "--recover", "1", "--json", str(TEMPLATE), *TINY, "--steps", "24",
                 "--checkpoint-every", "4"], '"kind": "checkpoint", "step": 8',
        lambda err: admin.preempt("rec"))
    assert code == 0, log[-4000:]
    result = json.loads(out)
    first, second = result["attempts"]
    assert result["recoveries"] == 1 and result["exit_code"] == 0
    assert first["reason"].startswith("slice ") and second["reason"] is None
    # The second attempt went on from the first's last complete checkpoint (the one
    # before the save that was under way, or the one SIGTERM made), not from 0...
    assert second["start_step"] >= 4
    assert second["last_step"] == 24
    # ...so only the steps after that checkpoint were done twice.
    assert first["steps_lost"] == max(0, first["last_step"] - second["start_step"])
    assert first["steps_lost"] == 0  # the notice (SIGTERM) made a checkpoint at once
    assert "recovering (attempt 2 of 2)" in log and "creating rec again" in log
    listed = podctl("runs").stdout
    assert f"{result['run_id']}" in listed and "1 recovery" in listed
    assert second["run_id"] not in listed  # an attempt, shown with its run
    # `podctl logs RUN_ID` shows both attempts, the second starting where it resumed.
    replay = podctl("logs", result["run_id"], "--host", "0")
    assert f"attempt 2 of 2: run {second['run_id']}" in replay.stderr
    starts = [json.loads(line.split("] ", 1)[1])["start_step"] for line in replay.stdout.splitlines()
              if '"kind": "config"' in line]
    assert starts == [0, second["start_step"]]
    ckpts = podctl.json("ckpt", "ls", result["run_id"])["checkpoints"]
    assert ckpts[-1]["step"] == 24 and ckpts[-1]["complete"]
    _check_goodput(podctl, result["run_id"], first, second)
    podctl("down", "rec", "--yes")


def _steps(podctl, run_id: str) -> list[dict]:
    lines = podctl("logs", run_id, "--host", "0").stdout.splitlines()
    return [json.loads(line.split("] ", 1)[1]) for line in lines if '"kind": "step"' in line]


def _check_goodput(podctl, run_id: str, first: dict, second: dict) -> None:
    """The buckets add up to the run's billed time (within a second each); wasted
    progress is the steps redone times the step time; recovery is the time from the
    preemption (the first attempt's end) to the first step after it."""
    import statistics

    report = podctl.json("goodput", run_id)
    buckets = report["buckets"]
    assert report["attempts"] == 2 and 0 < report["goodput"] < 1
    total = sum(b["seconds"] for b in buckets.values())
    assert abs(total - report["total_seconds"]) <= len(buckets) * 1.0
    assert abs(total - podctl.json("cost", run_id)["billed_seconds"]) <= len(buckets) * 1.0
    step_time = statistics.median(s["step_time_s"] for s in _steps(podctl, first["run_id"])
                                  if not s.get("compile"))
    assert buckets["wasted"]["seconds"] == pytest.approx(first["steps_lost"] * step_time, abs=1e-3)
    resumed = _steps(podctl, second["run_id"])[0]["t"]
    assert buckets["recovery"]["seconds"] == pytest.approx(resumed - first["ended"], abs=1.0)
    assert buckets["productive"]["seconds"] > 0 and buckets["setup"]["seconds"] > 0
    chips = report["chips"]
    assert buckets["productive"]["chip_hours"] == pytest.approx(
        buckets["productive"]["seconds"] / 3600 * chips, rel=1e-3)
    assert "goodput" in podctl("runs").stdout


def _a_code_error_is_not_recovered(podctl: Podctl) -> None:
    """Host 0's script exits 3 (the other host waits): the script's own error, not the
    slice's, so `--recover 2` does not relaunch it; the slice is left as it was."""
    proc = podctl("run", "rec", "--recover", "2", "--json", "--env", "FAIL_HOST=0",
                  "--env", "FAIL_CODE=3", str(SCRIPTS / "exit_on_host.py"), check=False)
    assert proc.returncode == 3, proc.stderr
    result = json.loads(proc.stdout)
    assert len(result["attempts"]) == 1 and result["recoveries"] == 0
    assert result["attempts"][0]["reason"] is None
    assert "creating rec again" not in proc.stderr and "recovering" not in proc.stderr


def test_recover_bad_input(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    assert_one_line_error(podctl("run", "x", "--recover", "1", "--detach", "x.py", check=False), 2,
                          "--recover needs podctl to watch")
    assert_one_line_error(podctl("run", "x", "--retry-errors", "x.py", check=False), 2,
                          "--retry-errors goes with --recover")
    proc = podctl("run", "x", "--recover", "-1", "x.py", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


    assert_one_line_error(podctl("run", "x", "--elastic", "x.py", check=False), 2,
                          "--elastic goes with --recover N")
    assert_one_line_error(podctl("run", "x", "--recover", "1", "--min-slices", "2", "x.py", check=False),
                          2, "--min-slices goes with --elastic")
    assert_one_line_error(podctl("run", "x", "--recover", "1", "--elastic", "--grow-deadline", "soon",
                                 "x.py", check=False), 2, "--grow-deadline")
    proc = podctl("run", "x", "--recover", "1", "--elastic", "--min-slices", "0", "x.py", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
