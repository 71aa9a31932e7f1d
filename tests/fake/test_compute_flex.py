"""Flex-start and the fake's checks of what Compute Engine checks (issue 38 item 1): podctl's
provider against the in-process fake with google-cloud-compute (no CLI, no JAX). `--queued`
through Compute Engine is a MIG of 0 FLEX_START VMs and one resize request of the slice's
VM count, which waits for capacity, makes the VMs all at once, and ends with its run
duration; what Compute Engine refuses the fake refuses in its error shape."""

from __future__ import annotations

import asyncio

import pytest

from podctl.base.errors import InvalidValueError, StockoutError
from podctl.cloud.create import CreateRequest
from podctl.cloud.types import SliceSpec
from tests.conftest import PROJECT, raw_api
from tests.fake.compute_support import FAST, PARENT, ZONE


def _request(name: str, slice_type: str = "tpu7x-8", **spec: object) -> CreateRequest:
    return CreateRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_type, **spec),  # type: ignore[arg-type]
                         labels={"podctl-managed": "true"}, ssh_keys="podctl:ssh-ed25519 AAAA podctl")


def test_flex_start_waits_for_capacity_then_makes_the_slice_whole_and_ends_with_its_run(fake, provider):
    fake.admin.inject("stockout", zone=ZONE)
    asyncio.run(provider.create(_request("fx", queued=True)))
    waiting = asyncio.run(provider.describe(PARENT, "fx"))
    assert (waiting.state, waiting.hosts, waiting.billable) == ("WAITING_FOR_RESOURCES", (), False)
    fake.admin.inject("capacity", "unlimited", zone=ZONE)
    fake.admin.advance(1)  # the request is placed as the capacity frees
    info = asyncio.run(provider.wait_ready(PARENT, "fx", policy=FAST))
    assert info.ready and len(info.hosts) == 1 and info.tier == "on-demand"
    fake.admin.advance(7 * 24 * 3600 + 60)  # the requested run duration (7 days) is over
    for _ in range(100):
        ended = asyncio.run(provider.describe(PARENT, "fx"))
        if ended.state == "FAILED":
            break
        fake.admin.advance(60)
    assert ended.state == "FAILED" and "end of their run duration" in (ended.error or "")
    asyncio.run(provider.delete(PARENT, ended))


@pytest.fixture
def http(fake):
    with raw_api(f"{fake.tpu_api_url}/compute/v1/projects/{PROJECT}") as call:
        yield call


def _refused(answer, field: str) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["errors"][0]["reason"] == "invalid" and f"Invalid value for field '{field}'" in error["message"]


def test_the_fake_refuses_flex_start_as_compute_engine_does(http, fake):
    flex = {"provisioningModel": "FLEX_START", "instanceTerminationAction": "DELETE"}
    template = {"name": "fx-tpl", "properties": {"machineType": "tpu7x-standard-4t", "scheduling": flex}}
    _refused(http("POST", "global/instanceTemplates", {**template, "properties": {
        **template["properties"], "scheduling": {"provisioningModel": "FLEX_START"}}}),
        "resource.properties.scheduling.instanceTerminationAction")
    _refused(http("POST", "global/instanceTemplates", {**template, "properties": {
        **template["properties"], "reservationAffinity": {"consumeReservationType": "ANY_RESERVATION"}}}),
        "resource.properties.reservationAffinity")
    assert http("POST", "global/instanceTemplates", template).status_code == 200
    mig = {"name": "fx", "baseInstanceName": "fx",
           "instanceTemplate": f"projects/{PROJECT}/global/instanceTemplates/fx-tpl"}
    _refused(http("POST", f"zones/{ZONE}/instanceGroupManagers", {**mig, "targetSize": 1}), "resource.targetSize")
    assert http("POST", f"zones/{ZONE}/instanceGroupManagers", {**mig, "targetSize": 0}).status_code == 200
    _refused(http("POST", f"zones/{ZONE}/instanceGroupManagers/fx/resize", size="1"), "resource.targetSize")
    requests_path = f"zones/{ZONE}/instanceGroupManagers/fx/resizeRequests"
    _refused(http("POST", requests_path, {"name": "r", "resizeBy": 1}), "resource.requestedRunDuration")
    _refused(http("POST", requests_path, {"name": "r", "resizeBy": 1, "requestedRunDuration": {"seconds": "60"}}),
             "resource.requestedRunDuration")
    _refused(http("POST", requests_path, {"name": "r", "resizeBy": 2, "requestedRunDuration": {"seconds": "600"}}),
             "resource.resizeBy")
    assert http("GET", f"{requests_path}/r").status_code == 404
    fake.admin.inject("stockout", zone=ZONE)
    made = http("POST", requests_path, {"name": "r", "resizeBy": 1, "requestedRunDuration": {"seconds": "600"}})
    assert made.status_code == 200 and made.json()["status"] == "RUNNING"
    listed = http("GET", requests_path).json()
    assert [(r["name"], r["state"], r["resizeBy"]) for r in listed["items"]] == [("r", "ACCEPTED", 1)]
    assert http("DELETE", f"{requests_path}/r").status_code == 400  # active: cancel it first
    assert http("POST", f"{requests_path}/r/cancel").status_code == 200
    assert http("GET", f"{requests_path}/r").json()["state"] == "CANCELLED"
    assert http("DELETE", f"{requests_path}/r").status_code == 200
    http("DELETE", f"zones/{ZONE}/instanceGroupManagers/fx")
    fake.admin.advance(1000)
    assert http("DELETE", "global/instanceTemplates/fx-tpl").status_code == 200


