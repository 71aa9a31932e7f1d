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
from podctl.errors import (
    AlreadyExistsError, CloudError, InvalidValueError, PermissionDeniedError, PodctlError,
)
from tests.conftest import FAST, PARENT, PROJECT

KEY = "podctl:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests podctl"


def _request(name: str, slice_type: str = "v5p-8", **extra: str) -> create_step.CreateRequest:
    return create_step.CreateRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_type),
                                     labels=podctl_labels("t"), ssh_keys=KEY, extra_metadata=extra)


async def _up(api, name: str, slice_type: str = "v5p-8", **extra: str):
    creation = await create_step.create(api, _request(name, slice_type, **extra))
    return await wait_ready(api, PARENT, name, kind="node", operation=creation.operation, policy=FAST)


async def _down(api, name: str) -> None:
    await terminate.terminate(api, PARENT, name, policy=FAST)


def _node(name: str) -> str:
    return f"{PARENT}/nodes/{name}"


def test_set_key_keeps_every_other_key_and_remove_key_takes_one_away(api, fake):
    async def go():
        info = await _up(api, "meta8", **{BOOT_METADATA_KEY: "abc123"})
        node = info.nodes[0]
        assert node.metadata == {"ssh-keys": KEY, BOOT_METADATA_KEY: "abc123"}
        assert node.boot_version == "abc123"
        before = dict(api.calls)
        pointer = json.dumps({"v": 1, "run": "r1"})
        written = await node_metadata.set_key(api, _node("meta8"), "podctl-run", pointer,
                                              current=node.metadata, policy=FAST)
        assert written == {**node.metadata, "podctl-run": pointer}
        # one patch, no read: CURRENT was given
        assert api.calls["nodes.patch"] - before.get("nodes.patch", 0) == 1
        assert api.calls["nodes.get"] == before.get("nodes.get", 0)
        got = (await describe.describe(api, PARENT, "meta8")).nodes[0]
        assert got.metadata == written and got.metadata["ssh-keys"] == KEY
        # read with nodes.get when CURRENT is None; a second key keeps the first
        await node_metadata.set_key(api, _node("meta8"), "other", "x", policy=FAST)
        got = (await describe.describe(api, PARENT, "meta8")).nodes[0]
        assert got.metadata == {**written, "other": "x"}
        await node_metadata.remove_key(api, _node("meta8"), "podctl-run", policy=FAST)
        got = (await describe.describe(api, PARENT, "meta8")).nodes[0]
        assert got.metadata == {"ssh-keys": KEY, BOOT_METADATA_KEY: "abc123", "other": "x"}
        patches = api.calls["nodes.patch"]
        # nothing to do, nothing sent
        await node_metadata.remove_key(api, _node("meta8"), "podctl-run", current=got.metadata)
        await node_metadata.set_key(api, _node("meta8"), "other", "x", current=got.metadata)
        assert api.calls["nodes.patch"] == patches
        await _down(api, "meta8")

    asyncio.run(go())


def test_concurrent_writes_all_land_and_a_foreign_update_in_flight_is_waited_out(api, fake):
    """Two set_key at once (this process's writes take turns), and one while another
    update of the node runs: on a fake whose patch is a long-running operation that
    answers 409 to a second patch, the 409 is read again and retried."""
    async def go():
        info = await _up(api, "conc8")
        node = info.nodes[0]
        await asyncio.gather(
            node_metadata.set_key(api, _node("conc8"), "a", "1", current=node.metadata, policy=FAST),
            node_metadata.set_key(api, _node("conc8"), "b", "2", current=node.metadata, policy=FAST))
        got = (await describe.describe(api, PARENT, "conc8")).nodes[0].metadata
        assert got == {"ssh-keys": KEY, "a": "1", "b": "2"}
        # someone else's update (the labels) in flight, not waited for
        await api.update_node_labels(_node("conc8"), {**info.labels, "team": "lm"})
        await node_metadata.set_key(api, _node("conc8"), "c", "3", policy=FAST)
        after = await describe.describe(api, PARENT, "conc8")
        assert after.nodes[0].metadata == {**got, "c": "3"}
        deadline = asyncio.get_running_loop().time() + 10
        while (await describe.describe(api, PARENT, "conc8")).labels.get("team") != "lm":
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        # a patch not waited for is waited for by the next write, which keeps its key
        await node_metadata.set_key(api, _node("conc8"), "d", "4", wait=False)
        await node_metadata.set_key(api, _node("conc8"), "e", "5", policy=FAST)
        final = (await describe.describe(api, PARENT, "conc8")).nodes[0].metadata
        assert final == {**got, "c": "3", "d": "4", "e": "5"}
        await _down(api, "conc8")

    asyncio.run(go())


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


