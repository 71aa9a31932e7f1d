"""A standard (not flex-start) MIG's insert followed to its end, with Compute Engine's error
shapes (issue 38, what was left, item 1): podctl's provider and `up` against the in-process
fake (google-cloud-compute, no CLI, no JAX).

Two places hold the cloud's reason. A MIG insert's operation is DONE once the group exists,
its VMs not yet made (instanceGroupManagers.insert's reference), and can end with
`error.errors[]` (no MIG then: the fault `mig-error`); the VMs' own refusals (no
capacity, no quota) are on each managed instance's `lastAttempt.errors` while the MIG stays
below its target. Either way `up` says the reason in one line, as the same error class the
Cloud TPU API's stockout or quota gives, deletes what it made, and leaves nothing."""

from __future__ import annotations

import asyncio

import pytest

from podctl.base.errors import CloudError, PodctlError, QuotaExceededError, StockoutError
from podctl.cloud import compute_names
from podctl.cloud.create import CreateRequest
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from tests.conftest import PROJECT, raw_api
from tests.fake.compute_support import FAST, PARENT, ZONE


def _request(name: str, slice_type: str = "tpu7x-16") -> CreateRequest:
    return CreateRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_type),
                         labels={"podctl-managed": "true"}, ssh_keys="podctl:ssh-ed25519 AAAA podctl")


def _up(provider, name: str, slice_type: str = "tpu7x-16") -> PodctlError:
    """`up` (cloud/up.py, as the CLI's) of NAME, which must fail: its error."""
    request = UpRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_type), owner="tester",
                        ssh_keys="podctl:ssh-ed25519 AAAA podctl", policy=FAST)
    with pytest.raises(PodctlError) as failed:
        asyncio.run(up(provider, request))
    return failed.value


def _nothing_left(fake) -> None:
    assert not any(fake.admin.resources().values()), fake.admin.resources()


@pytest.mark.parametrize(("code", "error", "words"), [
    ("ZONE_RESOURCE_POOL_EXHAUSTED", StockoutError, "stockout"),
    ("QUOTA_EXCEEDED", QuotaExceededError, "quota TPU7X_CHIPS exceeded while creating MIG bad (limit 0.0 in "
     "region us-central1): request more"),
    ("RESOURCE_NOT_FOUND", CloudError, "was not found"),
])
def test_a_mig_insert_whose_operation_fails_is_said_in_one_line_and_leaves_nothing(fake, provider, code,
                                                                                   error, words):
    fake.admin.inject("mig-error", code=code)
    said = _up(provider, "bad")
    assert type(said) is error and words in str(said), said
    assert "\n" not in str(said)
    _nothing_left(fake)  # the template and the workload policy `create` had made, deleted


def test_a_standard_mig_stocked_out_ends_up_with_the_cloud_tpu_apis_stockout_and_nothing_left(fake, provider):
    fake.admin.inject("stockout", zone=ZONE)
    said = _up(provider, "so")
    assert isinstance(said, StockoutError) and f"no TPU capacity in {ZONE}" in str(said), said
    assert "ZONE_RESOURCE_POOL_EXHAUSTED: The zone" in str(said) and "--queued" in str(said)
    _nothing_left(fake)  # the MIG (made: its insert succeeded), its template and policy


