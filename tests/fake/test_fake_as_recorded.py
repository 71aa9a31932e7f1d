"""The fake Cloud TPU API answers as the real service was recorded answering (issue 11,
item 3; the table in podctl/fake/README.md). Raw HTTP, so the wire itself is checked."""

from __future__ import annotations

import pytest
import requests

from tests.conftest import PARENT, PROJECT, raw_api

NODE = {"acceleratorType": "v5p-8", "runtimeVersion": "tpu-vm-cos-stable"}


@pytest.fixture
def http(fake):
    with raw_api(f"{fake.tpu_api_url}/v2") as call:
        yield call


def _done(http, fake, op: dict) -> dict:
    fake.admin.advance(1000)
    return http("GET", op["name"]).json()


def _status(response, code: int, status: str) -> dict:
    assert response.status_code == code, response.text
    error = response.json()["error"]  # google.rpc.Status as Google's front end sends it
    assert set(error) <= {"code", "message", "status", "details"}
    assert error["code"] == code and error["status"] == status
    return error


def test_operations_are_shaped_as_recorded(http, fake):
    first = http("POST", f"{PARENT}/nodes", NODE, nodeId="rec").json()
    assert "done" not in first and set(first) == {"name", "metadata"}
    meta = first["metadata"]
    assert meta["@type"] == "type.googleapis.com/google.cloud.common.OperationMetadata"
    assert (meta["target"], meta["verb"], meta["apiVersion"]) == (f"{PARENT}/nodes/rec", "create", "v2")
    assert "createTime" in meta and "endTime" not in meta and "cancelRequested" not in meta
    done = _done(http, fake, first)
    assert done["done"] is True and "endTime" in done["metadata"]
    node = done["response"]
    assert node["@type"] == "type.googleapis.com/google.cloud.tpu.v2.Node" and "health" not in node
    assert http("GET", f"{PARENT}/nodes/rec").json()["health"] == "HEALTHY"
    deleted = _done(http, fake, http("DELETE", f"{PARENT}/nodes/rec").json())
    assert deleted["response"] == {"@type": "type.googleapis.com/google.protobuf.Empty"}


def test_the_server_fills_in_what_google_fills_in(http, fake):
    body = {**NODE, "networkConfig": {"enableExternalIps": True}, "bootDiskConfig": {},
            "state": "READY", "id": "42", "health": "HEALTHY"}  # output-only: ignored
    _done(http, fake, http("POST", f"{PARENT}/nodes", body, nodeId="filled").json())
    node = http("GET", f"{PARENT}/nodes/filled").json()
    assert node["networkConfig"] == {
        "enableExternalIps": True, "network": f"projects/{PROJECT}/global/networks/default",
        "subnetwork": f"projects/{PROJECT}/regions/us-central1/subnetworks/default"}
    assert node["serviceAccount"]["email"].endswith("-compute@developer.gserviceaccount.com")
    assert "https://www.googleapis.com/auth/cloud-platform" in node["serviceAccount"]["scope"]
    assert node["cidrBlock"] and node["schedulingConfig"] == {} and node["shieldedInstanceConfig"] == {}
    assert node["id"] != "42" and node["createTime"]
    assert all("externalIp" in ep["accessConfig"] for ep in node["networkEndpoints"])
    unknown = http("POST", f"{PARENT}/nodes", {**NODE, "colour": "red"}, nodeId="x")
    assert "Unknown name \"colour\"" in _status(unknown, 400, "INVALID_ARGUMENT")["message"]
    _done(http, fake, http("DELETE", f"{PARENT}/nodes/filled").json())


def test_update_has_field_mask_semantics(http, fake):
    body = {**NODE, "labels": {"team": "lm"}, "description": "d"}
    _done(http, fake, http("POST", f"{PARENT}/nodes", body, nodeId="upd").json())
    # a masked field absent from the body is cleared; one not masked is kept (a patch is an
    # operation, answered first without `done`; the node changes when it is done)
    op = http("PATCH", f"{PARENT}/nodes/upd", {"description": "new"}, updateMask="labels,description").json()
    assert "done" not in op and op["metadata"]["verb"] == "update"
    assert _done(http, fake, op)["response"]["description"] == "new"
    node = http("GET", f"{PARENT}/nodes/upd").json()
    assert "labels" not in node and node["description"] == "new"
    _done(http, fake, http("PATCH", f"{PARENT}/nodes/upd", {"networkConfig": {"enableExternalIps": True}},
                           updateMask="network_config.enable_external_ips").json())
    assert http("GET", f"{PARENT}/nodes/upd").json()["networkConfig"]["enableExternalIps"] is True
    bad = http("PATCH", f"{PARENT}/nodes/upd", {"runtimeVersion": "x"}, updateMask="runtimeVersion")
    _status(bad, 400, "INVALID_ARGUMENT")
    _done(http, fake, http("DELETE", f"{PARENT}/nodes/upd").json())


