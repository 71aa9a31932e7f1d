"""`up` on a network of the user's says, before anything is made, when the network
admits no SSH (podctl/cloud/firewall.py), against the fake's networks and rules
(podctl/fake/api/compute.py) read through the Compute Engine API's JSON."""

from __future__ import annotations

import asyncio
import json

import pytest

from podctl.cloud.firewall import ComputeReader, check_ssh
from podctl.base.errors import InvalidValueError
from podctl.fake.admin.admin_client import FakeAdmin
from tests.cli_in_process import nothing_started
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
    status = json.loads(podctl("fake", "start", "--json").stdout)
    FakeAdmin(status["admin"]).add_network("lab", [WEB_ONLY])
    proc = podctl("up", "--slice", "v5p-8", "--name", "fw", "--network", "lab", check=False)
    assert_one_line_error(proc, 2, "network 'lab' has no firewall rule admitting SSH",
                          "gcloud compute firewall-rules create lab-allow-ssh")
    assert not FakeAdmin(status["admin"]).resources()["nodes"]


def needs_check(fake, network: str | None = None, **needs):
    from podctl.cloud.firewall import Needs, check_run

    reader = ComputeReader(fake.tpu_api_url)
    try:
        return asyncio.run(check_run(reader, project=PROJECT, region="us-central1", network=network,
                                     subnetwork=None, needs=Needs(**needs)))
    finally:
        reader.close()


def test_between_hosts_a_rule_counts_for_the_coordinators_port_from_the_whole_subnet(fake):
    assert needs_check(fake, "default", hosts=2, slices=2) is None  # default-allow-internal
    fake.admin.add_network("lab", [SSH_RULE], project=PROJECT, ip_range="10.4.0.0/20")
    with pytest.raises(InvalidValueError, match=r"on 8476 \(JAX coordinator\), so") as refused:
        needs_check(fake, "lab", hosts=2)
    assert (f"gcloud compute firewall-rules create lab-allow-tpu-internal --project {PROJECT} --network lab "
            "--direction INGRESS --allow tcp:8476 --source-ranges 10.4.0.0/20") in str(refused.value)
    assert needs_check(fake, "lab", hosts=1) is None  # one host: no peer to reach
    narrow = {"name": "lab-narrow", "sourceRanges": ["10.4.0.0/24"], "allowed": [{"IPProtocol": "tcp"}]}
    fake.admin.add_network("lab", [SSH_RULE, narrow], project=PROJECT, ip_range="10.4.0.0/20")
    with pytest.raises(InvalidValueError, match="8476"):  # a part of the subnet only
        needs_check(fake, "lab", hosts=2)
    tagged = {"name": "lab-tags", "sourceTags": ["tpu"], "targetTags": ["tpu"],
              "allowed": [{"IPProtocol": "tcp", "ports": ["8476"]}]}
    fake.admin.add_network("lab", [SSH_RULE, tagged], project=PROJECT, ip_range="10.4.0.0/20")
    assert needs_check(fake, "lab", hosts=2, tags=("tpu",)) is None
    with pytest.raises(InvalidValueError, match=r"8080 \(megascale\)"):  # several slices: megascale's too
        needs_check(fake, "lab", hosts=2, slices=2, tags=("tpu",))
    with pytest.raises(InvalidValueError, match="--target-tags other"):  # the tagged rule is not theirs
        needs_check(fake, "lab", hosts=2, tags=("other",))
    assert needs_check(fake, "lab", ssh=False, hosts=2, tags=("tpu",)) is None


def test_internal_ips_need_private_google_access_on_the_subnet(fake):
    from podctl.fake.admin.admin_client import FakeCompute

    compute = FakeCompute(fake.tpu_api_url)
    compute.set_private_google_access(PROJECT, "us-central1", "default", False)  # the fake's default
    with pytest.raises(InvalidValueError, match="subnets update default --project .* --region us-central1 "
                                                "--enable-private-ip-google-access"):
        needs_check(fake, None, internal_ips=True)
    compute.set_private_google_access(PROJECT, "us-central1", "default", True)
    assert needs_check(fake, None, internal_ips=True) is None


def test_firewalls_insert_as_compute_engine_answers_it(fake):
    from podctl.base.errors import FakeCloudError
    from podctl.fake.admin.admin_client import FakeCompute

    compute = FakeCompute(fake.tpu_api_url)
    rule = {"name": "lab-ssh", "network": "global/networks/lab", "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}]}
    with pytest.raises(FakeCloudError, match="'projects/.*/global/networks/lab' was not found"):
        compute.create_firewall(PROJECT, rule)
    fake.admin.add_network("lab", [], project=PROJECT)
    with pytest.raises(InvalidValueError):
        check(fake, "lab")
    done = compute.create_firewall(PROJECT, rule)
    assert done["kind"] == "compute#operation" and done["status"] == "DONE" and done["operationType"] == "insert"
    assert check(fake, "lab") is None
    with pytest.raises(FakeCloudError, match="already exists"):
        compute.create_firewall(PROJECT, rule)
    with pytest.raises(FakeCloudError, match="INGRESS"):
        compute.create_firewall(PROJECT, {**rule, "name": "out", "direction": "EGRESS"})
    with pytest.raises(FakeCloudError, match="denied"):
        compute.create_firewall(PROJECT, {**rule, "name": "no", "denied": [{"IPProtocol": "tcp"}]})
    for port in ("99999", "30-20", "65536"):  # Compute Engine: "Invalid port specification"
        with pytest.raises(FakeCloudError, match=f"port '{port}'"):
            compute.create_firewall(PROJECT, {**rule, "name": "bad-port", "allowed": [
                {"IPProtocol": "tcp", "ports": [port]}]})


def test_a_bad_allow_is_one_line(podctl, tmp_path):
    """Refused before the fake is asked: no daemon is needed, and none is started (no
    daemon's state under the test's directory: read here, not by a `podctl fake status`)."""
    podctl.env["PODCTL_BACKEND"] = "fake"
    proc = podctl("fake", "firewall-rules", "create", "x", "--allow", "tcp:ssh", check=False)
    assert_one_line_error(proc, 2, "--allow 'tcp:ssh'")
    assert nothing_started(tmp_path)
