"""Budgets: the labels `up` writes, and the fake slices they tear down — from
`podctl budget check` and from the `run` follow loop, which first stops the run."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from podctl.money import budget
from podctl import steps
from podctl.steps import budget_check
from podctl.cloud import describe, terminate
from podctl.cloud.sshkey import ensure_ssh_key
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.base.errors import BudgetExceededError, InvalidValueError
from podctl.jobs.run_files import load_record
from podctl.jobs.metrics import read_metrics
from tests.conftest import FAST, PARENT, TIME_SCALE, ZONE
from tests.conftest import assert_one_line_error
from tests.e2e.test_jobs import make_job


_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


def test_labels_hold_the_budget_and_the_sooner_deadline():
    labels = budget.budget_labels(now=1000.0, usd_per_hour=16.8, max_cost=500, max_hours=None,
                                  zone="us-east5-a", generation="v5p")
    assert labels == {"podctl-max-cost": "500_00", "podctl-deadline": str(int(1000 + 500 / 16.8 * 3600))}
    both = budget.budget_labels(now=1000.0, usd_per_hour=16.8, max_cost=500, max_hours=2,
                                zone="us-east5-a", generation="v5p")
    assert both["podctl-deadline"] == "8200"  # 2 h comes before $500 (29.8 h)
    assert all(_LABEL_VALUE.match(v) for v in both.values())
    assert budget.decode_usd(budget.encode_usd(0.015)) == 0.015
    with pytest.raises(InvalidValueError, match="price unknown for us-central1"):
        budget.budget_labels(now=0, usd_per_hour=None, max_cost=5, max_hours=None, zone=ZONE,
                             generation="v5p")


@pytest.mark.parametrize("text, hours", [("3.5", 3.5), ("90m", 1.5), ("6h", 6.0), ("1h30m", 1.5)])
def test_hours_as_typed(text, hours):
    assert budget.parse_hours(text, "--max-hours") == hours


@pytest.mark.parametrize("text", ["0", "-2", "soon", "inf"])
def test_bad_hours_are_refused(text):
    with pytest.raises(InvalidValueError, match="--max-hours"):
        budget.parse_hours(text, "--max-hours")


@pytest.mark.parametrize("accelerator_type, topology, zone, usd_per_chip_hour", [
    ("v5p-8", "2x2x1", "us-east5-a", 4.20), ("v6e-8", "2x4", "us-east5-a", 2.70),
    ("v5litepod-8", "2x4", "us-south1-a", 1.416), ("v4-8", "2x2x1", "us-central2-b", 3.22),
])
def test_a_budget_on_an_existing_slice_uses_its_own_generations_price(accelerator_type, topology,
                                                                       zone, usd_per_chip_hour):
    """existing_budget_labels priced every slice at v5p's rate (chip_hour_price's old default
    generation): a $100 budget on a v5e slice ended 3x too soon. By hand: 4 or 8 chips x the
    generation's on-demand price in that region; the deadline is created + $100 / that."""
    from podctl.cloud.types import SliceInfo

    info = SliceInfo(name="s", project="p", zone=zone, kind="node", state="READY",
                     accelerator_type=accelerator_type, topology=topology, num_slices=1,
                     tier="on-demand", created=1000.0, labels={})
    labels = budget.existing_budget_labels(info, max_cost=100, max_hours=None, now=2000.0)
    per_hour = info.chips * usd_per_chip_hour
    assert int(labels["podctl-deadline"]) == int(1000.0 + 100 / per_hour * 3600)

