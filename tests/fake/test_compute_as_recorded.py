"""The fake's Compute Engine answers, field by field against the recorded ones
(tests/fixtures/compute_mig_crud_recorded.json; the table in podctl/fake/README.md).
Raw HTTP against the in-process fake, so the wire itself is checked; no hosts start (the
MIG here has no VMs)."""

from __future__ import annotations

import pytest
import requests

from tests.conftest import PROJECT
from tests.replay_compute import EX

ZONE, REGION = "us-central1-c", "us-central1"
TEMPLATE = {"name": "rec-tpl", "properties": {
    "machineType": "tpu7x-standard-4t", "labels": {"podctl-managed": "true"},
    "metadata": {"items": [{"key": "ssh-keys", "value": "podctl:ssh-ed25519 AAAA podctl"}]},
    "disks": [{"boot": True, "autoDelete": True, "initializeParams": {
        "sourceImage": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"}}],
    "networkInterfaces": [{"network": "global/networks/default"}]}}
# What a finished operation may hold beyond the recorded keys: where it ran (the recorded
# global one has neither zone nor region) and, when it failed, its error.
OPTIONAL_OP_KEYS = {"zone", "region", "error", "httpErrorStatusCode", "httpErrorMessage"}


@pytest.fixture
def http(fake):
    session = requests.Session()
    base = f"{fake.tpu_api_url}/compute/v1/projects/{PROJECT}"

    def call(method: str, path: str, body: dict | None = None, **params: str):
        url = path if path.startswith("http") else f"{base}/{path}"
        return session.request(method, url.replace("https://www.googleapis.com", fake.tpu_api_url),
                               json=body, params=params or None)

    yield call
    session.close()


def _same_op(answer: dict, recorded: str) -> None:
    want = EX[recorded]
    assert set(want) - OPTIONAL_OP_KEYS <= set(answer) <= set(want) | OPTIONAL_OP_KEYS, (answer, want)
    for key in ("kind", "status", "progress", "operationType"):
        assert answer[key] == want[key], key
    assert answer["targetId"].isdigit()  # a number in a string, as Compute Engine's ids are


def _then_done(http, op: dict, recorded: str) -> dict:
    done = http("GET", op["selfLink"]).json()
    _same_op(done, recorded)
    return done


def test_templates_policies_and_migs_answer_as_recorded(http, fake):
    made = http("POST", "global/instanceTemplates", TEMPLATE).json()
    _same_op(made, "template_insert")  # RUNNING, progress 0, compute.instanceTemplates.insert
    _then_done(http, made, "template_insert_done")
    got = http("GET", "global/instanceTemplates/rec-tpl").json()
    recorded = EX["template_get"]
    assert set(recorded) <= set(got) | {"description"}
    disk, want_disk = got["properties"]["disks"][0], recorded["properties"]["disks"][0]
    assert set(want_disk) - {"initializeParams"} <= set(disk) and disk["deviceName"] == "boot"
    assert set(recorded["properties"]["metadata"]) <= set(got["properties"]["metadata"])
    assert set(recorded["properties"]["networkInterfaces"][0]) <= set(got["properties"]["networkInterfaces"][0])
    assert set(recorded["properties"]["scheduling"]) <= set(got["properties"]["scheduling"])

    policy = {"name": "rec-topo", "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x2"}}
    made = http("POST", f"regions/{REGION}/resourcePolicies", policy).json()
    _same_op(made, "policy_insert")
    _then_done(http, made, "policy_insert_done")
    got = http("GET", f"regions/{REGION}/resourcePolicies/rec-topo").json()
    assert set(EX["policy_get"]) - {"snapshotSchedulePolicy"} <= set(got)

    mig = {"name": "rec", "baseInstanceName": "rec", "targetSize": 0,
           "instanceTemplate": f"projects/{PROJECT}/global/instanceTemplates/rec-tpl",
           "resourcePolicies": {"workloadPolicy": f"projects/{PROJECT}/regions/{REGION}/resourcePolicies/rec-topo"}}
    made = http("POST", f"zones/{ZONE}/instanceGroupManagers", mig).json()
    _same_op(made, "mig_insert")
    got = http("GET", f"zones/{ZONE}/instanceGroupManagers/rec").json()
    recorded = set(EX["mig_get"]) - {"autoHealingPolicies", "statefulPolicy", "updatePolicy"}  # asked there
    assert recorded <= set(got), recorded - set(got)
    assert set(EX["mig_get"]["status"]) <= set(got["status"])

    gone = http("DELETE", f"zones/{ZONE}/instanceGroupManagers/rec").json()
    _same_op(gone, "mig_delete")
    fake.admin.advance(1000)  # the MIG's delete finishes (its operation DONE) in simulated time
    _then_done(http, gone, "mig_delete_done")
    http("DELETE", f"regions/{REGION}/resourcePolicies/rec-topo")
    gone = http("DELETE", "global/instanceTemplates/rec-tpl").json()
    assert gone["status"] == "RUNNING" and gone["operationType"] == "compute.instanceTemplates.delete"


def test_a_missing_resource_is_the_recorded_404(http):
    answer = http("GET", f"zones/{ZONE}/instanceGroupManagers/nothing")
    assert answer.status_code == 404
    error, want = answer.json()["error"], EX["mig_get_404"]["error"]
    assert set(error) == set(want) and set(error["errors"][0]) == set(want["errors"][0])
    assert error["errors"][0]["reason"] == "notFound"
    path = f"projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/nothing"
    assert error["message"] == f"The resource '{path}' was not found"


def test_every_answer_of_the_fake_is_its_type_in_the_discovery_document(http, fake):
    """Each of the fake's Compute Engine answers parses as google-cloud-compute's type for it
    with unknown fields refused: no field the service does not have, none of a wrong type
    (the library's types are generated from the discovery document). A flex-start MIG, its
    resize request, a reservation, a running VM and its listing."""
    from google.cloud import compute_v1

    def strict(kind, answer) -> dict:
        assert answer.status_code == 200, answer.text
        kind.from_json(answer.text, ignore_unknown_fields=False)
        return answer.json()

    op = compute_v1.Operation
    flex = {**TEMPLATE, "name": "fx-tpl", "properties": {**TEMPLATE["properties"], "scheduling": {
        "provisioningModel": "FLEX_START", "instanceTerminationAction": "DELETE"}}}
    strict(op, http("POST", "global/instanceTemplates", flex))
    strict(compute_v1.InstanceTemplate, http("GET", "global/instanceTemplates/fx-tpl"))
    strict(compute_v1.InstanceTemplateList, http("GET", "global/instanceTemplates"))
    mig = {"name": "fx", "baseInstanceName": "fx", "targetSize": 0,
           "instanceTemplate": f"projects/{PROJECT}/global/instanceTemplates/fx-tpl"}
    strict(op, http("POST", f"zones/{ZONE}/instanceGroupManagers", mig))
    requests_path = f"zones/{ZONE}/instanceGroupManagers/fx/resizeRequests"
    made = strict(op, http("POST", requests_path, {"name": "fx-flex", "resizeBy": 1,
                                                   "requestedRunDuration": {"seconds": "3600"}}))
    strict(op, http("GET", made["selfLink"]))
    strict(compute_v1.InstanceGroupManagerResizeRequest, http("GET", f"{requests_path}/fx-flex"))
    strict(compute_v1.InstanceGroupManagerResizeRequestsListResponse, http("GET", requests_path))
    fake.admin.advance(1000)  # placed, its VM made and running
    strict(compute_v1.InstanceGroupManager, http("GET", f"zones/{ZONE}/instanceGroupManagers/fx"))
    strict(compute_v1.InstanceGroupManagerList, http("GET", f"zones/{ZONE}/instanceGroupManagers"))
    managed = strict(compute_v1.InstanceGroupManagersListManagedInstancesResponse,
                     http("POST", f"zones/{ZONE}/instanceGroupManagers/fx/listManagedInstances"))
    vm = managed["managedInstances"][0]["name"]
    strict(compute_v1.Instance, http("GET", f"zones/{ZONE}/instances/{vm}"))
    strict(compute_v1.GuestAttributes, http("GET", f"zones/{ZONE}/instances/{vm}/getGuestAttributes",
                                            queryPath="podctl/"))
    policy = {"name": "p", "workloadPolicy": {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x2"}}
    strict(op, http("POST", f"regions/{REGION}/resourcePolicies", policy))
    strict(compute_v1.ResourcePolicy, http("GET", f"regions/{REGION}/resourcePolicies/p"))
    strict(compute_v1.ResourcePolicyList, http("GET", f"regions/{REGION}/resourcePolicies"))
    strict(op, http("DELETE", f"regions/{REGION}/resourcePolicies/p"))
    reservation = {"name": "r", "specificReservationRequired": True, "specificReservation": {
        "count": "1", "instanceProperties": {"machineType": "tpu7x-standard-4t"}}}
    strict(op, http("POST", f"zones/{ZONE}/reservations", reservation))
    strict(compute_v1.Reservation, http("GET", f"zones/{ZONE}/reservations/r"))
    strict(compute_v1.ReservationList, http("GET", f"zones/{ZONE}/reservations"))
    strict(op, http("DELETE", f"zones/{ZONE}/reservations/r"))
    strict(op, http("DELETE", f"zones/{ZONE}/instanceGroupManagers/fx"))
    fake.admin.advance(1000)
    strict(op, http("DELETE", "global/instanceTemplates/fx-tpl"))
