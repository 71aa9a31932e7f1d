"""The fake as a company's network (podctl/fake/api/vpc.py, tpu_vm/sitecustomize.py; the
client's checks in podctl/cloud/firewall.py): hosts without external IPs have no route
out and reach GCS only through Private Google Access; a custom network admits only the
rules a user adds, between the hosts too; `up` and `run` say a missing rule in one line
with the command that adds it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podctl.fake.admin.admin_client import FakeAdmin, FakeCompute
from tests.cli_in_process import podctl_here
from tests.conftest import Podctl, _share_env_signing_key, assert_one_line_error, stop_fake_and_check

SCRIPTS = Path(__file__).parents[1] / "scripts"
JAX_REQS = Path(__file__).parents[2] / "examples" / "jax_hello" / "requirements.txt"
TEMPLATE = Path(__file__).parents[2] / "templates" / "train_pjit.py"
TINY = ["--layers", "2", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "64",
        "--seq-len", "32", "--batch", "8", "--lr", "1e-2"]

# One connect from a host, as a script makes it: what it gave, after how long.
DIAL = ("import errno, json, socket, sys, time; s = socket.socket(); s.settimeout(2); t = time.time()\n"
        "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); r = 'connected'\n"
        "except OSError as e:\n    r = errno.errorcode.get(e.errno or 0, str(e))\n"
        "print(json.dumps([r, round(time.time() - t, 1)]))")


@pytest.fixture(scope="module")
def _daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One fake daemon for the cases below (a daemon started, checked and stopped per case
    costs three `podctl` processes and its own start); each deletes its slices."""
    tmp = tmp_path_factory.mktemp("company")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    podctl = Podctl(tmp)
    podctl.env["PODCTL_BACKEND"] = "fake"
    try:
        podctl.admin_url = json.loads(podctl("fake", "start", "--json").stdout)["admin"]  # type: ignore[attr-defined]
        yield podctl
    finally:
        stop_fake_and_check(podctl)


@pytest.fixture
def cli(_daemon: Podctl) -> Iterator[Podctl]:
    assert FakeAdmin(status(_daemon)["admin"]).is_empty()  # the last case deleted what it made
    yield _daemon
    # the default subnet as the fake starts it, Private Google Access off, for the next case
    fake = status(_daemon)
    FakeCompute(fake["tpu_api"]).set_private_google_access(fake["project"], fake["zone"].rsplit("-", 1)[0],
                                                           "default", False)


def dial(cli: Podctl, name: str, host: int, address: str, port: int) -> list:
    """DIAL from NAME's HOST: `podctl exec` through its own command in this process
    (tests/cli_in_process.py; the same SSH to the host, without the second of CPU a
    `podctl` process spends importing); `exec ... env` below stays a `podctl` process."""
    proc = podctl_here(cli.tmp, "exec", name, "--hosts", str(host), "--", "python3", "-c", DIAL, address,
                       str(port), env=cli.env, check=True)
    return json.loads(proc.stdout.split("] ", 1)[1])


def status(cli: Podctl) -> dict:
    """What `podctl fake status --json` says: the daemon's own answer (admin status), read
    in this process once the CLI has said where its admin is (one `podctl` per daemon)."""
    if not hasattr(cli, "admin_url"):
        cli.admin_url = json.loads(cli("fake", "status", "--json").stdout)["admin"]  # type: ignore[attr-defined]
    return FakeAdmin(cli.admin_url).status()  # type: ignore[attr-defined]


def test_internal_ips_need_private_google_access_and_have_no_route_out(cli):
    # the default subnet has no Private Google Access until it is turned on: said before
    # anything is made, in one line with the command that turns it on
    fake = status(cli)
    region = fake["zone"].rsplit("-", 1)[0]
    refused = cli("up", "--slice", "v5p-8", "--name", "inside", "--internal-ips", check=False)
    assert_one_line_error(refused, 2, f"subnetwork 'default' ({region}) has no Private Google Access",
                          f"gcloud compute networks subnets update default --project {fake['project']} "
                          f"--region {region} --enable-private-ip-google-access")
    assert FakeAdmin(status(cli)["admin"]).is_empty()
    said = cli("fake", "subnets", "update", "default", "--enable-private-ip-google-access")
    assert "Private Google Access on" in said.stdout
    cli("up", "--slice", "v5p-8", "--name", "inside", "--internal-ips")
    try:
        gcs = status(cli)["gcs"].split("://", 1)[1]
        # a package index, GitHub, any address out there: the SYN is dropped, the connect
        # hangs until the socket's timeout (2 s), and the fake counts it
        assert dial(cli, "inside", 0, "203.0.113.7", 443)[0] == "timed out"
        assert dial(cli, "inside", 0, gcs.rsplit(":", 1)[0], int(gcs.rsplit(":", 1)[1]))[0] == "connected"
        node = f"projects/{status(cli)['project']}/locations/{status(cli)['zone']}/nodes/inside"
        assert status(cli)["outside_requests"][node] == [1]
        # subprocesses find no proxy to reach the index through either
        env = cli("exec", "inside", "--", "env").stdout
        assert "HTTPS_PROXY=" not in env.upper().replace("[HOST 0000] ", "")
        # without Private Google Access, GCS is out of reach too (not counted: a Google API)
        cli("fake", "subnets", "update", "default", "--no-enable-private-ip-google-access")
        assert dial(cli, "inside", 0, gcs.rsplit(":", 1)[0], int(gcs.rsplit(":", 1)[1]))[0] == "timed out"
        assert status(cli)["outside_requests"][node] == [1]
    finally:
        cli("down", "inside", "--yes", check=False)


