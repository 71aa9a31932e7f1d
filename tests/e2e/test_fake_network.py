"""A fake node's addresses and the default VPC's firewall, as a TPU VM meets them.

With external IPs, each host has an internal `ipAddress` and a different
`accessConfig.externalIp`; SSH answers at both, and nothing else at the external one:
a host's script reaching a peer's external address on any other port fails as a
dropped SYN does (it hangs until its timeout), while the internal address answers (podctl/fake/README.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json

import pytest
from google.cloud import tpu_v2

from tests.conftest import PARENT
from tests.e2e.test_fake_hosts import SSH, WORKER, connect, delete, new_key

RUNTIME = "v2-alpha-tpuv5"

# Host 0 listens on its internal address; host 1 dials it there and at its external one.
LISTEN = """
import os, socket, sys
s = socket.socket()
s.bind((sys.argv[1], 8476)); s.listen(); s.settimeout(60)
print("listening", flush=True)
conn, _ = s.accept(); conn.sendall(b"hello"); conn.close()
"""
DIAL = """
import errno, json, socket, sys
out = {}
for name, host in (("internal", sys.argv[1]), ("external", sys.argv[2])):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, 8476)); out[name] = s.recv(5).decode()
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e))
    s.close()
try:
    socket.socket().bind((sys.argv[2], 0)); out["bind_external"] = "bound"
except OSError as e:
    out["bind_external"] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(out), flush=True)
"""


@pytest.fixture
def external16(api):
    """A READY v5p-16 with external IPs and one fresh key; deleted at the end."""
    key, pub = new_key()
    node = tpu_v2.Node(accelerator_type="v5p-16", runtime_version=RUNTIME,
                       metadata={"ssh-keys": f"podctl:{pub} podctl"},
                       network_config=tpu_v2.NetworkConfig(enable_external_ips=True))
    made = api.client.create_node(parent=PARENT, node_id="net16", node=node).result(timeout=30)
    yield made, key
    delete(api.client, made.name)


def test_each_host_has_an_internal_and_a_different_external_address_and_ssh_answers_at_both(external16):
    node, key = external16
    internal = [ep.ip_address for ep in node.network_endpoints]
    external = [ep.access_config.external_ip for ep in node.network_endpoints]
    assert all(ipaddress.ip_address(a).is_loopback for a in internal + external)
    assert len(set(internal + external)) == 4  # every address its own

    async def hostname(address: str) -> str:
        async with connect((address, SSH["port"]), key) as conn:
            return (await conn.run(WORKER, check=True)).stdout.strip()

    for worker, (inside, outside) in enumerate(zip(internal, external)):
        assert asyncio.run(hostname(inside)) == asyncio.run(hostname(outside)) == str(worker)


def test_a_peer_reaches_a_hosts_service_at_its_internal_address_only(external16):
    node, key = external16
    (in0, in1), (ex0, _) = ([ep.ip_address for ep in node.network_endpoints],
                            [ep.access_config.external_ip for ep in node.network_endpoints])

    async def go() -> dict:
        async with connect((in0, SSH["port"]), key) as host0, connect((in1, SSH["port"]), key) as host1:
            listener = await host0.create_process(f"python3 -c '{LISTEN}' {in0}")
            assert (await listener.stdout.readline()).strip() == "listening"
            dialled = await host1.run(f"python3 -c '{DIAL}' {in0} {ex0}", check=True)
            await listener.wait(timeout=30)
            return json.loads(dialled.stdout)

    # a dropped SYN: the connect hangs until the socket's own timeout (3 s), then "timed out"
    assert asyncio.run(go()) == {"internal": "hello", "external": "timed out",
                                 "bind_external": "EADDRNOTAVAIL"}


def test_without_external_ips_a_node_has_internal_addresses_only(api):
    node = tpu_v2.Node(accelerator_type="v5p-8", runtime_version=RUNTIME)
    made = api.client.create_node(parent=PARENT, node_id="inside8", node=node).result(timeout=30)
    try:
        assert made.network_endpoints[0].ip_address
        assert not made.network_endpoints[0].access_config.external_ip
    finally:
        delete(api.client, made.name)
