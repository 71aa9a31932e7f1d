"""A node's metadata, one key at a time (cloud/node_metadata.py), and its hosts' guest
attributes, through google-cloud-tpu's REST client against the fake TPU API: one
nodes.patch with updateMask=metadata and the whole map, as gcloud's `tpu-vm ssh` adds
its key; a 409 (another update in flight) re-read and retried for 60 s at most."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
import requests
from google.api_core import exceptions as gexc

from podctl.cloud import create as create_step
from podctl.cloud import describe, node_metadata, operations, terminate
from podctl.cloud.names import podctl_labels
from podctl.cloud.translate import translate_metadata_update
from podctl.cloud.types import BOOT_METADATA_KEY, GuestEntry, SliceSpec
from podctl.cloud.wait import Clock, wait_ready
from podctl.base.errors import (
    AlreadyExistsError, CloudError, InvalidValueError, PermissionDeniedError, PodctlError,
)
from tests.conftest import FAST, PARENT, PROJECT


KEY = "podctl:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests podctl"


def _request(name: str, slice_type: str = "v5p-8", **extra: str) -> create_step.CreateRequest:
    return create_step.CreateRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_type),
                                     labels=podctl_labels("t"), ssh_keys=KEY, extra_metadata=extra)


def _node(name: str) -> str:
    return f"{PARENT}/nodes/{name}"


class _Busy:
    """A node whose updates are always refused with 409 (another update in flight)."""

    def __init__(self):
        self.patches = 0
        self.gets = 0

    async def get_node(self, name):
        self.gets += 1
        return type("Node", (), {"metadata": {"ssh-keys": KEY}})()

    async def update_node_metadata(self, name, metadata):
        self.patches += 1
        raise AlreadyExistsError("already exists (updating): the node is being updated")


def _http_error(status: int, rpc_status: str, message: str) -> gexc.GoogleAPICallError:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps({"error": {"code": status, "message": message,
                                              "status": rpc_status}}).encode()
    response.request = requests.Request("PATCH", "http://127.0.0.1/v2/x").prepare()
    return gexc.from_http_response(response)


def test_409s_are_retried_with_backoff_for_60_s_then_one_clear_error():
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    api = _Busy()
    with pytest.raises(CloudError, match=r"gave up setting k on node busy after 60 s: another update of the node") as e:
        asyncio.run(node_metadata.set_key(api, _node("busy"), "k", "v",  # type: ignore[arg-type]
                                          clock=Clock(now=lambda: now[0], sleep=sleep)))
    assert "\n" not in str(e.value) and not isinstance(e.value, AlreadyExistsError)
    assert 60.0 <= now[0] < 61.0
    # backoff 1, 2, 4, 8, 8 ... (halved at most by jitter): about 10 tries, each after a read
    assert 8 <= api.patches <= 20 and api.gets == api.patches


def test_a_refused_patch_is_translated_where_it_enters():
    node = _node("n")
    limit = translate_metadata_update(_http_error(400, "INVALID_ARGUMENT", "Invalid metadata key"),
                                      "setting k", node)
    assert isinstance(limit, InvalidValueError) and "512 KB" in str(limit)
    busy = translate_metadata_update(_http_error(400, "FAILED_PRECONDITION", "Node is CREATING"),
                                     "setting k", node)
    assert type(busy) is CloudError and "only while it is READY" in str(busy)
    conflict = translate_metadata_update(_http_error(409, "ABORTED", "being updated"), "setting k", node)
    assert isinstance(conflict, AlreadyExistsError)  # retried by node_metadata
    aborted = translate_metadata_update(gexc.from_grpc_status(10, "being updated"), "setting k", node)
    assert isinstance(aborted, AlreadyExistsError)  # an operation that ended ABORTED: retried too
    for error in (limit, busy, conflict):
        assert isinstance(error, PodctlError) and "\n" not in str(error)


def test_extra_metadata_goes_beside_ssh_keys_and_changes_nothing_without_it():
    from podctl.host.run_layout import BOOT_KEY

    assert BOOT_KEY == BOOT_METADATA_KEY
    plain = create_step.CreateRequest(parent=PARENT, name="x", spec=SliceSpec.build("v5p-8"),
                                      labels={"a": "b"}, ssh_keys=KEY)
    body = operations.to_body(create_step.node_template(plain))
    assert body["metadata"] == {"ssh-keys": KEY}
    assert json.dumps(operations.to_body(create_step.node_template(_request("x"))), sort_keys=True) == \
        json.dumps(operations.to_body(create_step.node_template(
            create_step.CreateRequest(parent=PARENT, name="x", spec=SliceSpec.build("v5p-8"),
                                      labels=podctl_labels("t"), ssh_keys=KEY))), sort_keys=True)
    extra = _request("x", **{"startup-script": "#!/bin/bash\necho hi\n", BOOT_METADATA_KEY: "v1"})
    assert dict(create_step.node_template(extra).metadata) == {
        "ssh-keys": KEY, "startup-script": "#!/bin/bash\necho hi\n", BOOT_METADATA_KEY: "v1"}
    queued = create_step.queued_resource(extra)
    assert dict(queued.tpu.node_spec[0].node.metadata)[BOOT_METADATA_KEY] == "v1"
    with pytest.raises(InvalidValueError, match="ssh-keys"):
        _request("x", **{"ssh-keys": "other"})
    with pytest.raises(InvalidValueError, match="letters, digits"):
        _request("x", **{"bad key": "v"})

