"""The README's first run, word for word, on the fake cloud."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Podctl, stop_fake_and_check
from tests.unit.test_docs import ROOT, first_run_commands


@pytest.mark.host_env
def test_the_readmes_first_run_runs_as_written_on_the_fake(tmp_path: Path):
    """The README's four lines, word for word, on the fake (PODCTL_BACKEND=fake, as the
    README says), from the repository's root as a user's checkout would run them."""
    cli = Podctl(tmp_path)
    cli.env["PODCTL_BACKEND"] = "fake"
    cli.tmp = ROOT  # templates/train_pjit.py is named from the checkout's root
    try:
        outputs = [cli(*words[1:], timeout=900) for words in first_run_commands()]
        runs = outputs[2].stdout
        assert "succeeded" in runs, runs
        assert '"kind": "checkpoint", "step": 10' in outputs[1].stdout, outputs[1].stdout[-2000:]
    finally:
        cli("down", "first-run", "--yes", check=False)
        cli.tmp = tmp_path
        stop_fake_and_check(cli)
