"""The fake cloud's hosts and GCS, through the clients podctl uses: asyncssh for
the hosts, google-cloud-storage for the emulator, google-cloud-tpu for the nodes.

What these pin down is what the job layer relies on: a READY node's endpoints
are SSH servers that take exactly the metadata keys, run commands with the
host's identity in the environment, and take every process with them when the
node goes (deleted, preempted), detached ones included.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import asyncssh
import pytest
from google.cloud import storage, tpu_v2
from google.protobuf import field_mask_pb2

from podctl.cloud.connect import api_for_endpoint
from podctl.fake.storage.gcs import DEFAULT_BUCKET
from podctl.fake.world import World
from podctl.base.settings import FAKE_BUCKET
from tests.conftest import PARENT, isolated_environ, user_credentials

RUNTIME = "v2-alpha-tpuv5"
DETACH = "setsid nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $!"


def new_key() -> tuple[asyncssh.SSHKey, str]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return key, key.export_public_key().decode().strip()


def make_node(client, node_id: str, slice_type: str, pub: str | None = None, user: str = "podctl"):
    metadata = {"ssh-keys": f"{user}:{pub} {user}"} if pub else {}
    node = tpu_v2.Node(accelerator_type=slice_type, runtime_version=RUNTIME, metadata=metadata)
    return client.create_node(parent=PARENT, node_id=node_id, node=node).result(timeout=30)


def delete(client, name: str) -> None:
    try:
        client.delete_node(name=name).result(timeout=30)
    except Exception:  # noqa: BLE001 - the test deleted it already
        pass


@pytest.fixture
def node16(client):
    """A READY v5p-16 (2 hosts) whose ssh-keys hold one fresh key; deleted at the end."""
    key, pub = new_key()
    node = make_node(client, "hosts16", "v5p-16", pub)
    yield node, key
    delete(client, node.name)


SSH = {"port": 22}  # the fake's one SSH port (22 where it can bind it), set per test below


@pytest.fixture(autouse=True)
def _ssh_port(_session_cloud):
    SSH["port"] = _session_cloud.hosts.ssh_port


def ports(node) -> list[tuple[str, int]]:
    """Where to SSH to each host: its endpoint's own address, the fake's SSH port."""
    return [(ep.ip_address, SSH["port"]) for ep in node.network_endpoints]


def connect(where: tuple[str, int], key: asyncssh.SSHKey | None, user: str = "podctl", **kw):
    return asyncssh.connect(where[0], where[1], username=user, client_keys=[key] if key else None,
                            known_hosts=None, agent_path=None, **kw)


# This host's worker number, as a TPU VM has it: from its metadata server
WORKER = ("python3 -c 'import os, urllib.request as u; print(u.urlopen(u.Request(\"http://%s/computeMetadata/v1/"
          "instance/attributes/agent-worker-number\" % os.environ[\"GCE_METADATA_HOST\"], "
          "headers={\"Metadata-Flavor\": \"Google\"})).read().decode())'")


def run(port: tuple[str, int], key: asyncssh.SSHKey, command: str, **kw) -> asyncssh.SSHCompletedProcess:
    async def go():
        async with connect(port, key) as conn:
            return await conn.run(command, **kw)
    return asyncio.run(go())


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def eventually(check, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_hosts_take_exactly_the_metadata_keys(client, node16):
    node, key = node16
    other, other_pub = new_key()
    addresses = [ep.ip_address for ep in node.network_endpoints]
    assert len(set(addresses)) == 2 and all(a.startswith("127.") and a != "127.0.0.1" for a in addresses)
    assert [ep.port for ep in node.network_endpoints] == [8470, 8470]  # the TPU runtime's, as on Google

    async def logins():
        for port in ports(node):
            async with connect(port, key) as conn:
                assert (await conn.run("echo $USER")).stdout == "podctl\n"
            for bad_key, user in ((other, "podctl"), (key, "root")):
                with pytest.raises(asyncssh.PermissionDenied):
                    await connect(port, bad_key, user)
            with pytest.raises(asyncssh.PermissionDenied):
                await connect(port, None, password="podctl")
        return {(await asyncssh.get_server_host_key(*p)).public_data for p in ports(node)}
    host_keys = asyncio.run(logins())
    assert len(host_keys) == 1  # one host key per node

    # A metadata update reaches the hosts a moment after its operation is done (as gcloud
    # retries SSH for): then only alice's key works.
    client.update_node(node=tpu_v2.Node(name=node.name, metadata={"ssh-keys": f"alice:{other_pub} alice"}),
                       update_mask=field_mask_pb2.FieldMask(paths=["metadata"])).result(timeout=10)

    async def as_alice():
        for _ in range(100):
            try:
                async with connect(ports(node)[1], other, "alice") as conn:
                    return (await conn.run(f"echo $USER $({WORKER})")).stdout
            except asyncssh.PermissionDenied:
                await asyncio.sleep(0.05)  # not propagated yet
        raise AssertionError("alice's key never reached the host")
    assert asyncio.run(as_alice()) == "alice 1\n"
    with pytest.raises(asyncssh.PermissionDenied):
        run(ports(node)[0], key, "true")

    # A re-created node is a new machine: new host key.
    delete(client, node.name)
    again = make_node(client, "hosts16", "v5p-16")
    new_key_blob = asyncio.run(asyncssh.get_server_host_key(*ports(again)[0])).public_data
    assert new_key_blob not in host_keys


def test_exec_streams_exit_codes_and_the_host_environment(fake, node16):
    node, key = node16
    for worker, port in enumerate(ports(node)):
        done = run(port, key, "echo out; echo err >&2; cat; exit 7", input="in\n")
        assert (done.stdout, done.stderr, done.exit_status) == ("out\nin\n", "err\n", 7)
        env = dict(line.split("=", 1) for line in run(port, key, "env").stdout.splitlines() if "=" in line)
        # a GCE TPU VM's sessions carry no TPU_WORKER_* (GKE's webhook sets them in pods):
        # the worker's number is the metadata server's (podctl's agent gives its runs both)
        assert not {"TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "TPU_ACCELERATOR_TYPE"} & set(env)
        assert run(port, key, WORKER).stdout == f"{worker}\n"
        assert env["HOSTNAME"].startswith("t1v-n-") and env["HOSTNAME"].endswith(f"-w-{worker}")
        assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0"
        assert env["JAX_PLATFORMS"] == "cpu" and env["PODCTL_FAKE_HOST"] == "1"
        # nothing of this machine's own environment: CI's PYTHONDONTWRITEBYTECODE would make
        # every host's Python compile jax again at each import (fake/README.md)
        assert "PYTHONDONTWRITEBYTECODE" not in env and "PYTHONPATH" in env
        assert env["STORAGE_EMULATOR_HOST"] == env["TENSORSTORE_GCS_HTTP_URL"] == fake.gcs_url
        assert os.path.dirname(sys.executable) not in env["PATH"].split(":")  # a bare image
        assert env["USER"] == "podctl" and env["PWD"] == env["HOME"]
        assert env["HOME"].endswith(f"/test-project/us-central1-a/hosts16/host-{worker:04d}/home/podctl")
        assert not [k for k in env if k.startswith(("PODCTL_STATE", "PODCTL_CONFIG", "GOOGLE_", "CLOUDSDK_"))]
    assert run(ports(node)[0], key, "kill -TERM $$").exit_signal[0] == "TERM"
    jax = run(ports(node)[1], key, "python3 -c 'import jax; print(jax.device_count())'")
    assert jax.exit_status == 1 and "No module named 'jax'" in jax.stderr  # until podctl installs it
    assert run(ports(node)[1], key, "hostname").stdout.strip() == env["HOSTNAME"]


def test_a_closed_channel_or_a_signal_ends_the_command(node16):
    node, key = node16

    async def go():
        async with connect(ports(node)[0], key) as conn:
            pgids = []
            for end in ("signal", "close"):
                process = await conn.create_process("echo $$; exec sleep 300")
                pgid = int(await process.stdout.readline())
                pgids.append(pgid)
                assert alive(pgid)
                if end == "signal":
                    process.send_signal("INT")
                    assert (await process.wait(timeout=5)).exit_signal[0] == "INT"
                else:
                    process.close()
            return pgids
    pgids = asyncio.run(go())
    assert eventually(lambda: not any(alive(p) for p in pgids))


@pytest.mark.parametrize("how", ["delete", "preempt"])
def test_everything_a_host_started_dies_with_the_node(client, fake, node16, how):
    node, key = node16
    detached = [int(run(port, key, DETACH).stdout) for port in ports(node)]

    async def go():
        conn = await connect(ports(node)[0], key)
        busy = await conn.create_process("echo $$; exec sleep 300")
        pids = [*detached, int(await busy.stdout.readline())]
        assert all(alive(pid) for pid in pids)
        if how == "delete":
            await asyncio.to_thread(lambda: client.delete_node(name=node.name).result(timeout=30))
        else:
            await asyncio.to_thread(fake.admin.preempt, "hosts16")
        await asyncio.wait_for(conn.wait_closed(), 5)  # the connection is cut
        assert busy.exit_status is None  # no exit status: the host went away
        for port in ports(node):  # and nobody answers there any more
            with pytest.raises(OSError):
                await connect(port, key)
        return pids
    pids = asyncio.run(go())
    assert eventually(lambda: not any(alive(pid) for pid in pids))
    assert fake.admin.hosts()["nodes"] == {}


def test_a_v5p_4096_brings_up_512_ssh_servers(client, fake):
    started = time.monotonic()
    node = make_node(client, "big", "v5p-4096")
    try:
        assert len(set(ports(node))) == 512

        async def banners():
            async def banner(port):
                reader, writer = await asyncio.open_connection(*port)
                line = await asyncio.wait_for(reader.readline(), 10)
                writer.close()
                return line
            return await asyncio.gather(*(banner(p) for p in ports(node)))
        assert all(line.startswith(b"SSH-2.0-") for line in asyncio.run(banners()))
        assert fake.admin.hosts()["nodes"][node.name]["alive"] == 512
    finally:
        delete(client, node.name)
    assert time.monotonic() - started < 20


def test_drop_host_and_host_latency(fake, node16):
    node, key = node16
    fake.admin.host_latency(0.3)
    started = time.monotonic()
    assert run(ports(node)[0], key, "true").exit_status == 0
    assert time.monotonic() - started >= 0.3
    fake.admin.host_latency(0)
    pid = int(run(ports(node)[1], key, DETACH).stdout)
    fake.admin.drop_host("hosts16", 1)
    assert eventually(lambda: not alive(pid))
    with pytest.raises((OSError, asyncssh.Error)):  # refused, or cut during the handshake
        run(ports(node)[1], key, "true")
    assert run(ports(node)[0], key, "echo up").stdout == "up\n"  # the other host lives on


def test_gcs_emulator_through_google_cloud_storage(fake, node16, monkeypatch):
    assert fake.describe()["gcs"] == fake.gcs_url and fake.describe()["bucket"] == FAKE_BUCKET
    assert DEFAULT_BUCKET == FAKE_BUCKET
    by_option = storage.Client(project="p", credentials=user_credentials(),
                               client_options={"api_endpoint": fake.gcs_url})
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake.gcs_url)
    by_env = storage.Client(project="p", credentials=user_credentials())  # else anonymous: 401
    for label, gcs in (("opt", by_option), ("env", by_env)):
        bucket = gcs.bucket(FAKE_BUCKET)
        assert not bucket.blob(f"{label}/a/x").exists()
        bucket.blob(f"{label}/a/x").upload_from_string(b"hello")
        bucket.blob(f"{label}/b").upload_from_string(b"other")
        assert bucket.blob(f"{label}/a/x").exists()
        assert bucket.blob(f"{label}/a/x").download_as_bytes() == b"hello"
        assert [b.name for b in gcs.list_blobs(FAKE_BUCKET, prefix=f"{label}/a/")] == [f"{label}/a/x"]
    # A host reaches the same GCS with nothing but its environment and its metadata
    # server's token, as a TPU VM does (podctl's agent's own standard-library client).
    node, key = node16
    agent_gcs = Path(__file__).parents[2] / "podctl" / "host" / "agent_gcs.py"
    code = (f"import sys; sys.path.insert(0, '{agent_gcs.parent}'); import agent_gcs; b = agent_gcs.Bucket('podctl-fake'); "
            "print(b.download('opt/a/x').decode()); b.upload('from-host', b'hi')")
    done = run(ports(node)[0], key, f'python3 -c "{code}"')
    assert done.stdout == "hello\n", done.stderr
    assert by_option.bucket(FAKE_BUCKET).blob("from-host").download_as_bytes() == b"hi"
    fake.admin.reset()  # forgets the objects too
    assert not by_option.bucket(FAKE_BUCKET).blob("opt/a/x").exists()
    assert by_option.bucket(FAKE_BUCKET).exists()


def test_an_older_world_file_still_loads():
    data = World().to_dict()
    data["next_ip"] = 7
    assert World.from_dict(data).nodes == {}


def test_a_daemon_restart_keeps_hosts_keys_homes_and_objects(tmp_path):
    env = isolated_environ(tmp_path)

    def podctl(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "podctl", *args], env=env, check=True,
                              capture_output=True, text=True, timeout=60).stdout

    info = json.loads(podctl("fake", "start", "--json"))
    try:
        assert info["gcs"].startswith("http://127.0.0.1:") and info["bucket"] == FAKE_BUCKET
        client = api_for_endpoint(info["tpu_api"]).client
        parent = f"projects/{info['project']}/locations/{info['zone']}"
        key, pub = new_key()
        node = client.create_node(parent=parent, node_id="keep", node=tpu_v2.Node(
            accelerator_type="v5p-16", runtime_version=RUNTIME,
            metadata={"ssh-keys": f"podctl:{pub} podctl"})).result(timeout=30)
        SSH["port"] = info["ssh_port"]
        before = ports(node)
        gcs = storage.Client(project="p", credentials=user_credentials(),
                             client_options={"api_endpoint": info["gcs"]})
        gcs.bucket(FAKE_BUCKET).blob("kept").upload_from_string(b"yes")
        host_key = asyncio.run(asyncssh.get_server_host_key(*before[1])).public_data
        pid = int(run(before[1], key, "echo mine > kept.txt; " + DETACH).stdout)

        podctl("fake", "stop")
        assert eventually(lambda: not alive(pid))  # the daemon's hosts die with it
        info = json.loads(podctl("fake", "start", "--json"))
        node = api_for_endpoint(info["tpu_api"]).client.get_node(name=node.name)
        assert node.state == tpu_v2.Node.State.READY and len(ports(node)) == 2
        assert asyncio.run(asyncssh.get_server_host_key(*ports(node)[1])).public_data == host_key
        assert run(ports(node)[1], key, f"cat kept.txt; {WORKER}").stdout == "mine\n1\n"
        gcs = storage.Client(project="p", credentials=user_credentials(),
                             client_options={"api_endpoint": info["gcs"]})
        assert gcs.bucket(FAKE_BUCKET).blob("kept").download_as_bytes() == b"yes"
        api_for_endpoint(info["tpu_api"]).client.delete_node(name=node.name).result(timeout=30)
    finally:
        podctl("fake", "stop")


def test_a_stopped_node_has_no_hosts_and_a_started_one_has_them_back(client):
    key, pub = new_key()
    node = make_node(client, "one", "v5p-8", pub)
    try:
        host_key = asyncio.run(asyncssh.get_server_host_key(*ports(node)[0])).public_data
        pid = int(run(ports(node)[0], key, "echo kept > f; " + DETACH).stdout)
        client.stop_node(request={"name": node.name}).result(timeout=10)
        assert eventually(lambda: not alive(pid))
        with pytest.raises(OSError):
            run(ports(node)[0], key, "true")
        node = client.start_node(request={"name": node.name}).result(timeout=10)
        assert node.network_endpoints[0].ip_address.startswith("127.")  # the answer has its address
        assert asyncio.run(asyncssh.get_server_host_key(*ports(node)[0])).public_data == host_key
        assert run(ports(node)[0], key, "cat f").stdout == "kept\n"  # the boot disk survives a stop
    finally:
        delete(client, node.name)


def test_queued_resource_nodes_get_hosts_until_the_resource_goes(client, fake):
    key, pub = new_key()
    spec = tpu_v2.QueuedResource.Tpu.NodeSpec(
        parent=PARENT, multislice_params=tpu_v2.QueuedResource.Tpu.NodeSpec.MultisliceParams(
            node_count=2, node_id_prefix="ms"),
        node=tpu_v2.Node(accelerator_type="v5p-16", runtime_version=RUNTIME,
                         metadata={"ssh-keys": f"podctl:{pub} podctl"}))
    qr = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]))
    client.create_queued_resource(parent=PARENT, queued_resource_id="qr", queued_resource=qr).result(timeout=10)
    name = f"{PARENT}/queuedResources/qr"
    active = tpu_v2.QueuedResourceState.State.ACTIVE
    assert eventually(lambda: client.get_queued_resource(name=name).state.state == active, 10)
    nodes = [client.get_node(name=f"{PARENT}/nodes/ms-{i}") for i in range(2)]
    assert [run(ports(n)[1], key, WORKER).stdout for n in nodes] == ["1\n", "1\n"]
    client.delete_queued_resource(request={"name": name, "force": True})
    assert fake.admin.hosts()["nodes"] == {}  # gone as the deletion starts
    assert eventually(lambda: fake.admin.is_empty(), 10)


def test_a_new_host_manager_kills_what_a_crashed_one_left_running(tmp_path):
    from podctl.fake.vm.hosts import TOKEN_VAR, HostManager

    manager = HostManager(tmp_path / "hosts")
    stray = subprocess.Popen(["sleep", "300"], env={TOKEN_VAR: f"{manager.prefix}.left"},
                             start_new_session=True)
    stranger = subprocess.Popen(["sleep", "300"], env={TOKEN_VAR: "someone-else.x"})
    try:
        # Popen returns after the fork, maybe before the exec: until then the child's
        # /proc environ is the test's own, without the token
        for child, token in ((stray, f"{manager.prefix}.left"), (stranger, "someone-else.x")):
            assert eventually(lambda: f"{TOKEN_VAR}={token}".encode() in Path(
                f"/proc/{child.pid}/environ").read_bytes().split(b"\0"), 10)
        assert HostManager(tmp_path / "hosts").adopt() == 1
        assert stray.wait(timeout=5) == -9 and stranger.poll() is None
    finally:
        for process in (stray, stranger):
            process.kill()
            process.wait()
