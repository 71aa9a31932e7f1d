"""podctl against answers shaped as the real Cloud TPU service sends them (issue 11, item 1).

The answers come from tests/replay_tpu.py, a replay of recorded real traffic, not
from the fake: operation metadata typed google.cloud.common.OperationMetadata (or
a type nobody knows), a first reply without `done`, a finished create whose Node
has no `health`, a delete whose response is google.protobuf.Empty. podctl's own
code path (TpuApi, up, wait, terminate) must create, wait for and delete through
them, for a node and for a queued resource.
"""

from __future__ import annotations

import asyncio

import pytest
from google.api_core.client_options import ClientOptions
from google.cloud import tpu_v2
from google.oauth2.credentials import Credentials

from podctl.cloud import describe, terminate
from podctl.cloud.connect import api_for_endpoint
from podctl.cloud.operations import Operation
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.cloud.wait import WaitPolicy
from podctl.base.errors import NotFoundError
from tests.replay_tpu import DELETE_DONE, Replay, TOKEN

FAST = WaitPolicy(initial=0.01, maximum=0.05, jitter=0.0, timeout=30)
PARENT = "projects/replay-project/locations/us-central1-a"
UNKNOWN = "type.googleapis.com/google.cloud.tpu.v9.MetadataNobodyHasSeen"


def _api(replay: Replay):
    return api_for_endpoint(replay.url, Credentials(token=TOKEN))


def _up(api, name: str, slice_name: str = "v5p-8", **spec: object):
    request = UpRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_name, **spec),
                        ssh_keys="podctl:ssh-ed25519 AAAA podctl", owner="tester", policy=FAST)
    return asyncio.run(up(api, request))


@pytest.mark.parametrize("metadata_type", [None, UNKNOWN], ids=["recorded", "unknown-type"])
def test_node_create_wait_delete_through_recorded_answers(metadata_type):
    with Replay(metadata_type=metadata_type) as replay:
        api = _api(replay)
        result = _up(api, "real")
        info = result.info
        assert result.created and info.ready and info.state == "READY"
        assert info.health is None  # the finished create's Node carries none
        assert [(h.ip, h.external_ip) for h in info.hosts] == [("10.20.30.40", "8.8.8.8")]
        gone = asyncio.run(terminate.terminate(api, PARENT, "real", policy=FAST))
        assert gone.name == "real" and not replay.nodes
        with pytest.raises(NotFoundError):
            asyncio.run(describe.describe(api, PARENT, "real"))
        api.close()


@pytest.mark.parametrize("metadata_type", [None, UNKNOWN], ids=["recorded", "unknown-type"])
def test_queued_resource_create_wait_delete(metadata_type):
    with Replay(metadata_type=metadata_type) as replay:
        api = _api(replay)
        info = _up(api, "qr", queued=True).info
        assert info.kind == "queued-resource" and info.state == "ACTIVE" and info.ready
        asyncio.run(terminate.terminate(api, PARENT, "qr", policy=FAST))
        assert not replay.queued and not replay.nodes
        api.close()


def test_operation_reads_recorded_delete_reply_and_empty_response():
    op = Operation.from_json(DELETE_DONE)
    assert op.done and op.exception() is None and op.node() is None
    assert op.response_type() == "google.protobuf.Empty"
    first = Operation.from_json({"name": "projects/p/locations/z/operations/o",
                                 "metadata": {"@type": UNKNOWN}})
    assert first.done is False  # `done` absent means not done


def test_the_stock_client_cannot_read_an_unknown_metadata_type():
    """Why podctl reads operations itself: google-cloud-tpu's own LRO parsing unpacks
    the metadata and fails on a type it has no descriptor for."""
    with Replay(metadata_type=UNKNOWN) as replay:
        client = tpu_v2.TpuClient(transport="rest", credentials=Credentials(token=TOKEN),
                                  client_options=ClientOptions(api_endpoint=replay.url))
        with pytest.raises(Exception, match="Can not find message descriptor"):
            client.create_node(parent=PARENT, node_id="stock", node=tpu_v2.Node(
                accelerator_type="v5p-8", runtime_version="v2-alpha-tpuv5"))
        assert len(replay.nodes) == 1  # it was created all the same: the bill runs