@pytest.mark.host_env
def test_a_custom_network_admits_between_hosts_only_what_a_rule_adds(cli):
    cli("fake", "networks", "create", "lab")
    cli("fake", "firewall-rules", "create", "lab-ssh", "--network", "lab", "--allow", "tcp:22")
    up = cli("up", "--slice", "v5p-16", "--name", "lab16", "--network", "lab")
    assert "admits no TCP between the slice's hosts on 8476" in up.stdout + up.stderr
    try:
        host0 = json.loads(cli("status", "lab16", "--json").stdout)["nodes"][0]["hosts"][0]["ip"]
        # host 1 to host 0's coordinator port: dropped by the VPC's firewall
        assert dial(cli, "lab16", 1, host0, 8476) == ["timed out", 2.0]
        began = time.monotonic()
        refused = cli("run", "lab16", "--hosts", "all", "--requirements", str(JAX_REQS),
                      str(SCRIPTS / "jax_auto_init.py"), check=False)
        assert time.monotonic() - began < 60
        assert_one_line_error(refused, 2, "network 'lab' admits no TCP between the slice's hosts on 8476",
                              "gcloud compute firewall-rules create lab-allow-tpu-internal --project "
                              "fake-project --network lab --direction INGRESS --allow tcp:8476 "
                              "--source-ranges 10.0.0.0/20")
        cli("fake", "firewall-rules", "create", "lab-allow-tpu-internal", "--network", "lab",
            "--direction", "INGRESS", "--allow", "tcp:8476", "--source-ranges", "10.0.0.0/20")
        assert dial(cli, "lab16", 1, host0, 8476)[0] == "ECONNREFUSED"  # admitted: nothing listens yet
        ran = cli("run", "lab16", "--hosts", "all", "--requirements", str(JAX_REQS),
                  str(SCRIPTS / "jax_auto_init.py"), timeout=900)
        assert "[host 0001] process 1 of 2, 8 devices" in ran.stdout.splitlines()
    finally:
        cli("down", "lab16", "--yes", check=False)


@pytest.mark.host_env
def test_the_template_trains_and_resumes_on_internal_ips_with_no_request_outside(cli):
    cli("fake", "subnets", "update", "default", "--enable-private-ip-google-access")
    cli("up", "--slice", "v5p-16", "--name", "priv16", "--internal-ips")
    try:
        first = cli("run", "priv16", str(TEMPLATE), *TINY, "--steps", "6", "--checkpoint-every", "3",
                    timeout=1500)
        run_id = next(line.split()[2] for line in first.stderr.splitlines() if line.startswith("podctl: run "))
        second = cli("run", "priv16", "--resume", run_id, str(TEMPLATE), *TINY, "--steps", "8",
                     "--checkpoint-every", "3", timeout=900)
        assert '"start_step": 6' in second.stdout
        node = f"projects/{status(cli)['project']}/locations/{status(cli)['zone']}/nodes/priv16"
        assert status(cli)["outside_requests"][node] == [0, 0]
    finally:
        cli("down", "priv16", "--yes", check=False)


COORDINATED = """
import sys, jax
jax.distributed.initialize(coordinator_address=sys.argv[2] + ":8476", num_processes=2,
                           process_id=int(sys.argv[1]), initialization_timeout=3)
print("joined", jax.process_index(), flush=True)
jax.distributed.shutdown()
"""


def test_jaxs_coordinator_is_out_of_a_blocked_peers_reach(tmp_path: Path):
    """JAX's coordinator client is C++ (gRPC), unseen by the hosts' socket hook: where the
    rules do not admit its port between the hosts, a peer's connection is dropped (JAX
    ends it DEADLINE_EXCEEDED after its timeout, as jax-ml/jax issue 35905 reports), and
    process 0 alone still reaches its own service. Two local processes as two fake hosts."""
    import os
    import subprocess
    import sys

    addresses = ["127.61.0.1", "127.61.0.2"]
    network = tmp_path / "network.json"

    def both(ports: list[list[int]]) -> list[subprocess.CompletedProcess]:
        network.write_text(json.dumps({"external": False, "google_apis": True, "google": [],
                                       "outside_log": str(tmp_path / "outside-{address}.log"),
                                       "peers": [{"addresses": addresses, "tcp": ports}]}))
        procs = [subprocess.Popen(
            [sys.executable, "-c", COORDINATED, str(i), addresses[0]], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PODCTL_FAKE_HOST": "1", "PODCTL_FAKE_ADDRESS": addresses[i],
                 "PODCTL_FAKE_NETWORK": str(network), "JAX_PLATFORMS": "cpu",
                 # as podctl's agent gives a run (a fake host's own session has none)
                 "TPU_WORKER_ID": str(i), "TPU_WORKER_HOSTNAMES": ",".join(addresses),
                 "PYTHONPATH": str(Path(__file__).parents[2] / "podctl" / "fake" / "vm" / "tpu_vm")})
            for i in (0, 1)]
        # each ends within JAX's 3 s once imported; read while they run (a full pipe stops a
        # process). Process 0 once waited out the kernel's SYN retries (~130 s) where a peer's
        # connect beat the fake's hole to its one slot (sitecustomize.py: no longer waited for)
        outs = [p.communicate(timeout=120) for p in procs]
        return [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(procs, outs)]

    blocked = both([[22, 22]])
    assert "joined" not in blocked[1].stdout and "DEADLINE_EXCEEDED" in blocked[1].stderr
    admitted = both([[22, 22], [8476, 8476]])
    assert [p.stdout.split() for p in admitted] == [["joined", "0"], ["joined", "1"]], admitted[1].stderr
