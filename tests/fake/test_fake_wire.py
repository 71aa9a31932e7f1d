"""The fake speaks the wire protocol the real client expects: every resource it
answers with parses strictly (no field the proto lacks) and its enum numbers are
those of cloud_tpu.proto."""

import json
import urllib.request

import pytest
from google.cloud import tpu_v2
from google.longrunning import operations_pb2
from google.protobuf import json_format

from podctl.fake.api import wire
from tests.conftest import PARENT

ENUMS = [
    (wire.NODE_STATE, tpu_v2.Node.State), (wire.NODE_HEALTH, tpu_v2.Node.Health),
    (wire.API_VERSION, tpu_v2.Node.ApiVersion), (wire.ACCELERATOR_TYPE, tpu_v2.AcceleratorConfig.Type),
    (wire.QR_STATE, tpu_v2.QueuedResourceState.State),
    (wire.STATE_INITIATOR, tpu_v2.QueuedResourceState.StateInitiator),
]


@pytest.mark.parametrize("table, enum", ENUMS)
def test_enum_numbers_match_the_proto(table, enum):
    assert table == {m.name: m.value for m in enum}


def _get(url: str, method: str = "GET", body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def _strict(payload: dict, message_type) -> None:
    json_format.ParseDict(payload, message_type(), ignore_unknown_fields=False)


@pytest.mark.parametrize("ints", [True, False])
def test_resources_parse_strictly(fake, ints):
    fake.admin.set_timings(time_scale=1e6)
    q = "?%24alt=json%3Benum-encoding%3Dint" if ints else ""
    amp = "&" if ints else "?"
    base = f"{fake.tpu_api_url}/v2/{PARENT}"
    node = {"acceleratorType": "v5p-16", "runtimeVersion": "v2-alpha-tpuv5", "labels": {"a": "b"}}
    op = _get(f"{base}/nodes{q}{amp}nodeId=n1", "POST", node)
    _strict(op, operations_pb2.Operation)
    qr = {"tpu": {"nodeSpec": [{"parent": PARENT, "node": node,
                                "multisliceParams": {"nodeCount": 2, "nodeIdPrefix": "ms"}}]},
          "spot": {}, "queueingPolicy": {"validUntilDuration": "3600s"}}
    _strict(_get(f"{base}/queuedResources{q}{amp}queuedResourceId=q1", "POST", qr), operations_pb2.Operation)
    fake.admin.advance(600)
    done = _get(f"{fake.tpu_api_url}/v2/{op['name']}{q}")
    assert done["done"] and done["response"]["@type"].endswith("tpu.v2.Node")
    parsed = operations_pb2.Operation()
    json_format.ParseDict(done, parsed, ignore_unknown_fields=False)
    node_pb = tpu_v2.Node.pb()()
    parsed.response.Unpack(node_pb)
    assert node_pb.state == tpu_v2.Node.State.READY
    _strict(_get(f"{base}/nodes/n1{q}"), tpu_v2.Node.pb())
    _strict(_get(f"{base}/nodes{q}"), tpu_v2.ListNodesResponse.pb())
    _strict(_get(f"{base}/queuedResources{q}"), tpu_v2.ListQueuedResourcesResponse.pb())
    _strict(_get(f"{base}/acceleratorTypes{q}"), tpu_v2.ListAcceleratorTypesResponse.pb())
    _strict(_get(f"{base}/runtimeVersions{q}"), tpu_v2.ListRuntimeVersionsResponse.pb())
    _strict(_get(f"{base}/queuedResources/q1{q}"), tpu_v2.QueuedResource.pb())
    if ints:
        assert _get(f"{base}/nodes/n1{q}")["state"] == 2
    else:
        assert _get(f"{base}/nodes/n1")["state"] == "READY"
    _get(f"{base}/nodes/n1", "DELETE")
    _get(f"{base}/queuedResources/q1?force=true", "DELETE")
    fake.admin.advance(600)


def test_errors_come_in_googles_shape(fake):
    req = urllib.request.Request(f"{fake.tpu_api_url}/v2/{PARENT}/nodes/nope")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    body = json.loads(e.value.read())
    assert e.value.code == 404 and body["error"]["status"] == "NOT_FOUND"
