"""`up` on a network of the user's says, before anything is made, when the network
admits no SSH (podctl/cloud/firewall.py), against the fake's networks and rules
(podctl/fake/compute.py) read through the Compute Engine API's JSON."""

from __future__ import annotations

import asyncio
import json

import pytest

from podctl.cloud.firewall import ComputeReader, check_ssh
from podctl.errors import InvalidValueError
from podctl.fake.admin_client import FakeAdmin
from tests.conftest import PROJECT, assert_one_line_error

SSH_RULE = {"name": "lab-ssh", "sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}]}
WEB_ONLY = {"name": "lab-web", "sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["443"]}]}


def check(fake, network: str | None = None, subnetwork: str | None = None, tags: tuple[str, ...] = ()):
    reader = ComputeReader(fake.tpu_api_url)
    try:
        return asyncio.run(check_ssh(reader, project=PROJECT, region="us-central1", network=network,
                                     subnetwork=subnetwork, tags=tags))
    finally:
        reader.close()


def test_the_default_network_admits_ssh(fake):
    assert check(fake, "default") is None
    assert check(fake, subnetwork="default") is None


def test_a_network_without_an_ssh_rule_is_refused_with_the_rule_that_fixes_it(fake):
    fake.admin.add_network("lab", [WEB_ONLY], project=PROJECT)
    with pytest.raises(InvalidValueError, match="no firewall rule admitting SSH") as refused:
        check(fake, "lab")
    assert (f"gcloud compute firewall-rules create lab-allow-ssh --project {PROJECT} --network lab "
            "--allow tcp:22 --source-ranges 0.0.0.0/0") in str(refused.value)
    with pytest.raises(InvalidValueError, match="network 'lab'"):
        check(fake, subnetwork="lab")  # the subnetwork's network is read first


def test_a_rule_counts_only_for_its_target_tags_and_port_ranges(fake):
    tagged = {**SSH_RULE, "targetTags": ["tpu"]}
    fake.admin.add_network("lab", [tagged], project=PROJECT)
    with pytest.raises(InvalidValueError, match="--target-tags other"):
        check(fake, "lab", tags=("other",))
    assert check(fake, "lab", tags=("tpu",)) is None
    ranged = {"name": "wide-all", "allowed": [{"IPProtocol": "tcp", "ports": ["20-30"]}]}
    fake.admin.add_network("wide", [ranged], project=PROJECT)
    assert check(fake, "wide") is None
    fake.admin.add_network("off", [{**SSH_RULE, "disabled": True}], project=PROJECT)
    with pytest.raises(InvalidValueError):
        check(fake, "off")


def test_an_unknown_network_is_said_as_such(fake):
    with pytest.raises(InvalidValueError, match="no such network"):
        check(fake, "nowhere")


def test_up_on_a_network_without_ssh_fails_in_one_line_before_anything_is_made(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    status = json.loads(podctl("fake", "status", "--json", check=False).stdout or "{}")
    if not status.get("running"):
        podctl("ls")  # starts the daemon
        status = json.loads(podctl("fake", "status", "--json").stdout)
    FakeAdmin(status["admin"]).add_network("lab", [WEB_ONLY])
    proc = podctl("up", "--slice", "v5p-8", "--name", "fw", "--network", "lab", check=False)
    assert_one_line_error(proc, 2, "network 'lab' has no firewall rule admitting SSH",
                          "gcloud compute firewall-rules create lab-allow-ssh")
    assert not FakeAdmin(status["admin"]).resources()["nodes"]
