"""The fake's answers against the discovery document's schemas, and both Google clients
against the fake (issue 11, item 5).

Every field of every answer must be one the discovery document (tpu.v2.json, as
shipped in google-api-python-client) knows, with its type: strings (int64 and
timestamps as strings), integers, booleans, enums by name, nested messages. The
unmodified discovery client (what SkyPilot uses) and google-cloud-tpu must both work
against the fake, and both must fail where Google would.
"""

from __future__ import annotations

import json
import os
import time

import googleapiclient
import pytest
import requests
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2
from googleapiclient import discovery
from googleapiclient.errors import HttpError

from tests.conftest import PARENT

with open(os.path.join(os.path.dirname(googleapiclient.__file__),
                       "discovery_cache", "documents", "tpu.v2.json")) as _doc:
    DOC = json.loads(_doc.read())
SCHEMAS = DOC["schemas"]
_ANY_TYPES = {"google.cloud.tpu.v2.Node": "Node", "google.cloud.tpu.v2.QueuedResource": "QueuedResource",
              "google.protobuf.Empty": "Empty", "google.cloud.common.OperationMetadata": "OperationMetadata"}


def check(value, schema: dict, where: str) -> None:
    """Fail unless VALUE is what SCHEMA (a discovery-document schema) allows."""
    if "$ref" in schema:
        schema = SCHEMAS[schema["$ref"]]
    kind = schema.get("type")
    if kind == "any":
        return
    if kind == "object" and "properties" in schema:
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        for key, item in value.items():
            assert key in schema["properties"], f"{where}: field {key!r} is not in the schema"
            check(item, schema["properties"][key], f"{where}.{key}")
    elif kind == "object" and "additionalProperties" in schema:
        assert isinstance(value, dict), f"{where}: {value!r} is not a map"
        sub = schema["additionalProperties"]
        if sub.get("type") == "any" and "@type" in value:  # a google.protobuf.Any
            type_name = value["@type"].rsplit("/", 1)[-1]
            assert type_name in _ANY_TYPES, f"{where}: unexpected @type {type_name}"
            check({k: v for k, v in value.items() if k != "@type"}, SCHEMAS[_ANY_TYPES[type_name]], where)
        else:
            for key, item in value.items():
                check(item, sub, f"{where}[{key}]")
    elif kind == "object":
        assert isinstance(value, dict) and not value, f"{where}: {value!r} should be empty"
    elif kind == "array":
        assert isinstance(value, list), f"{where}: {value!r} is not a list"
        for i, item in enumerate(value):
            check(item, schema["items"], f"{where}[{i}]")
    elif kind == "string":
        assert isinstance(value, str), f"{where}: {value!r} is not a string"
        if "enum" in schema:
            assert value in schema["enum"], f"{where}: {value!r} is not one of {schema['enum']}"
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an integer"
    elif kind == "number":
        assert isinstance(value, (int, float)), f"{where}: {value!r} is not a number"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{where}: {value!r} is not a boolean"
    else:
        raise AssertionError(f"{where}: schema type {kind!r} not handled")


def test_every_answer_fits_the_discovery_schemas(fake):
    s = requests.Session()
    base = f"{fake.tpu_api_url}/v2"

    def get(method: str, path: str, schema: str, body: dict | None = None, **params: str) -> dict:
        r = s.request(method, f"{base}/{path}", json=body, params=params or None)
        assert r.status_code == 200, r.text
        check(r.json(), SCHEMAS[schema], f"{method} {path}")
        return r.json()

    node = {"acceleratorType": "v5p-16", "runtimeVersion": "v2-alpha-tpuv5", "labels": {"a": "b"},
            "networkConfig": {"enableExternalIps": True}, "metadata": {"k": "v"}}
    op = get("POST", f"{PARENT}/nodes", "Operation", node, nodeId="sch")
    get("GET", op["name"], "Operation")
    fake.admin.advance(1000)
    get("GET", op["name"], "Operation")
    get("GET", f"{PARENT}/nodes/sch", "Node")
    get("GET", f"{PARENT}/nodes", "ListNodesResponse")
    fake.admin.publish_guest_attribute("sch", 0, "ns", "k", "v")
    get("POST", f"{PARENT}/nodes/sch:getGuestAttributes", "GetGuestAttributesResponse", {})
    get("PATCH", f"{PARENT}/nodes/sch", "Operation", {"description": "x"}, updateMask="description")
    qr = {"tpu": {"nodeSpec": [{"parent": PARENT, "nodeId": "schq", "node": node}]},
          "queueingPolicy": {"validUntilDuration": "3600s"}, "spot": {}}
    get("POST", f"{PARENT}/queuedResources", "Operation", qr, queuedResourceId="schq")
    get("GET", f"{PARENT}/queuedResources/schq", "QueuedResource")
    fake.admin.advance(1000)
    get("GET", f"{PARENT}/queuedResources/schq", "QueuedResource")
    get("GET", f"{PARENT}/queuedResources", "ListQueuedResourcesResponse")
    get("GET", f"{PARENT}/acceleratorTypes", "ListAcceleratorTypesResponse")
    get("GET", f"{PARENT}/acceleratorTypes/v5p-8", "AcceleratorType")
    get("GET", f"{PARENT}/runtimeVersions", "ListRuntimeVersionsResponse")
    get("GET", f"{PARENT}/runtimeVersions/v2-alpha-tpuv5", "RuntimeVersion")
    get("GET", "projects/test-project/locations", "ListLocationsResponse")
    get("GET", PARENT, "Location")
    get("GET", f"{PARENT}/operations", "ListOperationsResponse")
    get("POST", f"{PARENT}:generateServiceIdentity", "GenerateServiceIdentityResponse", {})
    deleting = get("DELETE", f"{PARENT}/nodes/sch", "Operation")
    get("DELETE", f"{PARENT}/queuedResources/schq", "Operation", force="true")
    fake.admin.advance(1000)
    get("GET", deleting["name"], "Operation")
    refused = s.post(f"{base}/{PARENT}/nodes", json={**node, "labels": {"A": "b"}}, params={"nodeId": "x"})
    assert refused.status_code == 400
    check(refused.json()["error"], SCHEMAS["Status"] | {"properties": {
        **SCHEMAS["Status"]["properties"], "status": {"type": "string"}}}, "error")
    s.close()


