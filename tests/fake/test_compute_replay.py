"""podctl's Compute Engine provider against answers shaped as the real service sends them
(issue 38, item 5): tests/replay_compute.py replays recorded Compute Engine traffic (every
insert's and delete's operation RUNNING first, DONE at the next read; a template read
back with what the server fills in; a MIG without `currentActions`; the recorded 404).
podctl's own path (up: template, workload policy, MIG, the wait; describe; delete) must go
through them and leave nothing behind."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from google.cloud import compute_v1
from google.oauth2.credentials import Credentials

from podctl.base.errors import NotFoundError, PermissionDeniedError, QuotaExceededError, StockoutError
from podctl.cloud.compute_client import operation_error
from podctl.cloud.connect import compute_engine_at
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.cloud.wait import WaitPolicy
from tests.replay_compute import RECORDED, TOKEN, ComputeReplay

FAST = WaitPolicy(initial=0.01, maximum=0.05, jitter=0.0, timeout=30)
PARENT = "projects/replay-project/locations/us-central1-c"
FIXTURES = Path(__file__).parent.parent / "fixtures"


def _up(provider, name: str, slice_name: str):
    request = UpRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_name),
                        ssh_keys="podctl:ssh-ed25519 AAAA podctl", owner="tester", policy=FAST)
    return asyncio.run(up(provider, request))


def test_a_multi_host_slice_is_made_waited_for_and_deleted_through_recorded_answers():
    with ComputeReplay() as replay:
        provider = compute_engine_at(replay.url, Credentials(token=TOKEN))
        result = _up(provider, "rec", "tpu7x-16")  # 2x2x2: 8 chips on 2 VMs, under a workload policy
        info = result.info
        assert result.created and info.ready and info.api == "compute"
        assert (info.accelerator_type, info.topology) == ("tpu7x-16", "2x2x2")
        assert [(h.ip, h.external_ip) for h in info.hosts] == [("10.0.0.10", "34.0.0.10"), ("10.0.0.11", "34.0.0.11")]
        assert info.labels["podctl-managed"] == "true"
        assert sorted(replay.billable) == ["rec", "rec-topo", "rec-tpl"]
        listed = asyncio.run(provider.list_slices(PARENT))
        assert [s.name for s in listed] == ["rec"]
        asyncio.run(provider.delete(PARENT, info))
        assert replay.billable == []
        with pytest.raises(NotFoundError, match="no slice named 'rec'"):
            asyncio.run(provider.describe(PARENT, "rec"))
        # each insert and delete was followed by reading its operation, RUNNING in its first
        # answer as recorded (the MIG's insert too: it can end with error.errors[])
        ops = [r.rsplit("/operations/", 1)[0].rsplit("/", 1)[-1] for r in replay.requests if "/operations/" in r]
        assert ops == ["global", "us-central1", "us-central1-c", "us-central1-c", "us-central1", "global"], \
            replay.requests
        provider.close()


def test_a_single_host_slice_needs_no_policy():
    with ComputeReplay() as replay:
        provider = compute_engine_at(replay.url, Credentials(token=TOKEN))
        info = _up(provider, "one", "tpu7x-8").info  # one VM of 4 chips
        assert info.ready and len(info.hosts) == 1 and sorted(replay.billable) == ["one", "one-tpl"]
        asyncio.run(provider.delete(PARENT, info))
        assert replay.billable == []
        provider.close()


def test_a_failed_insert_undoes_what_the_call_made():
    """The MIG's insert refused (a 403 in Compute Engine's recorded error shape): the template
    and policy this `up` made are deleted again."""
    with ComputeReplay() as replay:
        error = json.loads(json.dumps(RECORDED["exchanges"]["mig_get_404"]["body"]))
        error["error"].update(code=403, message="Required 'compute.instanceGroupManagers.create' permission "
                              "for 'projects/replay-project/zones/us-central1-c/instanceGroupManagers/undo'")
        error["error"]["errors"][0].update(reason="forbidden", message=error["error"]["message"])
        replay.errors.append(("POST", r".*/instanceGroupManagers", 403, error))
        provider = compute_engine_at(replay.url, Credentials(token=TOKEN))
        with pytest.raises(PermissionDeniedError) as denied:
            _up(provider, "undo", "tpu7x-16")
        assert "compute.instanceGroupManagers.create denied" in str(denied.value)
        assert "--role=roles/compute.instanceAdmin.v1" in str(denied.value) and "tpu" not in str(denied.value)
        assert replay.billable == []
        provider.close()


# A stockout as Compute Engine reports it in a finished operation: the operation printed by
# CCExtractor/sample-platform#901 (2024-06-26; ids elided there, errorDetails cut here to
# the part shown), with httpErrorStatusCode 503 as scylladb/scylla-cluster-tests#12477 quotes
# ("503 SERVICE UNAVAILABLE ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS").
STOCKOUT_OPERATION = {
    "kind": "compute#operation", "id": "1", "name": "operation-1", "operationType": "insert",
    "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a",
    "targetLink": "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instances/windows-5115",
    "targetId": "2", "status": "DONE", "user": "sa@p.iam.gserviceaccount.com", "progress": 100,
    "insertTime": "2024-06-26T11:42:22.006-07:00", "startTime": "2024-06-26T11:42:22.007-07:00",
    "endTime": "2024-06-26T11:42:29.294-07:00",
    "error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": (
        "The zone 'projects/p/zones/us-central1-a' does not have enough resources available to fulfill "
        "the request.  Try a different zone, or try again later."), "errorDetails": [
        {"help": {"links": [{"description": "Troubleshooting documentation",
                             "url": "https://cloud.google.com/compute/docs/resource-error"}]}}]}]},
    "httpErrorStatusCode": 503, "httpErrorMessage": "SERVICE UNAVAILABLE",
}


def test_a_recorded_stockout_operation_is_a_stockout_and_a_quota_code_a_quota_error():
    op = compute_v1.Operation.from_json(json.dumps(STOCKOUT_OPERATION))  # the library reads it whole
    assert op.http_error_status_code == 503
    error = operation_error(list(op.error.errors), "creating VM")
    assert isinstance(error, StockoutError) and "Try another zone (--zone)" in str(error)
    quota = {**STOCKOUT_OPERATION,
             "error": {"errors": [{"code": "QUOTA_EXCEEDED", "message": "Quota 'TPUS' exceeded."}]}}
    op = compute_v1.Operation.from_json(json.dumps(quota))
    assert isinstance(operation_error(list(op.error.errors), "creating VM"), QuotaExceededError)


def test_the_recording_is_what_the_library_reads():
    """Every recorded body parses as its google-cloud-compute type with no unknown field (the
    fixture is real Compute Engine JSON, and the library's types are the discovery document's)."""
    types = {"template_get": compute_v1.InstanceTemplate, "policy_get": compute_v1.ResourcePolicy,
             "mig_get": compute_v1.InstanceGroupManager}
    for key, exchange in RECORDED["exchanges"].items():
        kind = types.get(key, compute_v1.Operation if exchange["status"] == 200 else None)
        if kind is not None:
            body = dict(exchange["body"])
            if "targetId" in body:  # the recorder's normalizer put a name here; it is a number
                body["targetId"] = "7001"
            kind.from_json(json.dumps(body), ignore_unknown_fields=False)