def test_guest_attributes_are_what_workers_published(http, fake):
    _done(http, fake, http("POST", f"{PARENT}/nodes", {**NODE, "acceleratorType": "v5p-16"},
                           nodeId="ga").json())
    assert http("POST", f"{PARENT}/nodes/ga:getGuestAttributes", {}).json() == {"guestAttributes": []}
    fake.admin.publish_guest_attribute("ga", 1, "jax", "ready", "true")
    got = http("POST", f"{PARENT}/nodes/ga:getGuestAttributes", {"queryPath": "jax/"}).json()
    assert got == {"guestAttributes": [{"queryPath": "jax/", "queryValue": {
        "items": [{"namespace": "jax", "key": "ready", "value": "true"}]}}]}
    assert http("POST", f"{PARENT}/nodes/ga:getGuestAttributes", {"workerIds": ["0"]}).json() == {
        "guestAttributes": []}
    _done(http, fake, http("DELETE", f"{PARENT}/nodes/ga").json())


def test_queued_resources_wait_validate_and_are_idempotent(http, fake):
    fake.admin.capacity(0)
    qr = {"tpu": {"nodeSpec": [{"parent": PARENT, "nodeId": "qn", "node": NODE}]}}
    first = http("POST", f"{PARENT}/queuedResources", qr, queuedResourceId="q", requestId="r-1").json()
    got = http("GET", f"{PARENT}/queuedResources/q").json()
    assert got["state"]["state"] == "WAITING_FOR_RESOURCES"  # from the create on, never ACCEPTED
    again = http("POST", f"{PARENT}/queuedResources", qr, queuedResourceId="q", requestId="r-1")
    assert again.status_code == 200 and again.json()["name"] == first["name"]  # not 409
    conflict = http("POST", f"{PARENT}/queuedResources", qr, queuedResourceId="q", requestId="r-2")
    _status(conflict, 409, "ALREADY_EXISTS")
    bad = http("POST", f"{PARENT}/queuedResources", qr, queuedResourceId="Bad_Id")
    _status(bad, 400, "INVALID_ARGUMENT")
    # its nodes do not exist yet: deletable without force, as the proto says
    assert http("DELETE", f"{PARENT}/queuedResources/q").status_code == 200
    fake.admin.advance(1000)
    assert http("GET", f"{PARENT}/queuedResources/q").status_code == 404


def test_list_filter_and_order_by(http, fake):
    types = http("GET", f"{PARENT}/acceleratorTypes", filter="type=v5p-8").json()["acceleratorTypes"]
    assert [t["type"] for t in types] == ["v5p-8"]
    versions = http("GET", f"{PARENT}/runtimeVersions", orderBy="version desc").json()["runtimeVersions"]
    names = [v["version"] for v in versions]
    assert names == sorted(names, reverse=True)
    assert {"v2-alpha-tpuv5", "tpu-ubuntu2204-base", "tpu-vm-cos-stable"} <= set(names)
    for bad in ("type=", "type v5p-8", "colour=red", "type=v5p-8 AND"):
        _status(http("GET", f"{PARENT}/acceleratorTypes", filter=bad), 400, "INVALID_ARGUMENT")
    _status(http("GET", f"{PARENT}/runtimeVersions", orderBy="version sideways"), 400, "INVALID_ARGUMENT")
    _status(http("GET", f"{PARENT}/runtimeVersions/tpu-vm-tf-1.0"), 404, "NOT_FOUND")
    unknown = http("POST", f"{PARENT}/nodes", {**NODE, "runtimeVersion": "tpu-vm-tf-1.0"}, nodeId="rv")
    _status(unknown, 400, "INVALID_ARGUMENT")


