"""`podctl demo` end to end, once, as README.md gives it (the checkpoints a run leaves, through
`podctl ckpt`, are checked on the template's own CLI run: tests/test_template.py)."""

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
                  "checkpoints  steps 20, 30, 40", "fake cloud stopped", "  | step  10  loss"):
        assert words in proc.stdout, proc.stdout
    # the summary: trained (the loss fell), resumed from the last checkpoint, every phase timed
    line = {key: next(text for text in proc.stdout.splitlines() if text.startswith(key))
            for key in ("runs ", "loss ", "wall time ")}
    first_loss, final_loss = (float(x) for x in line["loss "].split()[1::2])  # "loss  A -> B"
    assert final_loss < first_loss
    assert "(steps 0-30)" in line["runs "]
    for phase in ("up", "bundle", "start", "train", "resume", "down"):
        assert f"{phase} " in line["wall time "], phase
    assert not json.loads(podctl("fake", "status", "--json", check=False).stdout)["running"]