def test_refusals_are_one_line_that_says_what_to_do(api, fake):
    async def go():
        info = await _up(api, "deny8")
        node = info.nodes[0]
        with pytest.raises(InvalidValueError, match="512 KB"):  # the API's own check of the limits
            await api.update_node_metadata(_node("deny8"), {**node.metadata, "bad key": "v"})
        patches = api.calls["nodes.patch"]
        with pytest.raises(InvalidValueError, match="256 KiB"):
            await node_metadata.set_key(api, _node("deny8"), "big", "x" * 262145, current=node.metadata)
        with pytest.raises(InvalidValueError, match="letters, digits"):
            await node_metadata.set_key(api, _node("deny8"), "no spaces", "x", current=node.metadata)
        assert api.calls["nodes.patch"] == patches  # refused before any call
        fake.admin.set_project(PROJECT, denied=["tpu.nodes.update"])
        try:
            with pytest.raises(PermissionDeniedError) as e:
                await node_metadata.set_key(api, _node("deny8"), "k", "v", current=node.metadata)
        finally:
            fake.admin.set_project(PROJECT, denied=[])
        assert "tpu.nodes.update" in str(e.value) and "\n" not in str(e.value)
        await asyncio.to_thread(lambda: api.client.stop_node(request={"name": _node("deny8")}).result(timeout=30))
        with pytest.raises(CloudError, match="only while it is READY") as e:
            await node_metadata.set_key(api, _node("deny8"), "k", "v", current=node.metadata)
        assert "STOPPED" in str(e.value) and "\n" not in str(e.value)
        await _down(api, "deny8")

    asyncio.run(go())


def _http_error(status: int, rpc_status: str, message: str) -> gexc.GoogleAPICallError:
    response = requests.Response()
    response.status_code = status
    response._content = json.dumps({"error": {"code": status, "message": message,
                                              "status": rpc_status}}).encode()
    response.request = requests.Request("PATCH", "http://127.0.0.1/v2/x").prepare()
    return gexc.from_http_response(response)


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


def _publish(fake, node_name: str, worker: int, path: str, value: str) -> None:
    """What a process on host WORKER does: PUT a guest attribute to its metadata server."""
    host = fake.hosts.nodes[node_name].hosts[worker]
    request = urllib.request.Request(
        f"http://{host.metadata_host}/computeMetadata/v1/instance/guest-attributes/{path}",
        data=value.encode(), method="PUT", headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200


def test_guest_attributes_come_one_list_per_worker_in_worker_order(api, fake):
    async def go():
        await _up(api, "guest16", "v5p-16")
        name = _node("guest16")
        _publish(fake, name, 0, "podctl/watch", "ready v1 0")
        _publish(fake, name, 0, "podctl/run", "r1 started")
        _publish(fake, name, 1, "podctl/watch", "ready v1 0")
        _publish(fake, name, 1, "other/x", "y")
        got = await node_metadata.guest_attributes(api, name, "podctl/")
        assert got == [[GuestEntry("podctl", "run", "r1 started"), GuestEntry("podctl", "watch", "ready v1 0")],
                       [GuestEntry("podctl", "watch", "ready v1 0")]]
        assert await api.get_guest_attributes(name, "podctl/watch", worker_ids=[1]) == [
            [GuestEntry("podctl", "watch", "ready v1 0")]]
        assert api.calls["nodes.getGuestAttributes"] == 2
        # only worker 1 has something under podctl/state: with the host count, it is said whose
        _publish(fake, name, 1, "podctl/state", "up")
        assert await node_metadata.guest_attributes(api, name, "podctl/state", workers=2) == [
            [], [GuestEntry("podctl", "state", "up")]]
        both = await node_metadata.guest_attributes(api, name, "podctl/watch", workers=2)
        assert both == [[GuestEntry("podctl", "watch", "ready v1 0")]] * 2
        await _down(api, "guest16")

    asyncio.run(go())


def test_extra_metadata_goes_beside_ssh_keys_and_changes_nothing_without_it():
    from podctl.jobs.run_layout import BOOT_KEY

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