def test_a_quota_shortfall_stays_below_target_with_each_vms_last_attempt_and_ends_up(fake, provider):
    """The project's chip quota cannot hold the slice: the MIG exists (its insert DONE with no
    error), each managed instance CREATING with `lastAttempt.errors` QUOTA_EXCEEDED in Compute
    Engine's words; the slice is QUOTA_EXCEEDED, its wait ends with podctl's quota error."""
    from google.cloud import compute_v1

    fake.admin.set_quota(8, project=PROJECT, zone=ZONE)  # a tpu7x-32 is 16 chips (4 VMs of 4)
    try:
        creation = asyncio.run(provider.create(_request("qx", "tpu7x-32")))
        asyncio.run(provider._inserted(PARENT, "qx", creation))  # the MIG is made, its VMs not
        with raw_api(f"{fake.tpu_api_url}/compute/v1/projects/{PROJECT}") as http:
            listed = http("POST", f"zones/{ZONE}/instanceGroupManagers/qx/listManagedInstances")
        compute_v1.InstanceGroupManagersListManagedInstancesResponse.from_json(listed.text,
                                                                               ignore_unknown_fields=False)
        managed = listed.json()["managedInstances"]
        assert all("instanceStatus" not in m and m["currentAction"] == "CREATING" for m in managed)
        messages = {e["message"] for m in managed for e in m["lastAttempt"]["errors"]["errors"]}
        assert messages == {"Quota 'TPU7X_CHIPS' exceeded.  Limit: 8.0 in region us-central1."}
        info = asyncio.run(provider.describe(PARENT, "qx"))
        assert (info.state, info.billable) == ("QUOTA_EXCEEDED", False)
        with pytest.raises(QuotaExceededError, match="quota TPU7X_CHIPS exceeded while making qx's VMs "
                           r"\(limit 8.0 in region us-central1\): request more"):
            asyncio.run(provider.wait_ready(PARENT, "qx", policy=FAST))
        outcome = asyncio.run(provider.creation_outcome(str(creation.operation_name)))
        assert outcome is not None and (outcome.done, outcome.error) == (True, None)  # the MIG was made
        asyncio.run(provider.delete(PARENT, info))
        said = _up(provider, "qy", "tpu7x-32")  # and through `up`: said, and nothing left
        assert isinstance(said, QuotaExceededError) and "\n" not in str(said)
        _nothing_left(fake)
    finally:
        fake.admin.set_quota(None, project=PROJECT, zone=ZONE)


def test_creation_outcome_follows_a_mig_insert_by_its_operation_name(fake, provider):
    """The queue keeps a create's operation name and asks later how it ended: a MIG's insert
    is named projects/P/zones/Z/operations/N; a failed one says why (a stockout is marked,
    to be asked for again later); an operation the service forgot, or a Cloud TPU one, None."""
    creation = asyncio.run(provider.create(_request("ok", "tpu7x-8")))
    name = str(creation.operation_name)
    assert compute_names.parse_operation(name) is not None and f"/zones/{ZONE}/" in name
    asyncio.run(provider.wait_ready(PARENT, "ok", creation=creation, policy=FAST))  # follows it too
    outcome = asyncio.run(provider.creation_outcome(name))
    assert outcome is not None and outcome.done and not outcome.stockout
    asyncio.run(provider.delete(PARENT, asyncio.run(provider.describe(PARENT, "ok"))))
    gone = compute_names.operation_path(PROJECT, f"zones/{ZONE}", "operation-0-forgotten")
    assert asyncio.run(provider.creation_outcome(gone)) is None
    assert asyncio.run(provider.creation_outcome(f"{PARENT}/operations/op-1")) is None

    # a failed insert's operation, read as another process would (the MIG never was)
    with raw_api(f"{fake.tpu_api_url}/compute/v1/projects/{PROJECT}") as http:
        http("POST", "global/instanceTemplates", {"name": "raw-tpl", "properties": {
            "machineType": "tpu7x-standard-4t"}})
        fake.admin.inject("mig-error", code="ZONE_RESOURCE_POOL_EXHAUSTED")
        first = http("POST", f"zones/{ZONE}/instanceGroupManagers", {
            "name": "raw", "targetSize": 1, "baseInstanceName": "raw",
            "instanceTemplate": f"projects/{PROJECT}/global/instanceTemplates/raw-tpl"}).json()
        assert first["status"] == "RUNNING" and "error" not in first  # as every first answer
        done = http("GET", f"zones/{ZONE}/operations/{first['name']}").json()
        assert (done["status"], done["httpErrorStatusCode"]) == ("DONE", 503)
        assert http("GET", f"zones/{ZONE}/instanceGroupManagers/raw").status_code == 404
        http("DELETE", "global/instanceTemplates/raw-tpl")
    outcome = asyncio.run(provider.creation_outcome(
        compute_names.operation_path(PROJECT, f"zones/{ZONE}", first["name"])))
    assert outcome is not None and outcome.done and outcome.stockout and "no TPU capacity" in str(outcome.error)
    _nothing_left(fake)
