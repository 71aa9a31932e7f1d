"""A key set on a Compute Engine slice (the boot channel's run pointer) is set on each VM of
its MIG with instances.setMetadata and that VM's fingerprint (providers/compute_metadata.py),
as Compute Engine takes it: the fake refuses a stale or missing fingerprint with 412
conditionNotMet, keeps what another writer set, and gives a VM the MIG makes again its
template's map (fake/api/compute_vm_metadata.py). podctl's provider against the
in-process fake with google-cloud-compute, and the wire as it is (no CLI, no JAX)."""

from __future__ import annotations

import asyncio

import pytest

from podctl.cloud.create import CreateRequest
from podctl.cloud.types import SliceSpec
from tests.conftest import PROJECT, raw_api
from tests.fake.compute_support import FAST, PARENT, ZONE


@pytest.fixture
def http(fake):
    with raw_api(f"{fake.tpu_api_url}/compute/v1/projects/{PROJECT}/zones/{ZONE}") as call:
        yield call


def _vms(http, mig: str) -> list[str]:
    managed = http("POST", f"instanceGroupManagers/{mig}/listManagedInstances").json()["managedInstances"]
    return sorted(m["name"] for m in managed)


def _metadata(http, vm: str) -> tuple[dict[str, str], str]:
    got = http("GET", f"instances/{vm}").json()["metadata"]
    return {i["key"]: i["value"] for i in got.get("items", [])}, got["fingerprint"]


def test_a_key_is_set_on_every_vm_by_its_fingerprint_and_a_remade_vm_has_only_its_templates(
        fake, provider, http):
    request = CreateRequest(parent=PARENT, name="md", spec=SliceSpec.build("tpu7x-16"),  # 2 VMs
                            labels={"podctl-managed": "true"}, extra_metadata={"from-template": "t"},
                            ssh_keys="podctl:ssh-ed25519 AAAA podctl")
    asyncio.run(provider.create(request))
    info = asyncio.run(provider.wait_ready(PARENT, "md", policy=FAST))
    try:
        node = f"{PARENT}/nodes/md"
        first, second = _vms(http, "md")
        template_map, fingerprint = _metadata(http, first)
        assert template_map["from-template"] == "t" and fingerprint

        # Compute Engine's rule, on the wire: a stale fingerprint, or none, is 412 conditionNotMet
        for stale in ({"fingerprint": "c3RhbGU=", "items": []}, {"items": []}):
            refused = http("POST", f"instances/{first}/setMetadata", stale)
            assert refused.status_code == 412, refused.text
            assert refused.json()["error"]["errors"][0]["reason"] == "conditionNotMet"
        assert _metadata(http, first) == (template_map, fingerprint)  # nothing changed
        # another writer's key (an ssh key added by hand): its write moves the fingerprint
        mine = {"fingerprint": fingerprint, "items": [{"key": k, "value": v} for k, v in
                                                      {**template_map, "by-hand": "h"}.items()]}
        assert http("POST", f"instances/{first}/setMetadata", mine).status_code == 200
        assert _metadata(http, first)[1] != fingerprint
        assert http("POST", f"instances/{first}/setMetadata", mine).status_code == 412  # now stale

        # podctl's write: on both VMs, read first so the other writer's key stays
        asyncio.run(provider.set_metadata_key(node, "podctl-run", "pointer", wait=True))
        on_first, on_second = _metadata(http, first)[0], _metadata(http, second)[0]
        assert on_first == {**template_map, "by-hand": "h", "podctl-run": "pointer"}, on_first
        assert on_second == {**template_map, "podctl-run": "pointer"}, on_second
        # the slice's own metadata stays the template's (what the boot channel's pin check reads)
        assert "podctl-run" not in asyncio.run(provider.describe(PARENT, "md")).nodes[0].metadata

        # the MIG makes the second VM again: the template's map, a new fingerprint
        before = _metadata(http, second)[1]
        fake.admin.inject("preempt-vm", name="md", worker=1)
        fake.admin.advance(600)
        remade, after = _metadata(http, second)
        assert remade == template_map and after != before, remade
        assert _metadata(http, first)[0]["podctl-run"] == "pointer"  # the other VM keeps it

        # a writer between podctl's read and its write: its setMetadata is refused 412, and
        # podctl reads the map again and writes over it, the other writer's key kept
        real_get, raced = provider.api.instances.get, []

        def get_then_race(**kwargs):
            read = real_get(**kwargs)
            if kwargs["instance"] == first and not raced:
                items = [{"key": i.key, "value": i.value} for i in read.metadata.items]
                raced.append(http("POST", f"instances/{first}/setMetadata", {
                    "fingerprint": read.metadata.fingerprint, "items": [*items, {"key": "racer", "value": "r"}]}))
            return read

        provider.api.instances.get = get_then_race
        try:
            asyncio.run(provider.remove_metadata_key(node, "podctl-run", wait=True))
        finally:
            provider.api.instances.get = real_get
        assert raced and raced[0].status_code == 200, raced
        after_race = _metadata(http, first)[0]
        assert "podctl-run" not in after_race and after_race["racer"] == "r", after_race
        # the set's 2 VMs, then the removal's refused write and its retry on the first VM; the
        # remade second VM has no pointer to remove, so it is not written at all
        assert provider.api.calls["instances.setMetadata"] == 4
    finally:
        asyncio.run(provider.delete(PARENT, info))