@pytest.fixture
def tpu(fake):
    service = discovery.build("tpu", "v2", static_discovery=True, credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": f"{fake.tpu_api_url}/"})
    yield service
    service.close()


def _wait(tpu, fake, op: dict) -> dict:
    for _ in range(100):
        op = tpu.projects().locations().operations().get(name=op["name"]).execute()
        if op.get("done"):
            return op
        fake.admin.advance(100)
        time.sleep(0.01)
    raise AssertionError(f"operation {op['name']} never finished")


def test_the_unmodified_discovery_client_works_against_the_fake(tpu, fake):
    nodes = tpu.projects().locations().nodes()
    op = nodes.create(parent=PARENT, nodeId="disc", body={
        "acceleratorType": "v5p-8", "runtimeVersion": "tpu-ubuntu2204-base"}).execute()
    done = _wait(tpu, fake, op)
    assert done["response"]["state"] == "READY" and "error" not in done
    assert nodes.get(name=f"{PARENT}/nodes/disc").execute()["health"] == "HEALTHY"
    listed = nodes.list(parent=PARENT).execute()
    assert [n["name"].rsplit("/", 1)[-1] for n in listed["nodes"]] == ["disc"]
    versions = tpu.projects().locations().runtimeVersions().list(
        parent=PARENT, filter="version=tpu-vm-cos-stable").execute()
    assert [v["version"] for v in versions["runtimeVersions"]] == ["tpu-vm-cos-stable"]
    # ... and fails where Google would
    with pytest.raises(HttpError) as refused:
        nodes.create(parent=PARENT, nodeId="Bad_Id", body={"acceleratorType": "v5p-8",
                                                           "runtimeVersion": "v2-alpha-tpuv5"}).execute()
    assert refused.value.resp.status == 400
    with pytest.raises(HttpError) as denied:
        nodes.list(parent="projects/nobody-here/locations/us-central1-a").execute()
    assert denied.value.resp.status == 403 and "tpu.nodes.list" in str(denied.value)
    _wait(tpu, fake, nodes.delete(name=f"{PARENT}/nodes/disc").execute())


def test_google_cloud_tpu_works_against_the_fake(fake):
    client = tpu_v2.TpuClient(transport="rest", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": fake.tpu_api_url})
    node = client.create_node(parent=PARENT, node_id="gct", node=tpu_v2.Node(
        accelerator_type="v5p-8", runtime_version="v2-alpha-tpuv5")).result(timeout=30)
    assert node.state == tpu_v2.Node.State.READY
    with pytest.raises(gexc.Forbidden, match="IAM_PERMISSION_DENIED"):
        client.list_nodes(parent="projects/nobody-here/locations/us-central1-a")
    client.delete_node(name=node.name).result(timeout=30)
    client.transport.close()


def test_the_schema_check_refuses_what_google_would_not_send():
    with pytest.raises(AssertionError, match="not in the schema"):
        check({"name": "n", "colour": "red"}, SCHEMAS["Node"], "node")
    with pytest.raises(AssertionError, match="not one of"):
        check({"state": "ACCEPTED_ISH"}, SCHEMAS["Node"], "node")
    with pytest.raises(AssertionError, match="not an integer"):
        check({"networkEndpoints": [{"port": "22"}]}, SCHEMAS["Node"], "node")


def test_each_call_takes_the_query_parameters_the_discovery_document_lists():
    from podctl.fake.api.tpu_api import ROUTES, SYSTEM_PARAMS

    methods: dict[str, set[str]] = {}

    def walk(resources: dict, prefix: str) -> None:
        for name, resource in resources.items():
            for verb, method in resource.get("methods", {}).items():
                methods[f"{prefix}{name}.{verb}"] = {
                    k for k, v in method.get("parameters", {}).items() if v.get("location") == "query"}
            walk(resource.get("resources", {}), f"{prefix}{name}.")

    walk(DOC["resources"], "")
    for route in ROUTES:
        documented = methods.get(f"projects.locations.{route.call}", methods.get(f"projects.{route.call}"))
        assert documented is not None, route.call
        assert set(route.params) == documented, route.call
    assert set(DOC["parameters"]) <= SYSTEM_PARAMS
