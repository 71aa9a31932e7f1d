"""A fake host is a fresh TPU VM: the system python3 with nothing third-party, its own
loopback address and hostname, and a metadata server that answers for it alone.

What runs on a host at first contact (the boot line and the agent's modules) must
run on the v5p images' Python 3.10 with the standard library only: checked
statically with vermin, and by running it under the machine's system interpreter.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import asyncssh
import pytest
from google.cloud import tpu_v2

from podctl.fake.vm import image_python
from podctl.jobs import launch
from tests.conftest import PARENT

# the agent's zip (host_config.py among it) and the watcher the startup script writes
HOST_FILES = [Path(launch.__file__).with_name(n) for n in (*launch.AGENT_MODULES, "host_watch.py", "host_pin.py")]
SYSTEM_PYTHON = "/usr/bin/python3"


def test_what_runs_on_a_host_needs_python_3_10_and_the_standard_library_only(tmp_path):
    boot = tmp_path / "boot.py"
    boot.write_text(launch.BOOT)
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent)) or "vermin"
    done = subprocess.run([vermin, "--target=3.10-", "--violations", "--no-tips", "-q",
                           str(boot), *map(str, HOST_FILES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip("no system interpreter at /usr/bin/python3")
    # The agent's zip imports under the bare system interpreter, user site off
    zip_path = tmp_path / "agent.zip"
    zip_path.write_bytes(launch.agent_source()[0])
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import agent, agent_gcs, agent_env; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('google', 'requests', 'jax', 'podctl')))")
    done = subprocess.run([SYSTEM_PYTHON, "-s", "-c", code, str(zip_path)], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    compiled = subprocess.run([SYSTEM_PYTHON, "-s", "-c", "import sys; compile(open(sys.argv[1]).read(), 'boot', 'exec')",
                               str(boot)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr


@pytest.fixture
def bare16(fake, api):
    key = asyncssh.generate_private_key("ssh-ed25519")
    pub = key.export_public_key().decode().strip()
    node = tpu_v2.Node(accelerator_type="v5p-16", runtime_version="v2-alpha-tpuv5",
                       metadata={"ssh-keys": f"podctl:{pub} podctl"})
    created = api.client.create_node(parent=PARENT, node_id="bare16", node=node).result(timeout=30)
    yield created, key, fake.hosts.ssh_port
    api.client.delete_node(name=created.name).result(timeout=30)


def on_hosts(node, key, port, command: str) -> list[asyncssh.SSHCompletedProcess]:
    async def go():
        out = []
        for ep in node.network_endpoints:
            async with asyncssh.connect(ep.ip_address, port, username="podctl", client_keys=[key],
                                        known_hosts=None, agent_path=None) as conn:
                out.append(await conn.run(command, check=False))
        return out
    return asyncio.run(go())


def test_a_fresh_host_has_the_image_python3_and_no_jax_at_its_own_address(bare16, fake):
    node, key, port = bare16
    addresses = [ep.ip_address for ep in node.network_endpoints]
    assert len(set(addresses)) == 2 and all(a.startswith("127.") for a in addresses)
    assert {ep.port for ep in node.network_endpoints} == {8470}  # the TPU runtime's, as on Google
    jax = on_hosts(node, key, port, "python3 -c 'import jax'")
    assert [r.exit_status for r in jax] == [1, 1] and all("No module named 'jax'" in r.stderr for r in jax)
    version = on_hosts(node, key, port, "command -v python3; python3 --version")
    # the image's python3: 3.10 as on v5p/v6e images where this machine has one (image_python.py)
    image = fake.hosts.image
    assert all(r.stdout.split() == [str(image.bin_dir / "python3"), "Python", image.version] for r in version)
    if image_python.find("3.10"):
        assert image.version.startswith("3.10.")
    names = on_hosts(node, key, port, "echo $HOSTNAME; echo ${TPU_WORKER_HOSTNAMES-unset}")
    hostnames = [r.stdout.split()[0] for r in names]
    assert hostnames[0].endswith("-w-0") and hostnames[1].endswith("-w-1") and hostnames[0].startswith("t1v-n-")
    assert names[0].stdout.split()[1] == "unset"  # as on a GCE TPU VM: the metadata server says (below)


def test_the_image_python_has_no_ensurepip_as_ubuntus_without_python3_10_venv(bare16, fake):
    """Ubuntu's python3 lacks ensurepip without python3.10-venv: `-m venv` fails with its
    message (`--without-pip` works); uv's managed Pythons have theirs."""
    node, key, port = bare16
    minor = ".".join(fake.hosts.image.version.split(".")[:2])
    done = on_hosts(node, key, port, "python3 -m ensurepip; echo rc=$?; python3 -m venv v; echo rc=$?; "
                    "python3 -m venv --without-pip w && w/bin/python -m ensurepip; echo rc=$?")[0]
    out = done.stdout + done.stderr
    assert "python3: No module named ensurepip" in out and out.count("rc=1") == 3, out
    assert ("The virtual environment was not created successfully because ensurepip is not\n"
            "available.  On Debian/Ubuntu systems, you need to install the python3-venv\n"
            f"package using the following command.\n\n    apt install python{minor}-venv\n") in done.stdout
    assert "w/bin/python: No module named ensurepip" in done.stderr  # the venv's is the image's
    others = on_hosts(node, key, port, 'for p in "$UV_PYTHON_INSTALL_DIR"/cpython-*/bin/python3; do '
                      '[ -x "$p" ] || continue; "$p" -c "import ensurepip" && echo has; done')[0]
    assert others.stdout.split() == ["has"] * len(list(fake.hosts.image.store.glob("cpython-*"))), others.stderr


