"""The fake's side of issue 26, against a fake daemon through the real clients:
google-cloud-tpu's REST TpuClient for nodes.patch, raw HTTP to a host's metadata server
(as a host's watcher long-polls it), asyncssh for SSH, `podctl fake inject` for faults.

- a node's `startup-script` runs on every host at every boot (creation, reboot,
  maintenance), with the host's environment, its output in the host's serial console;
- `no-ssh` refuses connections, outlives a maintenance, and `--off` ends it;
- a directory `wait_for_change` answers at once for `NONE`, wakes on a patch only once
  it has propagated, and times out with the same ETag;
- nodes.patch refuses what Google refuses (409 while another runs, F7's limits, a node
  not READY, a mask outside the documented paths).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from pathlib import Path

import asyncssh
import pytest
from google.api_core import exceptions
from google.cloud import tpu_v2
from google.protobuf import field_mask_pb2

from podctl.cloud.connect import api_for_endpoint
from podctl.fake.admin.admin_client import FakeAdmin
from tests.conftest import FAST_RETRY, Podctl, stop_fake_and_check

RUNTIME = "v2-alpha-tpuv5"
SCALE = 10.0  # simulated seconds per real second in this file
# Simulated seconds: creation 0.3 s, a patch 0.2 s, its propagation 1.5 s (real)
TIMINGS = {"time_scale": SCALE, "node_create": 3.0, "node_delete": 1.0, "node_stop": 1.0, "node_start": 3.0,
           "node_update": 2.0, "metadata_propagation": 15.0}
SCRIPT = """#!/bin/bash
W=$(python3 -c 'import os, urllib.request as u; print(u.urlopen(u.Request("http://%s/computeMetadata/v1/instance/attributes/agent-worker-number" % os.environ["GCE_METADATA_HOST"], headers={"Metadata-Flavor": "Google"})).read().decode())')
echo "boot $W ${TPU_WORKER_ID-unset} $USER $PWD $HOME $GCE_METADATA_HOST" >> "$HOME/boots.txt"
setsid nohup sleep 300 >/dev/null 2>&1 </dev/null &
echo $! > "$HOME/detached.pid"
echo "console line from worker $W"
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    cli = Podctl(tmp_path_factory.mktemp("boot"))
    cli.env["PODCTL_BACKEND"] = "fake"
    info = json.loads(cli("fake", "start", "--json").stdout)
    admin = FakeAdmin(info["admin"])
    admin.set_timings(**TIMINGS)
    yield cli, info, admin
    stop_fake_and_check(cli)  # nothing billable left


@pytest.fixture
def cloud(daemon):
    cli, info, admin = daemon
    admin.set_timings(**TIMINGS)
    client = api_for_endpoint(info["tpu_api"], retry=FAST_RETRY).client
    parent = f"projects/{info['project']}/locations/{info['zone']}"
    made: list[str] = []

    def make(node_id: str, slice_type: str = "v5p-8", metadata: dict | None = None):
        made.append(f"{parent}/nodes/{node_id}")
        node = tpu_v2.Node(accelerator_type=slice_type, runtime_version=RUNTIME, metadata=metadata or {})
        return client.create_node(parent=parent, node_id=node_id, node=node).result(timeout=30)

    yield cli, info, admin, client, make
    for name in made:
        try:
            client.delete_node(name=name).result(timeout=30)
        except exceptions.NotFound:
            pass


