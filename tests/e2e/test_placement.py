"""`up` with what real v5p capacity needs: a reservation, a network and subnetwork, a
service account with scopes, network tags, internal IPs only. Sent by the real client
to the fake, which checks their shapes as Cloud TPU's v2 API does."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.error
import urllib.request

import pytest

from podctl.cloud import placement
from podctl.cloud.placement import Placement
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.cloud.wait import wait_deleted
from podctl.base.errors import InvalidValueError
from tests.conftest import FAST, PARENT, PROJECT, ZONE, assert_one_line_error

KEY = "podctl:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests podctl"
WHERE = Placement(network="my-vpc", subnetwork=f"projects/{PROJECT}/regions/us-central1/subnetworks/tpu",
                  service_account="trainer@test-project.iam.gserviceaccount.com",
                  scopes=("cloud-platform",), tags=("tpu-ssh", "train"), internal_ips=True)


def _request(name: str, where: Placement, **spec) -> UpRequest:
    built = SliceSpec.build("v5p-8", **spec)
    checked = where.checked(project=PROJECT, zone=ZONE, queued=built.queued, spot=built.tier == "spot")
    return UpRequest(parent=PARENT, name=name, spec=built, ssh_keys=KEY, owner="tester",
                     policy=FAST, placement=checked)


def test_a_node_is_made_in_the_network_with_the_account_tags_and_no_external_ips(api, fake):
    async def go() -> Placement:
        info = (await up(api, _request("placed", WHERE))).info
        node = await api.get_node(f"{PARENT}/nodes/placed")
        assert info.ready and all(h.external_ip is None for h in info.hosts)  # internal addresses
        got = await placement.read(api, PARENT, info)
        await api.delete_node(f"{PARENT}/nodes/placed")
        await wait_deleted(api, PARENT, "placed", policy=FAST)
        assert list(node.tags) == ["tpu-ssh", "train"]
        return got

    got = asyncio.run(go())
    # read back as Google answers it: the network as a full resource path (recorded)
    assert got == dataclasses.replace(WHERE.checked(project=PROJECT, zone=ZONE, queued=False, spot=False),
                                      network=f"projects/{PROJECT}/global/networks/my-vpc")
    assert got.scopes == ("https://www.googleapis.com/auth/cloud-platform",)


def test_a_queued_resource_names_its_reservation(api, fake):
    async def go() -> str:
        await up(api, _request("resv", Placement(reservation="v5p-pool"), queued=True))
        qr = await api.get_queued_resource(f"{PARENT}/queuedResources/resv")
        await api.delete_queued_resource(f"{PARENT}/queuedResources/resv", force=True)
        await wait_deleted(api, PARENT, "resv", policy=FAST)
        return qr.reservation_name

    assert asyncio.run(go()) == f"projects/{PROJECT}/locations/{ZONE}/reservations/v5p-pool"


def test_a_reserved_node_asks_for_any_matching_reservation(api, fake):
    async def go() -> bool:
        await up(api, _request("anyres", Placement(reserved=True)))
        node = await api.get_node(f"{PARENT}/nodes/anyres")
        await api.delete_node(f"{PARENT}/nodes/anyres")
        await wait_deleted(api, PARENT, "anyres", policy=FAST)
        return node.scheduling_config.reserved

    assert asyncio.run(go()) is True


def _post(fake, path: str, body: dict) -> urllib.error.HTTPError:
    req = urllib.request.Request(f"{fake.tpu_api_url}/v2/{PARENT}/{path}", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    return e.value


@pytest.mark.parametrize("field, value", [
    ("tags", ["Not_A_Tag"]),
    ("networkConfig", {"network": "x", "enableExternalIps": "yes"}),
    ("networkConfig", {"subnetwork": f"projects/{PROJECT}/regions/europe-west4/subnetworks/s"}),
    ("networkConfig", {"nat": True}),
    ("serviceAccount", {"email": "not-an-email", "scope": []}),
    ("serviceAccount", {"email": "a@b.com", "scope": ["cloud-platform"]}),
    ("schedulingConfig", {"reserved": "true"}),
])
def test_the_fake_refuses_a_malformed_placement_as_the_api_does(fake, field, value):
    body = {"acceleratorType": "v5p-8", "runtimeVersion": "v2-alpha-tpuv5", field: value}
    error = _post(fake, "nodes?nodeId=bad", body)
    assert error.code == 400 and json.loads(error.read())["error"]["status"] == "INVALID_ARGUMENT"
    assert fake.admin.is_empty()


def test_the_fake_refuses_a_reservation_in_another_zone(fake):
    body = {"tpu": {"nodeSpec": [{"parent": PARENT, "nodeId": "r1", "node": {
        "acceleratorType": "v5p-8", "runtimeVersion": "v2-alpha-tpuv5"}}]},
        "reservationName": f"projects/{PROJECT}/locations/us-east5-a/reservations/pool"}
    error = _post(fake, "queuedResources?queuedResourceId=r1", body)
    assert error.code == 400 and fake.admin.is_empty()


@pytest.mark.parametrize("where, words", [
    (Placement(reservation="pool", reserved=True), "choose one"),
    (Placement(tags=("Bad Tag",)), "network tag"),
    (Placement(service_account="nobody"), "service account"),
    (Placement(scopes=("not a scope",)), "OAuth scope"),
    (Placement(reservation=f"projects/{PROJECT}/locations/us-east5-a/reservations/pool"), "--zone"),
])
def test_bad_placement_is_refused_before_anything_is_asked(where, words):
    with pytest.raises(InvalidValueError, match=words):
        where.checked(project=PROJECT, zone=ZONE, queued=True, spot=False)


def test_up_reservation_and_internal_ips_through_the_cli(podctl):
    # hosts without external IPs reach GCS through their subnet's Private Google Access
    podctl("--backend", "fake", "fake", "start")
    podctl("--backend", "fake", "fake", "subnets", "update", "default", "--enable-private-ip-google-access")
    up_json = podctl.json("--backend", "fake", "up", "--slice", "v5p-8", "--name", "rz",
                          "--reservation", "pool", "--internal-ips", "--tags", "a1,b2",
                          "--service-account", "sa@fake-project.iam.gserviceaccount.com",
                          "--scopes", "cloud-platform")
    assert up_json["kind"] == "queued-resource" and up_json["ready"]
    bad = podctl("--backend", "fake", "up", "--slice", "v5p-8", "--name", "rs", "--reserved", "--spot",
                 check=False)
    assert_one_line_error(bad, 2, "drop --spot")
    podctl("--backend", "fake", "down", "rz", "--yes")