@pytest.mark.parametrize("spec, placement, words", [
    ({"queued": True, "tier": "guaranteed"}, {}, "--guaranteed is a Cloud TPU queued-resource tier"),
    ({"queued": True, "valid_for_seconds": 3600}, {}, "--valid-for has no Compute Engine form"),
    ({"queued": True, "tier": "spot"}, {}, "--spot with --queued"),
    ({"queued": True}, {"reservation": "r1"}, "consume no reservation"),
    ({"num_slices": 2, "queued": True}, {}, "multislice is a Cloud TPU API request"),
])
def test_what_compute_engine_has_no_form_for_is_refused_in_one_line(spec, placement, words):
    from podctl.cloud import compute_requests as req
    from podctl.cloud.placement import Placement

    request = CreateRequest(parent=PARENT, name="x", spec=SliceSpec.build("tpu7x-8", **spec),  # type: ignore[arg-type]
                            labels={}, ssh_keys="k", placement=Placement(**placement))
    with pytest.raises(InvalidValueError, match=words) as refused:
        req.plan_of(request)
    assert "\n" not in str(refused.value)


def test_a_flex_start_mig_left_without_its_request_is_orphaned_and_gc_takes_it(fake, provider):
    """A client killed between the MIG's insert and its resize request leaves a MIG of 0 VMs
    that can never make one: listed ORPHANED, which gc counts dead, and deleted whole."""
    from podctl.cloud import compute_requests as req
    from podctl.policy.gc import dead_reason

    plan = req.plan_of(_request("half", queued=True))
    api = provider.api
    api.templates.insert_unary(project=PROJECT, instance_template_resource=plan.template)
    api.migs.insert_unary(project=PROJECT, zone=ZONE, instance_group_manager_resource=plan.mig)
    [half] = asyncio.run(provider.list_slices(PARENT))
    assert (half.name, half.state, half.billable) == ("half", "ORPHANED", False)
    assert dead_reason(half, 0.0) == "ORPHANED"
    asyncio.run(provider.delete(PARENT, half))
    assert asyncio.run(provider.list_slices(PARENT)) == []


def test_a_stockout_shows_on_each_managed_instance_and_ends_the_wait(fake, provider, http):
    """No capacity for a MIG's VMs: each managed instance is CREATING with no instanceStatus
    (the VM does not exist) and lastAttempt.errors ZONE_RESOURCE_POOL_EXHAUSTED; the slice is
    STOCKOUT, and deleting it leaves nothing."""
    fake.admin.inject("stockout", zone=ZONE)
    asyncio.run(provider.create(_request("so", "tpu7x-16")))
    from google.cloud import compute_v1

    listed = http("POST", f"zones/{ZONE}/instanceGroupManagers/so/listManagedInstances")
    compute_v1.InstanceGroupManagersListManagedInstancesResponse.from_json(listed.text, ignore_unknown_fields=False)
    managed = listed.json()["managedInstances"]
    assert len(managed) == 2 and all("instanceStatus" not in m and m["currentAction"] == "CREATING" for m in managed)
    codes = {e["code"] for m in managed for e in m["lastAttempt"]["errors"]["errors"]}
    assert codes == {"ZONE_RESOURCE_POOL_EXHAUSTED"}
    assert http("GET", f"zones/{ZONE}/instances/{managed[0]['name']}").status_code == 404
    info = asyncio.run(provider.describe(PARENT, "so"))
    assert info.state == "STOCKOUT" and "does not have enough resources" in (info.error or "")
    with pytest.raises(StockoutError):
        asyncio.run(provider.wait_ready(PARENT, "so", policy=FAST))
    asyncio.run(provider.delete(PARENT, info))


def test_a_reservation_by_name_must_exist_and_be_specific(fake, provider):
    """--reservation NAME through Compute Engine: the template's reservationAffinity names it;
    where no such reservation is in the zone, or it may not be targeted by name, the MIG makes
    no VM and each managed instance's last attempt says why (the slice FAILED, the wait ends);
    a specific reservation makes the slice."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    from podctl.base.errors import SliceLostError
    from podctl.cloud.placement import Placement

    reservations = compute_v1.ReservationsClient(transport="rest", credentials=AnonymousCredentials(),
                                                 client_options=ClientOptions(api_endpoint=fake.tpu_api_url))
    for name, required in (("open", False), ("mine", True)):
        reservations.insert(project=PROJECT, zone=ZONE, reservation_resource=compute_v1.Reservation(
            name=name, specific_reservation_required=required,
            specific_reservation=compute_v1.AllocationSpecificSKUReservation(
                count=1, instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
                    machine_type="tpu7x-standard-4t"))))

    def make(slice_name: str, reservation: str) -> CreateRequest:
        plain = _request(slice_name)
        return CreateRequest(parent=plain.parent, name=plain.name, spec=plain.spec, labels=plain.labels,
                             ssh_keys=plain.ssh_keys, placement=Placement(reservation=reservation))

    for slice_name, reservation, words in (("nores", "missing", "do not exist"),
                                           ("openres", "open", "specificReservationRequired is not set")):
        asyncio.run(provider.create(make(slice_name, reservation)))
        with pytest.raises(SliceLostError, match=words):
            asyncio.run(provider.wait_ready(PARENT, slice_name, policy=FAST))
        failed = asyncio.run(provider.describe(PARENT, slice_name))
        assert failed.state == "FAILED" and "INVALID_FIELD_VALUE" in (failed.error or "")
        asyncio.run(provider.delete(PARENT, failed))
    asyncio.run(provider.create(make("res", "mine")))
    info = asyncio.run(provider.wait_ready(PARENT, "res", policy=FAST))
    assert info.ready and asyncio.run(provider.placement(PARENT, info)).reservation == "mine"
    asyncio.run(provider.delete(PARENT, info))
    for name in ("open", "mine"):
        reservations.delete(project=PROJECT, zone=ZONE, reservation=name)