def eventually(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def host_dir(info: dict, node_name: str, worker: int) -> Path:
    _, project, _, zone, _, node_id = node_name.split("/")
    return Path(info["hosts_root"], project, zone, node_id, f"host-{worker:04d}")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def boots_seen(info: dict, node_name: str, workers: int) -> list[int]:
    counts = []
    for w in range(workers):
        path = host_dir(info, node_name, w) / "root" / "boots.txt"
        counts.append(len(path.read_text().splitlines()) if path.exists() else 0)
    return counts


def test_the_startup_script_runs_at_every_boot(cloud):
    cli, info, admin, client, make = cloud
    node = make("bootme", "v5p-16", {"startup-script": SCRIPT})
    assert eventually(lambda: boots_seen(info, node.name, 2) == [1, 1]), boots_seen(info, node.name, 2)
    assert [h["boots"] for h in admin.host_stats("bootme")] == [1, 1]
    line = (host_dir(info, node.name, 1) / "root" / "boots.txt").read_text().split()
    metadata = admin.hosts()["nodes"][node.name]["metadata"]
    assert line == ["boot", "1", "unset", "root", str(host_dir(info, node.name, 1)),
                    str(host_dir(info, node.name, 1) / "root"), metadata[1]]
    console = host_dir(info, node.name, 0) / "startup-script.log"
    assert eventually(lambda: console.exists() and "console line from worker 0" in console.read_text())
    pid_file = host_dir(info, node.name, 0) / "root" / "detached.pid"
    assert eventually(pid_file.exists)
    first = int(eventually(pid_file.read_text))
    assert alive(first)

    # a reboot: what the host started dies, the script runs again
    out = cli("fake", "inject", "reboot", "bootme").stdout
    assert "rebooted worker(s) 0,1" in out
    assert eventually(lambda: not alive(first))
    assert eventually(lambda: boots_seen(info, node.name, 2) == [2, 2])
    # a maintenance: the hosts go down and come back, and boot again
    admin.maintenance("bootme", after=0, window=5)
    assert eventually(lambda: boots_seen(info, node.name, 2) == [3, 3])
    assert eventually(lambda: [h["boots"] for h in admin.host_stats("bootme")] == [3, 3])
    # one worker alone
    cli("fake", "inject", "reboot", "bootme", "--worker", "1")
    assert eventually(lambda: boots_seen(info, node.name, 2) == [3, 4])
    assert [h["boots"] for h in admin.host_stats("bootme")] == [3, 4]
    assert console.read_text().count("console line from worker 0") == 3

    # a node without a startup-script boots nothing
    plain = make("noscript")
    assert [h["boots"] for h in admin.host_stats("noscript")] == [0]
    assert not (host_dir(info, plain.name, 0) / "startup-script.log").exists()


def test_a_stopped_node_boots_again_when_started(cloud):
    cli, info, admin, client, make = cloud
    node = make("startme", "v5p-8", {"startup-script": SCRIPT})
    assert eventually(lambda: boots_seen(info, node.name, 1) == [1])
    client.stop_node(request={"name": node.name}).result(timeout=30)
    assert admin.host_stats("startme") == []  # no hosts while STOPPED
    client.start_node(request={"name": node.name}).result(timeout=30)
    assert eventually(lambda: boots_seen(info, node.name, 1) == [2])
    assert [h["boots"] for h in admin.host_stats("startme")] == [2]


def _ssh(address: str, port: int, key: asyncssh.SSHKey) -> str:
    async def go():
        async with asyncssh.connect(address, port, username="podctl", client_keys=[key],
                                    known_hosts=None, agent_path=None) as conn:
            return (await conn.run("echo up")).stdout
    return asyncio.run(go())


def test_no_ssh_refuses_connections_outlives_maintenance_and_off_restores(cloud):
    cli, info, admin, client, make = cloud
    key = asyncssh.generate_private_key("ssh-ed25519")
    pub = key.export_public_key().decode().strip()
    node = make("nossh", "v5p-16", {"ssh-keys": f"podctl:{pub} podctl"})
    where = [(ep.ip_address, info["ssh_port"] or ep.port) for ep in node.network_endpoints]
    assert _ssh(*where[1], key) == "up\n"
    assert [h["ssh_total"] for h in admin.host_stats("nossh")] == [0, 1]
    cli("fake", "inject", "no-ssh", "nossh")
    for address, port in where:
        with pytest.raises(ConnectionRefusedError):
            _ssh(address, port, key)
    assert admin.hosts()["nodes"][node.name]["no_ssh"] is True
    cli("fake", "inject", "no-ssh", "nossh", "--off")  # back at once
    assert eventually(lambda: _try(lambda: _ssh(*where[1], key)) == "up\n")
    assert [h["ssh_total"] for h in admin.host_stats("nossh")] == [0, 2]
    cli("fake", "inject", "no-ssh", "nossh")
    with pytest.raises(ConnectionRefusedError):
        _ssh(*where[1], key)
    admin.maintenance("nossh", after=0, window=5)
    assert eventually(lambda: node.name not in admin.hosts()["nodes"])  # down
    assert eventually(lambda: node.name in admin.hosts()["nodes"])  # and back
    assert eventually(lambda: admin.host_stats("nossh") and all(h["alive"] for h in admin.host_stats("nossh")))
    time.sleep(0.2)
    with pytest.raises(ConnectionRefusedError):
        _ssh(*where[0], key)
    assert [h["ssh_total"] for h in admin.host_stats("nossh")] == [0, 2]  # none accepted
    assert "SSH answers again" in cli("fake", "inject", "no-ssh", "nossh", "--off").stdout
    assert eventually(lambda: _try(lambda: _ssh(*where[0], key)) == "up\n")
    assert [h["ssh_total"] for h in admin.host_stats("nossh")][0] >= 1


def _try(action):
    try:
        return action()
    except OSError:
        return None


def _get(where: str, path: str, timeout: float = 60) -> tuple[dict | str, str]:
    request = urllib.request.Request(f"http://{where}/computeMetadata/v1/{path}",
                                     headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read().decode()
        kind = response.headers.get("Content-Type", "")
        return (json.loads(body) if "json" in kind else body), response.headers["ETag"]


WATCH = "instance/attributes/?recursive=true&alt=json&wait_for_change=true"


def _patch(client, name: str, metadata: dict, paths: tuple[str, ...] = ("metadata",)):
    return client.update_node(node=tpu_v2.Node(name=name, metadata=metadata),
                              update_mask=field_mask_pb2.FieldMask(paths=list(paths)))


def test_directory_wait_for_change_wakes_on_a_patch_once_it_has_propagated(cloud):
    cli, info, admin, client, make = cloud
    node = make("watch", "v5p-8", {"podctl-boot": "1"})
    where = admin.hosts()["nodes"][node.name]["metadata"][0]
    started = time.monotonic()
    first, tag = _get(where, WATCH + "&last_etag=NONE&timeout_sec=30")
    assert time.monotonic() - started < 1.0  # NONE: at once
    assert isinstance(first, dict) and "podctl-boot" in first, first
    assert first["podctl-boot"] == "1" and "podctl-run" not in first and len(tag) == 8
    plain, plain_tag = _get(where, "instance/attributes/?recursive=true&alt=json")
    assert plain == first and plain_tag == tag  # every GET carries the ETag

    answer: dict = {}

    def hang():
        answer["value"] = _get(where, WATCH + f"&last_etag={tag}&timeout_sec=30")
        answer["at"] = time.monotonic()

    thread = threading.Thread(target=hang)
    thread.start()
    time.sleep(0.3)
    assert "value" not in answer  # hanging
    op = _patch(client, node.name, {"podctl-boot": "1", "podctl-run": "gs://b/run.json"})
    assert not op.done()
    while not client.get_operation(request={"name": op.operation.name}).done:
        time.sleep(0.02)
    done_at = time.monotonic()
    # done, but not on the hosts yet (metadata_propagation: 1.5 s here)
    assert "podctl-run" not in _get(where, "instance/attributes/?recursive=true&alt=json")[0]
    assert "podctl-run" in dict(client.get_node(name=node.name).metadata)
    thread.join(timeout=30)
    value, new_tag = answer["value"]
    assert value["podctl-run"] == "gs://b/run.json" and new_tag != tag
    assert answer["at"] - done_at >= 1.5 - 0.3  # woke only after the propagation delay
    assert answer["at"] - done_at < 1.5 + 1.5  # and promptly after it
    # a timeout answers the value unchanged, with the same ETag
    started = time.monotonic()
    same, same_tag = _get(where, WATCH + f"&last_etag={new_tag}&timeout_sec=1")
    assert 0.9 <= time.monotonic() - started < 3 and same == value and same_tag == new_tag


def test_nodes_patch_refuses_as_google_does(cloud):
    cli, info, admin, client, make = cloud
    node = make("refuse", "v5p-8", {"a": "1"})
    for metadata in ({"bad key!": "x"}, {"k" * 128: "x"}, {"big": "x" * 262145},
                     {f"k{i}": "x" * 200000 for i in range(3)}):
        with pytest.raises(exceptions.BadRequest, match="[Mm]etadata") as bad:
            _patch(client, node.name, metadata)
        assert bad.value.response.json()["error"]["status"] == "INVALID_ARGUMENT"
    _patch(client, node.name, {"k" * 127: "x" * 262144}).result(timeout=30)  # at the limits: taken
    for paths in (("metadata.podctl-run",), ("runtime_version",)):
        with pytest.raises(exceptions.BadRequest):
            _patch(client, node.name, {"a": "2"}, paths)
    # a second patch while one runs: 409, as gcloud expects
    admin.set_timings(node_update=600.0)
    running = _patch(client, node.name, {"a": "2"})
    with pytest.raises(exceptions.Conflict) as conflict:
        _patch(client, node.name, {"a": "3"})
    assert conflict.value.response.json()["error"]["status"] == "ABORTED"
    admin.set_timings(node_update=2.0)
    admin.advance(600)
    assert dict(running.result(timeout=30).metadata) == {"a": "2"}
    _patch(client, node.name, {"a": "3"}).result(timeout=30)  # free again
    # not READY
    client.stop_node(request={"name": node.name}).result(timeout=30)
    with pytest.raises(exceptions.BadRequest, match="STOPPED, not READY") as refused:
        _patch(client, node.name, {"a": "4"})
    assert refused.value.response.json()["error"]["status"] == "FAILED_PRECONDITION"
