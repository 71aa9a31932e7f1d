"""Money safety as a user meets it: every way a podctl process is told to stop undoes
what it created; a deleted slice is not made again; every budget is kept or refused.
Each case runs the CLI in its own process against the fake cloud's daemon."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podctl.fake.admin_client import FakeAdmin
from tests.conftest import Podctl


def _admin(podctl: Podctl) -> FakeAdmin:
    podctl("fake", "start")
    return FakeAdmin(podctl.json("fake", "status")["admin"])


def _spawn(podctl: Podctl, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "podctl", *args], env=podctl.env, cwd=podctl.tmp,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _until(test, what: str, limit: float = 60.0) -> None:
    """Poll TEST until true; LIMIT only turns a hang into a failure that says what."""
    end = time.monotonic() + limit
    while not test():
        if time.monotonic() > end:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


def _calls(admin: FakeAdmin, call: str) -> int:
    return admin.stats()["by_call"].get(call, 0)


@pytest.mark.parametrize("phase", ["create request", "wait"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_during_up_deletes_the_slice_up_created_and_a_second_signal_is_ignored(
        podctl, sig, phase):
    admin = _admin(podctl)
    admin.set_timings(node_create=1e6)  # stays CREATING: the wait goes on until the signal
    admin.reset_stats()
    if phase == "create request":
        admin.set_latency(1.0)  # the create request is in flight for a second
    proc = _spawn(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "sig")
    if phase == "create request":
        _until(lambda: _calls(admin, "nodes.create") >= 1, "the create request was sent")
    else:
        _until(lambda: _calls(admin, "operations.get") >= 1, "up waited on its operation")
    proc.send_signal(sig)
    admin.set_latency(0.5)  # the undo's calls take a while: a second signal lands inside it
    time.sleep(0.2)
    proc.send_signal(sig)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    admin.set_latency(0)
    assert proc.returncode == 128 + sig, err
    assert "deleting sig, which this failed `up` created" in err
    assert f"interrupted ({signal.Signals(sig).name})" in err and "Traceback" not in err
    assert _calls(admin, "nodes.delete") == 1
    _until(lambda: admin.is_empty(), "the slice was deleted")
