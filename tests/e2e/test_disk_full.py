"""A full disk on the user's machine: `up` and `run` say so in one line, exit 1, and leave
nothing billing or running. The full disk is a small tmpfs, filled, in a mount namespace
of the podctl process's own (unshare), holding copies of its home, config and state
directories and its TMPDIR; the fake daemon runs outside it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Podctl, assert_one_line_error, slice_on_daemon
from tests.e2e.test_stray_child import left_alive

SCRIPTS = Path(__file__).parents[1] / "scripts"

# $1: the directory to mount the full disk on; $2...: the directories to copy onto it.
_ON_A_FULL_DISK = """
set -e
full=$1; shift
mount -t tmpfs -o size=2m tmpfs "$full"
for dir in "$@"; do [ -d "$dir" ] && cp -a "$dir" "$full/"; done
mkdir -p "$full/tmp"
dd if=/dev/zero of="$full/filler" bs=64k 2>/dev/null || true
export HOME=$full/home PODCTL_CONFIG_DIR=$full/config PODCTL_STATE_DIR=$full/state TMPDIR=$full/tmp
exec "${PODCTL_ARGV[@]}"
"""


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _namespaces_work(), reason="needs unshare -rm (user and mount namespaces)")


def on_a_full_disk(cli: Podctl, *args: str, keep_config: bool = True) -> subprocess.CompletedProcess:
    """`podctl ARGS` with its home, config, state and TMPDIR on a full disk (the config,
    its SSH key, only with KEEP_CONFIG)."""
    full = cli.tmp / "full"
    full.mkdir(exist_ok=True)
    dirs = [cli.tmp / "home", cli.tmp / "state"] + ([cli.tmp / "config"] if keep_config else [])
    argv = shlex.join([sys.executable, "-m", "podctl", *args])
    script = f"PODCTL_ARGV=({argv})\n" + _ON_A_FULL_DISK
    return subprocess.run(["unshare", "-rm", "bash", "-c", script, "bash", str(full), *map(str, dirs)],
                          env=cli.env, cwd=cli.tmp, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def podctl(tmp_path_factory: pytest.TempPathFactory):
    cli = Podctl(tmp_path_factory.mktemp("disk"))
    (cli.tmp / "home").mkdir()
    with slice_on_daemon(cli, "v5p-8", "disk") as cli:
        yield cli


def test_up_on_a_full_disk_says_so_in_one_line_and_creates_nothing(podctl):
    proc = on_a_full_disk(podctl, "up", "--slice", "v5p-8", "--name", "nospace", keep_config=False)
    assert_one_line_error(proc, 1, "no space left on this machine's disk", "free some space")
    assert [s["name"] for s in podctl.json("ls")] == ["disk"]


def test_run_on_a_full_disk_says_so_in_one_line_and_leaves_nothing_running(podctl):
    # over SSH, which keeps the hosts' keys on this machine (through the watchers nothing
    # is written here, and the run goes on as it should)
    proc = on_a_full_disk(podctl, "run", "disk", "--via", "ssh", str(SCRIPTS / "ticker.py"), "3000", "0.1")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "podctl: error: no space left on this machine's disk"), proc.stderr
    assert "Traceback" not in proc.stderr
    runs = podctl.json("runs")
    assert [r["state"] for r in runs] in ([], ["failed"])  # recorded or not, its start failed
    for record in runs:
        assert left_alive(record["run_id"]) == []