def test_a_session_has_no_tpu_worker_variables_and_jax_finds_the_slice_from_the_metadata_server(bare16):
    """As on a GCE TPU VM (GKE's webhook sets TPU_WORKER_* in pods; a VM's SSH sessions
    have none), `jax.distributed.initialize()` outside podctl's agent learns the worker's
    number and the worker list from the metadata server (this machine's jax, run on the
    hosts: a fresh host has none)."""
    node, key, port = bare16
    probe = ("from jax._src import distributed; from jax._src.clusters import ClusterEnv; "
             "env = next(e for e in ClusterEnv._cluster_types if e.name == 'podctl-fake-tpu-vm'); "
             "print(env.is_env_present(), env.get_process_id(), env.get_process_count(), "
             "env.get_coordinator_address(None, None))")
    done = on_hosts(node, key, port, f"env | grep -c ^TPU_WORKER; {sys.executable} -c {shlex.quote(probe)}")
    first = node.network_endpoints[0].ip_address
    assert [r.stdout.split() for r in done] == [["0", "True", "0", "2", f"{first}:8482"],
                                                ["0", "True", "1", "2", f"{first}:8482"]], done[0].stderr


def test_the_metadata_server_answers_each_host_for_itself_and_a_preemption_sets_preempted(bare16, fake, api):
    node, key, port = bare16
    url = "http://$GCE_METADATA_HOST/computeMetadata/v1"
    get = f"python3 -c 'import sys,urllib.request as u; print(u.urlopen(u.Request(sys.argv[1], headers={{\"Metadata-Flavor\": \"Google\"}})).read().decode())'"
    workers = on_hosts(node, key, port, f'{get} "{url}/instance/attributes/agent-worker-number"')
    assert [r.stdout.strip() for r in workers] == ["0", "1"]
    refused = on_hosts(node, key, port, f"python3 -c 'import sys,urllib.request as u; u.urlopen(sys.argv[1])' \"{url}/project/project-id\"")
    assert all(r.exit_status != 0 and "403" in r.stderr for r in refused)  # no Metadata-Flavor header
    token = on_hosts(node, key, port, f'{get} "{url}/instance/service-accounts/default/token"')
    assert json.loads(token[0].stdout)["token_type"] == "Bearer"
    put = ("python3 -c 'import sys,urllib.request as u; u.urlopen(u.Request(sys.argv[1], data=b\"up\", "
           "method=\"PUT\", headers={\"Metadata-Flavor\": \"Google\"}))' "
           f'"{url}/instance/guest-attributes/podctl/state"')
    assert all(r.exit_status == 0 for r in on_hosts(node, key, port, put))
    got = api.client.get_guest_attributes(request={"name": node.name, "query_path": "podctl/"})
    assert [a.query_value.items[0].value for a in got.guest_attributes] == ["up", "up"]
    assert [r.stdout.strip() for r in on_hosts(node, key, port, f'{get} "{url}/instance/preempted"')] == ["FALSE"] * 2
    # During the preemption's notice the host's processes can still ask, and are told
    host = fake.hosts.nodes[node.name].hosts[0]
    meta = host.metadata_host
    fake.admin.preempt(node.name, grace=30)
    done = subprocess.run([sys.executable, "-c", (
        "import sys,urllib.request as u; print(u.urlopen(u.Request(sys.argv[1], headers={'Metadata-Flavor': 'Google'})).read().decode())"),
        f"http://{meta}/computeMetadata/v1/instance/preempted"], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "TRUE", done.stderr
