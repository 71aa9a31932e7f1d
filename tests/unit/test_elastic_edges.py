"""Elastic runs at their edges: a slice its owner deleted (`podctl down`) while the run grew
it back ends as any other end is judged (the recovery then says "deleted by `podctl down`
...: not making it again"), not with a "no slice named" error from inside the grow-back;
--elastic on one slice is said at the start and --min-slices above 1 there refused.
And what `gc` looks through when no API was chosen."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from podctl.base.errors import InvalidValueError, UsageError
from podctl.base.settings import Settings
from podctl.base.topology import parse_slice
from podctl.cloud import provider
from podctl.cloud.types import SliceInfo
from podctl.steps.elastic import ElasticPolicy, ElasticRun
from podctl.steps.session import Session
from tests.unit.memory_provider import MemoryProvider

SETTINGS = Settings(backend="gcp", project="p", zone="us-east5-a", config_dir=Path("/nonexistent"),
                    state_dir=Path("/nonexistent"))


def _slice() -> SliceInfo:
    return SliceInfo(name="el", project="p", zone="us-east5-a", kind="queued-resource", state="ACTIVE",
                     accelerator_type="v5p-8", topology="2x2x1", num_slices=2, tier="on-demand",
                     created=0.0, labels={})


def test_a_grow_back_of_a_deleted_slice_is_no_error_but_an_end_judged_as_any_other():
    gone = _slice()
    session = Session(SETTINGS, MemoryProvider({}))  # holds no slice: `podctl down` took it
    run = ElasticRun(session, gone, ElasticPolicy(), notice=lambda text: None)
    run.back = {1}  # slice 1 answered again, and podctl ended the attempt to grow back
    assert asyncio.run(run.regrown(ended_badly=True)) is None
    assert run.back == set()


def test_elastic_on_one_slice_is_said_at_the_start_and_a_floor_above_it_refused():
    one = dataclasses.replace(_slice(), num_slices=1, name="solo")
    said: list[str] = []
    ElasticRun(Session(SETTINGS, MemoryProvider({})), one, ElasticPolicy(), notice=said.append)
    assert len(said) == 1 and said[0].startswith("elastic: solo is one slice")
    with pytest.raises(UsageError, match="--min-slices 2: the run has 1 slice; give 1 to 1"):
        ElasticPolicy(min_slices=2).check(1)
    with pytest.raises(UsageError, match="--min-slices 4: the run has 3 slices"):
        ElasticPolicy(min_slices=4).check(3)


def test_an_elastic_slice_that_lost_a_member_is_priced_at_the_slices_it_holds():
    """`podctl ls` after --grow-deadline deleted slice 1 of 3 (or while it is asked for
    again): two slices bill, not three; a plain multislice is priced whole."""
    from podctl.cloud.types import Host, Member, NodeInfo
    from podctl.money.cost import slice_cost

    def node(i: int, state: str = "READY") -> NodeInfo:
        return NodeInfo(name=f"el-{i}", state=state, health=None, accelerator_type="v5p-8",
                        topology="2x2x1", hosts=(Host(i, 0, f"10.0.0.{i}", 22),), spot=False,
                        created=0.0, labels={}, queued_resource=f"el-{i}")

    full = dataclasses.replace(_slice(), num_slices=3, nodes=(node(0), node(1), node(2)),
                               members=tuple(Member(i, f"el-{i}", "ACTIVE") for i in range(3)))
    lost = dataclasses.replace(full, nodes=(node(0), node(2)),
                               members=(Member(0, "el-0", "ACTIVE"), Member(2, "el-2", "ACTIVE")))
    asked = dataclasses.replace(lost, members=(*lost.members, Member(1, "el-1", "WAITING_FOR_RESOURCES")))
    whole = slice_cost(full).usd_per_hour
    assert whole and full.billed_chips == full.chips == 12
    for held in (lost, asked):
        assert held.billed_chips == 8 and slice_cost(held).usd_per_hour == pytest.approx(whole * 2 / 3)
    plain = dataclasses.replace(full, members=(), nodes=(node(0),))  # no members: priced as made
    assert plain.billed_chips == 12


def test_a_generation_the_chosen_api_does_not_make_is_refused_before_it_is_asked(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(provider.ENV, raising=False)
    on_compute = dataclasses.replace(SETTINGS, api="compute")
    with pytest.raises(InvalidValueError, match="Compute Engine makes no TPU v4 VMs.*--api tpu"):
        provider.api_for(on_compute, parse_slice("v4-8"))
    assert provider.api_for(on_compute, parse_slice("v5p-8")).api == "compute"
    with pytest.raises(InvalidValueError, match="tpu7x-8: the Cloud TPU API does not serve TPU7x"):
        provider.api_for(dataclasses.replace(SETTINGS, api="tpu"), parse_slice("tpu7x-8"))
