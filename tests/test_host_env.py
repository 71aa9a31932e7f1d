"""The hosts' Python environment on bare fake hosts, through the CLI as a user meets it:
nothing third-party until podctl installs it; built once by one host from the package
index, fetched from GCS by the other; kept for the next run; a bad requirement fails
the run before the script starts, naming the host and the package."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import Podctl, slice_on_daemon

SCRIPT = "import six, sys\nprint('STARTED', six.__version__, sys.executable.endswith('/bin/python3'))\n"


@pytest.fixture
def podctl(tmp_path: Path):
    with slice_on_daemon(Podctl(tmp_path), "v5p-16", "bare16") as cli:
        yield cli


def index_downloads(output: str) -> int:
    """What pip took from the package index: its `Collecting NAME` lines."""
    return sum(1 for line in output.splitlines() if "] Collecting " in line)


def test_a_fresh_slice_has_no_jax_and_the_env_is_built_once_then_shipped_and_kept(podctl, tmp_path):
    jax = podctl("exec", "bare16", "--hosts", "all", "--", "python3", "-c", "import jax", check=False)
    assert jax.returncode != 0 and jax.stdout.count("No module named 'jax'") == 2, jax.stdout
    system = subprocess.run(["/usr/bin/python3", "--version"], capture_output=True, text=True).stdout.strip()
    version = podctl("exec", "bare16", "--hosts", "all", "--", "python3", "--version")
    assert version.stdout.count(system) == 2, version.stdout

    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text(SCRIPT)
    (work / "requirements.txt").write_text("six\n")
    first = podctl("run", "bare16", "--hosts", "all", str(work / "job.py"), timeout=300)
    out = first.stdout
    assert out.count("built on host-0000 from the package index") == 1, out
    assert "[host 0001] [podctl] env" in out and "fetched from GCS" in out and "no package index" in out
    assert index_downloads(out) == 1  # six, once, by host 0 only
    assert out.count("STARTED") == 2 and "True" in out  # the env's python3

    again = podctl("run", "bare16", "--hosts", "all", str(work / "job.py"), timeout=300)
    assert index_downloads(again.stdout) == 0 and again.stdout.count("already on this host") == 2
    assert again.stdout.count("STARTED") == 2


def test_a_requirement_that_does_not_exist_fails_before_the_script_naming_host_and_package(podctl, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text(SCRIPT)
    (work / "reqs.txt").write_text("podctl-no-such-package-zz9==1.0\n")
    proc = podctl("run", "bare16", "--hosts", "all", "--requirements", str(work / "reqs.txt"),
                  str(work / "job.py"), check=False, timeout=300)
    assert proc.returncode != 0
    assert "STARTED" not in proc.stdout
    assert "host-0000: pip could not install podctl-no-such-package-zz9" in proc.stdout + proc.stderr
    assert "host 0000 failed" in proc.stderr