def test_label_rules(http, fake):
    many = {f"k{i}": "v" for i in range(65)}
    _status(http("POST", f"{PARENT}/nodes", {**NODE, "labels": many}, nodeId="lab"), 400, "INVALID_ARGUMENT")
    ok = {**NODE, "labels": {"café": "über", "k_1-x": ""}}  # international lowercase letters
    _done(http, fake, http("POST", f"{PARENT}/nodes", ok, nodeId="lab").json())
    _done(http, fake, http("DELETE", f"{PARENT}/nodes/lab").json())
    for bad in ({"Team": "x"}, {"1team": "x"}, {"team": "X"}, {"k" * 64: "x"}):
        _status(http("POST", f"{PARENT}/nodes", {**NODE, "labels": bad}, nodeId="lab"), 400,
                "INVALID_ARGUMENT")


def _error_info(error: dict) -> dict:
    return next(d for d in error["details"] if d["@type"].endswith("google.rpc.ErrorInfo"))


def test_projects_permissions_and_the_api_switch(http, fake):
    other = "projects/nobody-here/locations/us-central1-a"
    info = _error_info(_status(http("GET", f"{other}/nodes"), 403, "PERMISSION_DENIED"))
    assert info["reason"] == "IAM_PERMISSION_DENIED" and info["domain"] == "iam.googleapis.com"
    assert info["metadata"] == {"permission": "tpu.nodes.list", "resource": f"{other}/nodes"}
    fake.admin.set_project(PROJECT, denied=["tpu.nodes.create"])
    error = _status(http("POST", f"{PARENT}/nodes", NODE, nodeId="no"), 403, "PERMISSION_DENIED")
    assert "Permission 'tpu.nodes.create' denied" in error["message"]
    assert http("GET", f"{PARENT}/nodes").status_code == 200  # only that permission is missing
    fake.admin.set_project(PROJECT, denied=[], api_enabled=False)
    error = _status(http("GET", f"{PARENT}/nodes"), 403, "PERMISSION_DENIED")
    info = _error_info(error)
    assert info["reason"] == "SERVICE_DISABLED" and info["metadata"]["service"] == "tpu.googleapis.com"
    assert info["metadata"]["activationUrl"] in error["message"]
    assert info["metadata"]["consumer"].startswith("projects/")


def test_rate_limit_and_quota_read_as_real(http, fake):
    fake.admin.fail_calls(1, 429)
    info = _error_info(_status(http("GET", f"{PARENT}/nodes"), 429, "RESOURCE_EXHAUSTED"))
    assert info["reason"] == "RATE_LIMIT_EXCEEDED"
    assert {"quota_metric", "quota_limit"} <= set(info["metadata"])
    fake.admin.set_quota(4, project=PROJECT)
    error = _status(http("POST", f"{PARENT}/nodes", {**NODE, "acceleratorType": "v5p-16"}, nodeId="q"),
                    429, "RESOURCE_EXHAUSTED")
    assert error["message"] == ("Quota limit 'TPUV5PPerProjectPerRegionForTPUAPI' has been exceeded. "
                                "Limit: 4 in region us-central1.")


def test_what_google_refuses_the_fake_refuses(http, fake):
    # an unknown query parameter: Google's front end's message (public error reports)
    error = _status(http("GET", f"{PARENT}/nodes", pageSiz="5"), 400, "INVALID_ARGUMENT")
    assert error["message"] == ('Invalid JSON payload received. Unknown name "pageSiz": Cannot bind '
                                "query parameter. Field 'pageSiz' could not be found in request message.")
    assert http("GET", f"{PARENT}/nodes", pageSize="5", prettyPrint="false").status_code == 200
    # a runtime made for another generation (cloud.google.com/tpu/docs/runtimes)
    for runtime in ("v2-alpha-tpuv6e", "v2-alpha-tpuv5-lite"):
        error = _status(http("POST", f"{PARENT}/nodes", {**NODE, "runtimeVersion": runtime}, nodeId="rt"),
                        400, "INVALID_ARGUMENT")
        assert runtime in error["message"] and "v2-alpha-tpuv5" in error["message"]
    # spot and reserved at once
    both = {**NODE, "schedulingConfig": {"spot": True, "reserved": True}}
    _status(http("POST", f"{PARENT}/nodes", both, nodeId="both"), 400, "INVALID_ARGUMENT")
    # a multislice of one node (the proto: node_count "needs to be > 1")
    spec = {"parent": PARENT, "node": NODE, "multisliceParams": {"nodeCount": 1, "nodeIdPrefix": "ms"}}
    error = _status(http("POST", f"{PARENT}/queuedResources", {"tpu": {"nodeSpec": [spec]}},
                         queuedResourceId="one"), 400, "INVALID_ARGUMENT")
    assert "node_count" in error["message"]
    assert not fake.admin.resources()["nodes"]