def test_a_vms_metadata_server_says_what_a_compute_engine_vm_of_a_mig_says(fake, provider, http):
    """Each VM's metadata server: its instance's own name, hostname and id (instances.get's),
    `created-by` (its MIG) and `instance-template` as Compute Engine sets them on a MIG's VMs,
    the TPU attributes in the VMs' worker order, and nothing naming a Cloud TPU node (no
    NODE_ID or SERVICE_NAME tpu.googleapis.com in tpu-env); the host's own code finds its
    slice from that (host/host_pin.py)."""
    import json

    import requests

    from podctl.fake.vm.metadata import numeric_project
    from podctl.host import host_pin

    request = CreateRequest(parent=PARENT, name="mds", spec=SliceSpec.build("tpu7x-16"),  # 2 VMs
                            labels={"podctl-managed": "true"}, ssh_keys="podctl:ssh-ed25519 AAAA podctl")
    asyncio.run(provider.create(request))
    info = asyncio.run(provider.wait_ready(PARENT, "mds", policy=FAST))
    try:
        vms = _vms(http, "mds")
        number = numeric_project(PROJECT)
        for worker, vm in enumerate(vms):
            host = fake.hosts.nodes[f"{PARENT}/nodes/mds"].hosts[worker]

            def read(path: str, host=host) -> str:
                return requests.get(f"http://{host.metadata_host}/computeMetadata/v1/instance/{path}",
                                    headers={"Metadata-Flavor": "Google"}, timeout=30).text

            assert read("name") == vm and read("hostname") == f"{vm}.{ZONE}.c.{PROJECT}.internal"
            assert read("id") == http("GET", f"instances/{vm}").json()["id"]
            attrs = json.loads(read("attributes/?recursive=true"))
            assert attrs["created-by"] == f"projects/{number}/zones/{ZONE}/instanceGroupManagers/mds"
            assert attrs["instance-template"] == f"projects/{number}/global/instanceTemplates/mds-tpl"
            assert (attrs["agent-worker-number"], attrs["accelerator-type"]) == (str(worker), "tpu7x-16")
            assert [e.split(":")[0] for e in attrs["worker-network-endpoints"].split(",")] == vms
            env = dict(line.split(": ", 1) for line in attrs["tpu-env"].splitlines())
            assert "NODE_ID" not in env and "SERVICE_NAME" not in env and env["WORKER_ID"] == f"'{worker}'"
            assert host_pin.slice_node(attrs) == "mds"
    finally:
        asyncio.run(provider.delete(PARENT, info))
