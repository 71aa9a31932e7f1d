"""Host maintenance on a Compute Engine slice, read as a Cloud TPU node's is: each VM a
maintenance names shows it in compute v1's Instance.resourceStatus.upcomingMaintenance
(PENDING, then ONGOING) and in its metadata server (instance/maintenance-event,
instance/upcoming-maintenance); podctl's provider says the soonest as the slice's
upcoming maintenance (what `status` shows) and, while it is ONGOING, the slice's health
UNHEALTHY_MAINTENANCE (what policy/maintenance.py waits out). The fake's `maintenance`
fault on the MIG with --workers schedules it on those VMs. In-process fake, no CLI."""

from __future__ import annotations

import asyncio

import requests

from podctl.cloud.create import CreateRequest
from podctl.cloud.types import SliceSpec
from tests.conftest import PROJECT, TIME_SCALE, raw_api
from tests.fake.compute_support import FAST, PARENT, ZONE


def _metadata_server(fake, node: str, worker: int, path: str) -> requests.Response:
    server = fake.admin.hosts()["nodes"][node]["metadata"][worker]
    return requests.get(f"http://{server}/computeMetadata/v1/instance/{path}",
                        headers={"Metadata-Flavor": "Google"}, timeout=10)


def test_a_vms_maintenance_is_the_slices_as_a_cloud_tpu_nodes_is(fake, provider):
    request = CreateRequest(parent=PARENT, name="mt", spec=SliceSpec.build("tpu7x-16"),  # 2 VMs
                            labels={"podctl-managed": "true"}, ssh_keys="podctl:ssh-ed25519 AAAA podctl")
    asyncio.run(provider.create(request))
    info = asyncio.run(provider.wait_ready(PARENT, "mt", policy=FAST))
    # The maintenance's minutes on the fake's own clock, moved only by advance(): at the
    # tests' time scale (300) its 300 s would pass in one real second, which a loaded
    # machine spends before the first check (the node was seen gone mid-test under -n 3).
    fake.admin.set_timings(time_scale=1.0)
    try:
        assert asyncio.run(provider.upcoming_maintenance(info)) == {}
        fake.admin.inject("maintenance", name="mt", after=300.0, workers="1", window=600.0)
        planned = asyncio.run(provider.upcoming_maintenance(info))["mt"]
        assert (planned["maintenanceStatus"], planned["type"], planned["workers"]) == ("PENDING", "SCHEDULED", [1])
        assert planned["windowStartTime"] < planned["windowEndTime"]
        # on the wire: only the VM it names carries it
        with raw_api(f"{fake.tpu_api_url}/compute/v1/projects/{PROJECT}/zones/{ZONE}") as http:
            vms = sorted(m["name"] for m in http("POST", "instanceGroupManagers/mt/listManagedInstances")
                         .json()["managedInstances"])
            shown = [http("GET", f"instances/{vm}").json().get("resourceStatus", {}) for vm in vms]
        assert shown[0] == {} and shown[1]["upcomingMaintenance"]["maintenanceStatus"] == "PENDING", shown
        # on the VM itself, as GCE's metadata server says it (snake_case there)
        node = next(n for n in fake.admin.hosts()["nodes"] if n.endswith("/mt"))
        assert _metadata_server(fake, node, 1, "maintenance-event").text == "NONE"  # not yet 60 s before
        assert _metadata_server(fake, node, 1, "upcoming-maintenance").json()["maintenance_status"] == "PENDING"
        assert _metadata_server(fake, node, 0, "upcoming-maintenance").status_code == 404
        fake.admin.advance(250)  # within the 60-s notice
        assert _metadata_server(fake, node, 1, "maintenance-event").text == "TERMINATE_ON_HOST_MAINTENANCE"
        noticed = asyncio.run(provider.describe(PARENT, "mt"))
        assert noticed.nodes[0].health == "HEALTHY"
        # until its window the VM runs as any (Compute Engine's notice changes nothing of the
        # VM's status): RUNNING, no current action, the slice READY with both hosts
        with raw_api(f"{fake.tpu_api_url}/compute/v1/projects/{PROJECT}/zones/{ZONE}") as http:
            managed = http("POST", "instanceGroupManagers/mt/listManagedInstances").json()["managedInstances"]
            statuses = [http("GET", f"instances/{vm}").json()["status"] for vm in vms]
        assert {(m["instanceStatus"], m["currentAction"]) for m in managed} == {("RUNNING", "NONE")}
        assert statuses == ["RUNNING", "RUNNING"]
        assert noticed.state == "READY" and len(noticed.hosts) == 2 and noticed.ready

        fake.admin.advance(100)  # the window began
        ongoing = asyncio.run(provider.describe(PARENT, "mt"))
        assert ongoing.nodes[0].health == "UNHEALTHY_MAINTENANCE", ongoing
        assert asyncio.run(provider.upcoming_maintenance(ongoing))["mt"]["maintenanceStatus"] == "ONGOING"
        fake.admin.advance(700)  # and ended
        after = asyncio.run(provider.describe(PARENT, "mt"))
        assert after.nodes[0].health == "HEALTHY" and asyncio.run(provider.upcoming_maintenance(after)) == {}
    finally:
        fake.admin.set_timings(time_scale=TIME_SCALE)  # the delete's operations at test speed
        asyncio.run(provider.delete(PARENT, info))