def test_a_multislice_without_a_prefix_names_its_nodes_after_the_queued_resource(http, fake):
    spec = {"parent": PARENT, "node": NODE, "multisliceParams": {"nodeCount": 2}}
    _done(http, fake, http("POST", f"{PARENT}/queuedResources", {"tpu": {"nodeSpec": [spec]}},
                           queuedResourceId="pair").json())
    fake.admin.advance(1000)
    names = sorted(n["name"].rsplit("/", 1)[1] for n in http("GET", f"{PARENT}/nodes").json()["nodes"])
    assert names == ["pair-0", "pair-1"]
    _done(http, fake, http("DELETE", f"{PARENT}/queuedResources/pair", force="true").json())


def _metadata(fake, node: str, worker: int, path: str) -> str:
    host = fake.hosts.nodes[f"{PARENT}/nodes/{node}"].hosts[worker]
    return requests.get(f"http://{host.metadata_host}/computeMetadata/v1/{path}",
                        headers={"Metadata-Flavor": "Google"}, timeout=30).text


def test_tpu_env_and_recursive_metadata_read_as_on_a_tpu_vm(http, fake):
    body = {**NODE, "acceleratorType": "v5p-16", "runtimeVersion": "v2-alpha-tpuv5",
            "metadata": {"ssh-keys": "", "enable-oslogin": "FALSE", "my-key": "v"}}
    spec = {"parent": PARENT, "node": body, "multisliceParams": {"nodeCount": 2, "nodeIdPrefix": "env"}}
    _done(http, fake, http("POST", f"{PARENT}/queuedResources", {"tpu": {"nodeSpec": [spec]}},
                           queuedResourceId="env").json())
    fake.admin.advance(1000)
    try:
        env = dict(line.split(": ", 1) for line in
                   _metadata(fake, "env-1", 1, "instance/attributes/tpu-env").splitlines())
        env = {k: v.strip("'") for k, v in env.items()}
        # a real v4-256's tpu-env (dumped in public) has these keys; a v5p-16 is 2x2x2, 2 hosts
        assert {k: env[k] for k in ("ACCELERATOR_TYPE", "TOPOLOGY", "TPU_PROCESS_BOUNDS", "HOST_BOUNDS",
                                    "TPU_CHIPS_PER_PROCESS_BOUNDS", "CHIPS_PER_HOST_BOUNDS", "WRAP",
                                    "TPU_TOPOLOGY_WRAP", "TYPE", "WORKER_ID", "NODE_ID", "ZONE")} == {
            "ACCELERATOR_TYPE": "v5p-16", "TOPOLOGY": "2x2x2", "TPU_PROCESS_BOUNDS": "1,1,2",
            "HOST_BOUNDS": "1,1,2", "TPU_CHIPS_PER_PROCESS_BOUNDS": "2,2,1",
            "CHIPS_PER_HOST_BOUNDS": "2,2,1", "WRAP": "false,false,false",
            "TPU_TOPOLOGY_WRAP": "false,false,false", "TYPE": "V5P", "WORKER_ID": "1",
            "NODE_ID": "env-1", "ZONE": PARENT.rsplit("/", 1)[1]}
        first = http("GET", f"{PARENT}/nodes/env-0").json()["networkEndpoints"][0]["ipAddress"]
        assert (env["MEGASCALE_COORDINATOR_ADDRESS"], env["MEGASCALE_NUM_SLICES"],
                env["MEGASCALE_SLICE_ID"]) == (first, "2", "1")
        assert "PROJECT_ID" not in env and "HOSTNAMES" not in env
        assert env["CONSUMER_PROJECT_ID"] == PROJECT
        tree = requests.get(f"http://{fake.hosts.nodes[f'{PARENT}/nodes/env-0'].hosts[0].metadata_host}"
                            "/computeMetadata/v1/instance/?recursive=true",
                            headers={"Metadata-Flavor": "Google"}, timeout=30).json()
        # attribute keys verbatim; GCE's own keys in camelCase
        assert {"enable-oslogin", "my-key", "agent-worker-number", "tpu-env"} <= set(tree["attributes"])
        assert tree["maintenanceEvent"] == "NONE" and "maintenance-event" not in tree
        assert tree["serviceAccounts"]["default"]["scopes"]
    finally:
        _done(http, fake, http("DELETE", f"{PARENT}/queuedResources/env", force="true").json())
