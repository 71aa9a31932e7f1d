"""`podctl demo` end to end, once, as README.md gives it (the checkpoints a run leaves, through
`podctl ckpt`, are checked on the template's own CLI run: tests/test_template.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Podctl, assert_one_line_error

REPO = Path(__file__).resolve().parents[2]


def _demo(cli: Podctl, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "podctl", "demo", *args], capture_output=True,
                          text=True, env=cli.env, stdin=subprocess.DEVNULL, timeout=1500, cwd=cli.tmp)


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
    for words in ("1/6 up: v5p-16", "3/6 checkpoints in GCS", "resumed, steps 20-30",
                  "checkpoints  steps 10, 20, 30", "fake cloud stopped", "  | step  10  loss"):
        assert words in proc.stdout, proc.stdout
    # the summary: trained (the loss fell), resumed from the last checkpoint, every phase timed
    line = {key: next(text for text in proc.stdout.splitlines() if text.startswith(key))
            for key in ("runs ", "loss ", "wall time ")}
    first_loss, final_loss = (float(x) for x in line["loss "].split()[1::2])  # "loss  A -> B"
    assert final_loss < first_loss
    assert "(steps 0-20)" in line["runs "]
    for phase in ("up", "bundle", "start", "train", "resume", "down"):
        assert f"{phase} " in line["wall time "], phase
    assert not json.loads(podctl("fake", "status", "--json", check=False).stdout)["running"]


def test_demo_in_a_secure_fake_says_what_to_grant_and_that_its_slice_is_gone(podctl):
    """A secure-by-default fake (its nodes' account holds no role): the demo ends at the
    identity check, names `podctl fake grant` (gcloud cannot reach the fake) and does not
    claim its slice is still up: it deleted it, and stopped the fake it started."""
    proc = subprocess.run([sys.executable, "-m", "podctl", "demo"], capture_output=True, text=True,
                          env={**podctl.env, "PODCTL_FAKE_SECURE": "1"}, stdin=subprocess.DEVNULL,
                          timeout=600, cwd=podctl.tmp)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("podctl: error: ") and "Traceback" not in proc.stderr
    for words in ("podctl fake grant serviceAccount:", "roles/storage.objectAdmin",
                  "the demo deleted its slice", "--not-secure"):
        assert words in last, last
    assert "still up" not in last and "gcloud" not in last
    assert not json.loads(podctl("fake", "status", "--json", check=False).stdout)["running"]
