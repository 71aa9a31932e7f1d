"""`podctl demo` end to end, and the checkpoints it leaves through `podctl ckpt`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Podctl, assert_one_line_error

REPO = Path(__file__).resolve().parents[1]


def _demo(cli: Podctl, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "podctl", "demo", *args], capture_output=True,
                          text=True, env=cli.env, stdin=subprocess.DEVNULL, timeout=1500, cwd=cli.tmp)


@pytest.mark.host_env
def test_demo_trains_resumes_and_its_checkpoints_can_be_pulled(podctl, tmp_path):
    """With a fake cloud already running, the demo uses it and leaves it running (empty),
    so that its runs' checkpoints can be listed and pulled afterwards."""
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    proc = _demo(podctl, "--steps", "12", "--more-steps", "6", "--checkpoint-every", "4", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    first, resumed = summary["run_ids"]
    assert summary["first_steps"] == [0, 12]
    assert summary["resumed_steps"] == [12, 18]  # from the last checkpoint, not from 0
    assert summary["final_loss"] < summary["first_loss"]
    assert summary["checkpoint_steps"] == [12, 16, 18]  # --keep 3 of 4, 8, 12, 16, 18
    assert set(summary["phases"]) >= {"up", "bundle", "start", "train", "resume", "down"}
    assert "step  10  loss" in proc.stderr  # the logs were streamed
    assert podctl.json("ls") == []  # the demo's slice is gone

    listed = podctl.json("ckpt", "ls", resumed)
    assert listed["directory"].endswith(f"/podctl/runs/{first}/checkpoints")  # --resume shares it
    assert [c["step"] for c in listed["checkpoints"] if c["complete"]] == [12, 16, 18]
    assert "complete" in podctl("ckpt", "ls", first).stdout

    out = tmp_path / "pulled"
    pulled = podctl("ckpt", "pull", resumed, str(out))
    assert "pulled step 18" in pulled.stdout
    step_dir = out / "18"
    assert (step_dir / "commit_success.txt").is_file()
    # What was pulled is a checkpoint orbax restores, on this machine's one device.
    code = ("import sys, jax, orbax.checkpoint as ocp\n"
            "c = ocp.StandardCheckpointer()\n"
            "meta = c.metadata(sys.argv[1])\n"
            "meta = getattr(meta, 'item_metadata', meta)\n"
            "one = jax.sharding.SingleDeviceSharding(jax.devices()[0])\n"
            "target = jax.tree_util.tree_map(\n"
            "    lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), meta)\n"
            "print(int(c.restore(sys.argv[1], target)['step']))")
    items = [p for p in step_dir.iterdir() if p.is_dir()]
    restored = subprocess.run([sys.executable, "-c", code, str(items[0])], capture_output=True,
                              text=True, timeout=120)
    assert restored.returncode == 0 and restored.stdout.strip().splitlines()[-1] == "18", restored.stderr[-2000:]

    assert_one_line_error(podctl("ckpt", "pull", resumed, str(out), "--step", "5", check=False), 2,
                          "no checkpoint step 5", "12, 16, 18")
    assert_one_line_error(podctl("ckpt", "ls", "not-a-run", check=False), 2, "not a run id")
    assert_one_line_error(podctl("ckpt", "ls", "x-v5p-8-20260101-000000-abcd", check=False), 1,
                          "no run")
    (podctl.tmp / "x.py").write_text("print(1)\n")  # a script that exists: the --resume check speaks
    assert_one_line_error(podctl("--backend", "fake", "run", "nope", "--resume", "bad", "x.py",
                                 check=False), 2, "--resume 'bad' is not a run id")


@pytest.mark.parametrize("bad", [["--steps", "0"], ["--checkpoint-every", "0"]])
def test_demo_bad_input(podctl, bad):
    proc = _demo(podctl, *bad)
    assert_one_line_error(proc, 2, "at least 1")


@pytest.mark.host_env
def test_readme_main_command_is_the_demo_and_leaves_nothing_running(podctl):
    """README's main command, as written there, from nothing: it starts the fake cloud,
    and stops it again at the end."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("Run the main job", 1)[1].split("\n\n", 2)[1]
    command = block.strip()
    assert command == ".venv/bin/podctl demo"
    proc = subprocess.run([str(Path(sys.executable).parent / "podctl"), "demo"], capture_output=True,
                          text=True, env=podctl.env, stdin=subprocess.DEVNULL, timeout=1500,
                          cwd=podctl.tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for words in ("1/6 up: v5p-16", "3/6 checkpoints in GCS", "resumed, steps 30-40",
                  "checkpoints  steps 20, 30, 40", "fake cloud stopped"):
        assert words in proc.stdout, proc.stdout
    assert not json.loads(podctl("fake", "status", "--json", check=False).stdout)["running"]
