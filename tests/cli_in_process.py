"""`podctl ARGS` in the test's own process, through click's runner: the real parsing and
error guard of `podctl`, its exit code and stderr as a user sees them, without the 0.5-1 s
of CPU a `podctl` process spends importing (tests/e2e/test_bad_input.py's `typed`). For
input refused before any cloud is asked; each file that uses it keeps one `podctl` process
that proves the same refusal through the real command."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import Podctl, _share_env_signing_key, stop_fake_and_check


def podctl_here(cwd: Path, *args: str, env: dict[str, str] | None = None,
                check: bool = False) -> subprocess.CompletedProcess:
    """ARGS through `podctl`'s click group in this process, from CWD (as tests.conftest's
    Podctl runs it), with ENV over the tests' `isolated` environment (a Podctl's .env)
    -> what subprocess.run would have returned; CHECK: fail the test on a non-zero exit."""
    from click.testing import CliRunner

    from podctl.cli.main import cli

    before = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, list(args), prog_name="podctl", env=env)
    finally:
        os.chdir(before)
    if check and result.exit_code != 0:
        raise AssertionError(f"podctl {' '.join(args)} exited {result.exit_code}:\n{result.stderr}"
                             f"{result.exception!r}")
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


def nothing_started(tmp: Path) -> bool:
    """No fake cloud started and no queue store opened under TMP."""
    return not list(tmp.rglob("daemon.json")) and not list(tmp.rglob("queue.db"))


@contextlib.contextmanager
def shared_daemon(tmp: Path) -> Iterator[Podctl]:
    """A fake daemon started once in TMP for a module's refusals (tests/e2e/test_jobs_cli.py's
    `refusing`): each is said before anything is made, so none needs a daemon of its own
    (about 2 s of CPU to start and stop one). Stopped, and checked to hold nothing billable,
    at the end."""
    (tmp / "home").mkdir(exist_ok=True)
    _share_env_signing_key(tmp / "state")
    cli = Podctl(tmp)
    try:
        podctl_here(tmp, "fake", "start", env=cli.env, check=True)
        yield cli
    finally:
        stop_fake_and_check(cli)
