"""The fake cloud's own surface, through the real client where there is one:
the calls podctl does not use yet but the fake serves, its switches, and its limits."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from google.api_core import exceptions as gexc
from google.cloud import tpu_v2
from google.protobuf import field_mask_pb2

from podctl.base.errors import FakeCloudError
from podctl.fake.api.server import FakeCloud, require_loopback
from tests.conftest import PARENT, isolated_environ

NODE = dict(accelerator_type="v5p-8", runtime_version="v2-alpha-tpuv5")


def test_stop_start_update_guest_attributes(client, fake):
    node = client.create_node(parent=PARENT, node_id="one", node=tpu_v2.Node(**NODE)).result(timeout=10)
    assert node.state == tpu_v2.Node.State.READY
    stopped = client.stop_node(request={"name": node.name}).result(timeout=10)
    assert stopped.state == tpu_v2.Node.State.STOPPED
    started = client.start_node(request={"name": node.name}).result(timeout=10)
    assert started.state == tpu_v2.Node.State.READY
    updated = client.update_node(node=tpu_v2.Node(name=node.name, labels={"team": "lm"}),
                                 update_mask=field_mask_pb2.FieldMask(paths=["labels"])).result(timeout=10)
    assert dict(updated.labels) == {"team": "lm"}
    assert list(client.get_guest_attributes(request={"name": node.name}).guest_attributes) == []
    ops = list(client.list_operations(request={"name": PARENT}).operations)
    assert {op.metadata.type_url.rsplit(".", 1)[-1] for op in ops} == {"OperationMetadata"}
    client.delete_node(name=node.name).result(timeout=10)


def test_multi_host_nodes_do_not_stop(client, fake):
    node = client.create_node(parent=PARENT, node_id="big", node=tpu_v2.Node(
        accelerator_type="v5p-16", runtime_version="v2-alpha-tpuv5")).result(timeout=10)
    with pytest.raises(gexc.BadRequest, match="only single-host nodes stop"):
        client.stop_node(request={"name": node.name})
    client.delete_node(name=node.name).result(timeout=10)


def test_queued_resource_rules(client, fake):
    qr = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[
        tpu_v2.QueuedResource.Tpu.NodeSpec(parent=PARENT, node_id="qn", node=tpu_v2.Node(**NODE))]),
        spot=tpu_v2.QueuedResource.Spot())
    client.create_queued_resource(parent=PARENT, queued_resource_id="q", queued_resource=qr).result(timeout=10)
    name = f"{PARENT}/queuedResources/q"
    deadline = time.time() + 10
    while client.get_queued_resource(name=name).state.state != tpu_v2.QueuedResourceState.State.ACTIVE:
        assert time.time() < deadline
        time.sleep(0.05)
    with pytest.raises(gexc.BadRequest, match="force=true"):
        client.delete_queued_resource(name=name)
    with pytest.raises(gexc.BadRequest, match="belongs to queued resource"):
        client.delete_node(name=f"{PARENT}/nodes/qn")
    fake.admin.preempt("qn")  # preempting its node suspends the queued resource
    fake.admin.advance(100)
    assert client.get_queued_resource(name=name).state.state == tpu_v2.QueuedResourceState.State.SUSPENDED
    client.reset_queued_resource(name=name).result(timeout=10)
    assert client.get_queued_resource(name=name).state.state in {
        tpu_v2.QueuedResourceState.State.WAITING_FOR_RESOURCES, tpu_v2.QueuedResourceState.State.PROVISIONING,
        tpu_v2.QueuedResourceState.State.ACTIVE}
    client.delete_queued_resource(request={"name": name, "force": True}).result(timeout=10)


def test_bad_requests_are_refused_like_google_does(client, fake):
    with pytest.raises(gexc.BadRequest, match="Invalid node id"):
        client.create_node(parent=PARENT, node_id="Bad_Id", node=tpu_v2.Node(**NODE))
    with pytest.raises(gexc.BadRequest, match="Runtime version"):
        client.create_node(parent=PARENT, node_id="ok", node=tpu_v2.Node(
            accelerator_type="v5p-8", runtime_version="nope"))
    with pytest.raises(gexc.BadRequest, match="not available in zone us-central1-a"):
        client.create_node(parent=PARENT, node_id="ok", node=tpu_v2.Node(  # v4 is us-central2-b's
            accelerator_config=tpu_v2.AcceleratorConfig(type_=tpu_v2.AcceleratorConfig.Type.V4,
                                                        topology="2x2x1"),
            runtime_version="tpu-ubuntu2204-base"))
    with pytest.raises(gexc.BadRequest, match="not offered here"):
        client.create_node(parent=PARENT, node_id="ok", node=tpu_v2.Node(
            accelerator_config=tpu_v2.AcceleratorConfig(type_=tpu_v2.AcceleratorConfig.Type.V2,
                                                        topology="2x2"),
            runtime_version="v2-alpha-tpuv5"))
    with pytest.raises(gexc.BadRequest, match="Invalid label key"):
        client.create_node(parent=PARENT, node_id="ok", node=tpu_v2.Node(labels={"Bad": "x"}, **NODE))
    with pytest.raises(gexc.NotFound, match="Location"):
        client.list_nodes(parent="projects/test-project/locations/mars-central1-a")
    with pytest.raises(gexc.Forbidden, match="tpu.nodes.list"):  # a project the fake does not know
        client.list_nodes(parent="projects/p/locations/us-central1-a")
    assert fake.admin.is_empty()


def test_accelerator_config_topology_is_accepted(client, fake):
    node = client.create_node(parent=PARENT, node_id="cfg", node=tpu_v2.Node(
        accelerator_config=tpu_v2.AcceleratorConfig(type_=tpu_v2.AcceleratorConfig.Type.V5P,
                                                    topology="2x2x4"),
        runtime_version="v2-alpha-tpuv5")).result(timeout=10)
    assert node.accelerator_type == "v5p-32" and len(node.network_endpoints) == 4
    client.delete_node(name=node.name).result(timeout=10)


def test_preemption_after_a_delay(client, fake):
    node = client.create_node(parent=PARENT, node_id="later", node=tpu_v2.Node(**NODE)).result(timeout=10)
    fake.admin.preempt("later", after=60)
    assert client.get_node(name=node.name).state == tpu_v2.Node.State.READY
    fake.admin.advance(61)
    assert client.get_node(name=node.name).state == tpu_v2.Node.State.PREEMPTED
    client.delete_node(name=node.name).result(timeout=10)


def test_the_fake_binds_loopback_only():
    for host in ("0.0.0.0", "10.1.2.3", "example.com", "::"):
        with pytest.raises(FakeCloudError, match="loopback only"):
            require_loopback(host)
        with pytest.raises(FakeCloudError):
            FakeCloud(host=host)
    require_loopback("127.0.0.1")
    require_loopback("::1")


def test_two_starts_at_once_make_one_daemon(tmp_path):
    env = isolated_environ(tmp_path)
    cmd = [sys.executable, "-m", "podctl", "fake", "start", "--json"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        pids = {json.loads(p.communicate(timeout=60)[0])["pid"] for p in procs}
        assert len(pids) == 1
    finally:
        subprocess.run([sys.executable, "-m", "podctl", "fake", "stop"], env=env, check=True,
                       capture_output=True)


def test_a_stale_daemon_file_never_signals_a_stranger(tmp_path):
    from podctl.fake.admin import daemon

    state = tmp_path / "fake"
    state.mkdir()
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        (state / "daemon.json").write_text(json.dumps(
            {"pid": stranger.pid, "admin": "http://127.0.0.1:9/admin", "tpu_api": "http://127.0.0.1:9"}))
        assert daemon.status(state) == {"running": False, "state_dir": str(state)}
        assert daemon.stop(state) is False
        assert stranger.poll() is None  # still alive
    finally:
        stranger.kill()
        stranger.wait()
