"""What podctl sends Compute Engine for one slice (cloud/compute_requests.py), built with
no call: the template's machine type, labels, metadata and tier; the workload policy of a
multi-host slice; the MIG of the slice's VM count; and the slice a MIG forms, read back."""

from __future__ import annotations

import pytest

from podctl.base.errors import InvalidValueError
from podctl.cloud import compute_requests as req
from podctl.cloud.create import CreateRequest
from podctl.cloud.placement import Placement
from podctl.cloud.types import SliceSpec

PARENT = "projects/p-1/locations/us-central1-c"


def _request(slice_type: str, **spec: object) -> CreateRequest:
    return CreateRequest(parent=PARENT, name="iw", spec=SliceSpec.build(slice_type, **spec),  # type: ignore[arg-type]
                         labels={"podctl-managed": "true"}, ssh_keys="podctl:ssh-ed25519 AAAA podctl",
                         extra_metadata={"startup-script": "#!/bin/bash\ntrue\n"})


def test_a_multi_host_tpu7x_slice_is_a_template_a_workload_policy_and_a_mig_of_its_vms():
    plan = req.plan_of(_request("tpu7x-128"))  # 4x4x4: 64 chips on 16 VMs
    props = plan.template.properties
    assert (plan.template.name, props.machine_type, dict(props.labels)) == \
        ("iw-tpl", "tpu7x-standard-4t", {"podctl-managed": "true"})
    assert {i.key for i in props.metadata.items} == {"ssh-keys", "startup-script"}
    assert props.network_interfaces[0].access_configs  # an external IP unless --internal-ips
    assert plan.policy is not None and plan.policy.name == "iw-topo"
    assert (plan.policy.workload_policy.type_, plan.policy.workload_policy.accelerator_topology) == \
        ("HIGH_THROUGHPUT", "4x4x4")
    assert (plan.mig.name, plan.mig.target_size) == ("iw", 16)
    assert plan.mig.instance_template == "projects/p-1/global/instanceTemplates/iw-tpl"
    assert plan.mig.resource_policies.workload_policy == "projects/p-1/regions/us-central1/resourcePolicies/iw-topo"


def test_a_single_host_slice_needs_no_policy_and_spot_is_the_templates_provisioning_model():
    plan = req.plan_of(_request("v6e-8", tier="spot"))
    assert plan.policy is None and plan.mig.target_size == 1
    assert plan.template.properties.machine_type == "ct6e-standard-8t"
    assert plan.template.properties.scheduling.provisioning_model == "SPOT"


def test_queued_is_flex_start_a_mig_of_none_and_a_resize_request_of_the_slice():
    plan = req.plan_of(_request("tpu7x-128", queued=True))
    scheduling = plan.template.properties.scheduling
    assert (scheduling.provisioning_model, scheduling.instance_termination_action) == ("FLEX_START", "DELETE")
    assert plan.template.properties.reservation_affinity.consume_reservation_type == "NO_RESERVATION"
    assert plan.mig.target_size == 0 and plan.resize is not None
    assert (plan.resize.name, plan.resize.resize_by) == ("iw-flex", 16)
    assert plan.resize.requested_run_duration.seconds == req.FLEX_RUN_SECONDS == 7 * 24 * 3600
    assert req.plan_of(_request("tpu7x-128")).resize is None


def test_placement_becomes_the_templates_network_account_tags_and_reservation():
    request = _request("v5p-16")
    placed = CreateRequest(parent=request.parent, name=request.name, spec=request.spec, labels={},
                           ssh_keys="k", placement=Placement(network="net", service_account="sa@p.iam",
                                                             scopes=("cloud-platform",), tags=("t1",),
                                                             internal_ips=True, reservation="r1"))
    props = req.template_of(placed)
    assert props.properties.network_interfaces[0].network == "global/networks/net"
    assert not props.properties.network_interfaces[0].access_configs
    assert props.properties.service_accounts[0].email == "sa@p.iam"
    assert list(props.properties.tags.items) == ["t1"]
    assert list(props.properties.reservation_affinity.values) == ["r1"]


@pytest.mark.parametrize("slice_type, spec, words", [
    ("v4-8", {}, "Compute Engine makes no TPU v4 VMs"),
    ("v5p-16", {"queued": True, "tier": "guaranteed"}, "--guaranteed is a Cloud TPU queued-resource tier"),
])
def test_what_compute_engine_does_not_take_is_refused_in_words(slice_type, spec, words):
    with pytest.raises(InvalidValueError, match=words):
        req.plan_of(_request(slice_type, **spec))


def test_the_slice_a_mig_forms_is_read_back_from_its_machine_type_and_topology():
    assert req.slice_of("tpu7x-standard-4t", "2x2x2").name == "tpu7x-16"
    assert req.slice_of("ct5p-hightpu-4t", "2x2x4").name == "v5p-32"
    assert req.slice_of("ct6e-standard-8t", None).name == "v6e-8"
    with pytest.raises(InvalidValueError, match="no TPU machine type"):
        req.slice_of("n2-standard-8", None)
