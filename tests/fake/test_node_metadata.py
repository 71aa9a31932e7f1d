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
from tests.unit.test_node_metadata import KEY, _node, _request  # noqa: F401


async def _up(api, name: str, slice_type: str = "v5p-8", **extra: str):
    creation = await create_step.create(api, _request(name, slice_type, **extra))
    return await wait_ready(api, PARENT, name, kind="node", operation=creation.operation, policy=FAST)


async def _down(api, name: str) -> None:
    await terminate.terminate(api, PARENT, name, policy=FAST)


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


