"""A host slower than its peers, step after step (issue 15): named from what each host
does alone in a step, and with `--on-slow-host recover` left behind: the run
checkpoints, the slice is made again on other hardware and the run resumes."""

from __future__ import annotations

import json

import pytest

from podctl.base.errors import UsageError
from podctl.fake.admin.admin_client import FakeAdmin
from podctl.steps.slow_hosts import SlowHostPolicy, SlowHostWatch, paces, slow_hosts
from tests.cli_in_process import nothing_started, podctl_here
from tests.conftest import assert_one_line_error
from tests.e2e.test_recovery import TEMPLATE, TINY, run_with_fault


def test_slow_host_options_bad_input(podctl, tmp_path):
    """Refused before any cloud is asked: the first through a `podctl` process, the others
    through the same command in this process (tests/cli_in_process.py); none starts a fake."""
    podctl.env["PODCTL_BACKEND"] = "fake"
    script = str(TEMPLATE)
    assert_one_line_error(podctl("run", "x", "--on-slow-host", "recover", script, check=False), 2,
                          "--on-slow-host recover makes the slice again and relaunches the run: "
                          "it goes with --recover N.")
    assert_one_line_error(podctl_here(tmp_path, "run", "x", "--detach", "--on-slow-host", "recover", script,
                                      env=podctl.env), 2, "--on-slow-host recover needs podctl to watch")
    assert_one_line_error(podctl_here(tmp_path, "run", "x", "--slow-host-after", "soon", script,
                                      env=podctl.env), 2, "--slow-host-after")
    assert nothing_started(tmp_path)
    with pytest.raises(UsageError, match="--on-slow-host 'later'"):
        SlowHostPolicy("later")


@pytest.mark.host_env
def test_a_slow_host_is_named_and_left_behind(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    admin = FakeAdmin(podctl.json("fake", "start")["admin"])  # start's own answer: no `fake status`
    podctl("up", "--slice", "v5p-16", "--name", "slowp")
    code, log, out = run_with_fault(
        podctl, ["run", "slowp", "--recover", "1", "--on-slow-host", "recover",
                 "--slow-host-after", "1s", "--json", str(TEMPLATE), *TINY, "--steps", "150",
                 "--checkpoint-every", "20"], "\"step\": 5, \"loss\"",
        lambda err: admin.slow("slowp", 1, factor=5))
    assert code == 0, log[-4000:]
    result = json.loads(out)
    assert len(result["attempts"]) == 2, log[-6000:]
    first, second = result["attempts"]
    assert "host 0001 (JAX process 1) is slow: " in log
    assert "checkpointing and ending the attempt" in log
    assert first["reason"].startswith("host 0001 (JAX process 1) is slow")
    assert "worker 1 is a bad host" in log and "creating slowp again" in log
    # the SIGTERM made a checkpoint at the step it reached: nothing is done twice
    assert first["steps_lost"] == 0 and second["start_step"] == first["last_step"]
    assert second["last_step"] == 150
    mine = next(r for r in podctl.json("runs") if r["run_id"] == result["run_id"])
    assert [h["host"] for h in mine["extra"]["slow_hosts"]] == [1]
    assert mine["extra"]["bad_hosts"] == [1]
    # the goodput report names it too, in the attempt it slowed
    named = podctl.json("goodput", result["run_id"])["slow_hosts"]
    assert [(h["attempt"], h["host"]) for h in named] == [(first["run_id"], 1)]
    assert named[0]["ratio"] >= 2
    podctl("down", "slowp", "--yes")
