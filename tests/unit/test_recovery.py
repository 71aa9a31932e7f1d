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


def test_no_steps_lost_are_counted_for_an_attempt_preempted_before_its_first_step():
    """Attempt 2 was preempted before its script said where it started (no config
    record: start step unknown, not 0); attempt 3 resumed at 14, where attempt 1 ended."""
    from podctl.steps.recovery import Attempt, account_steps_lost

    attempts = [Attempt(1, "r-1", 0.0, start_step=0, last_step=14),
                Attempt(2, "r-2", 1.0, start_step=None, last_step=None),
                Attempt(3, "r-3", 2.0, start_step=14, last_step=30)]
    account_steps_lost(attempts)
    assert [a.steps_lost for a in attempts] == [0, 0, None]
    assert sum(a.steps_lost or 0 for a in attempts) == 0


def test_a_run_record_reads_as_one_line():
    from podctl.jobs.run_record import RunRecord

    record = RunRecord("s-20261203-120000-abcd", "s", "p", "z", 2, "script", "train.py", [], [], None,
                       0.0, state="lost", exit_code=255, extra={"reason": "slice deleted"})
    assert repr(record) == ("<run s-20261203-120000-abcd lost exit 255 (slice deleted) on s (2 hosts), "
                            "1970-01-01 00:00 UTC, train.py>")

