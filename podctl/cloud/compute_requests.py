"""What podctl asks Compute Engine for, to make one TPU slice: names and request bodies,
built without a call (tests/unit/test_compute_requests.py holds them).

A slice NAME is a managed instance group (MIG) NAME of the slice's VMs (a single-host
slice is a MIG of one VM, as Google's "TPU instances in MIGs" describes), made from an
instance template (the TPU machine type, podctl's labels, the metadata with `ssh-keys` and
the watcher's startup-script, spot or flex-start) and, for a multi-host slice, a workload
policy (`workloadPolicy: {type: HIGH_THROUGHPUT, acceleratorTopology: AxBxC}`) that forms
the slice's ICI topology. A MIG has no labels of its own: podctl's are the template's (and
so every VM's), and the policy names its slice in its description.

Tiers, as Compute Engine has them (docs: "About resize requests in a MIG", "Flex-start
VMs", `gcloud compute instance-groups managed resize-requests create`):
    on-demand   STANDARD VMs; the MIG is made at the slice's VM count
    --spot      scheduling.provisioningModel SPOT, instanceTerminationAction DELETE
    --queued    flex-start: FLEX_START VMs (instanceTerminationAction DELETE, no reservation),
                a MIG of 0 VMs, and one resize request of the slice's VM count that waits for
                capacity and makes them all at once; they run for `requestedRunDuration`
                (at most 7 days, FLEX_RUN_SECONDS here) and are then deleted by Google
    --reservation NAME   reservationAffinity SPECIFIC_RESERVATION, the reservation's name
    --reserved  reservationAffinity ANY_RESERVATION
What has no Compute Engine form is refused in one line: --guaranteed, --valid-for (a resize
request waits until capacity comes or it is deleted), --spot with --queued, a reservation
with --queued, multislice.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud import compute_v1

from podctl.base import topology
from podctl.base.errors import InvalidValueError
from podctl.cloud.compute_names import (
    parse_parent,
    policy_name,
    region_of,
    resize_request_name,
    template_description,
    template_name,
)
from podctl.cloud.create import CreateRequest
from podctl.cloud.provider import refuse_off_compute

WORKLOAD_TYPE = "HIGH_THROUGHPUT"
# The boot disk's image: Compute Engine's TPU VMs boot a plain OS image; podctl's hosts
# bring their own Python environment (a guess until checked against Google's TPU VM images).
BOOT_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"
POLICY_DESCRIPTION = "podctl workload policy of slice "  # + the slice's name
# A flex-start resize request's requestedRunDuration: Compute Engine takes 10 minutes to 7
# days (gcloud's --requested-run-duration) and deletes the VMs at its end; podctl asks for
# the most, and a budget (--max-hours) deletes the slice sooner.
FLEX_RUN_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class SlicePlan:
    """The three resources of slice NAME and what they are asked with."""

    project: str
    zone: str
    name: str
    template: compute_v1.InstanceTemplate
    policy: compute_v1.ResourcePolicy | None  # None: a single-host slice needs none
    mig: compute_v1.InstanceGroupManager
    # flex-start: the resize request that makes the MIG's VMs once capacity comes (the MIG
    # itself is made at 0 VMs); None for every other tier
    resize: compute_v1.InstanceGroupManagerResizeRequest | None = None

    @property
    def region(self) -> str:
        return region_of(self.zone)


def machine_type(slice_type: topology.SliceType) -> str:
    refuse_off_compute(slice_type)
    found = slice_type.machine_type
    if found is None:
        raise InvalidValueError(f"{slice_type.name}: Compute Engine has no {slice_type.generation.name} "
                                f"machine type of {slice_type.chips_per_host} chips per VM; use the "
                                "Cloud TPU API (--api tpu).")
    return found


def template_of(request: CreateRequest) -> compute_v1.InstanceTemplate:
    """The instance template of REQUEST's slice: TPU machine type, labels, metadata
    (ssh-keys, startup-script, podctl's keys), tier and placement."""
    spec, placement = request.spec, request.placement
    _refuse_what_compute_engine_lacks(request)
    props = compute_v1.InstanceProperties(
        machine_type=machine_type(spec.slice_type),
        labels=dict(request.labels),
        metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v)
                                            for k, v in sorted(request.metadata.items())]),
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=(
            compute_v1.AttachedDiskInitializeParams(source_image=BOOT_IMAGE)))],
        network_interfaces=[_interface(placement.network, placement.subnetwork, placement.internal_ips)],
    )
    if spec.tier == "spot":
        props.scheduling = compute_v1.Scheduling(provisioning_model="SPOT",
                                                 instance_termination_action="DELETE")
    elif spec.queued:  # flex-start (the template flags of "Create resize requests in a MIG")
        props.scheduling = compute_v1.Scheduling(provisioning_model="FLEX_START",
                                                 instance_termination_action="DELETE",
                                                 on_host_maintenance="TERMINATE", automatic_restart=False)
        props.reservation_affinity = compute_v1.ReservationAffinity(consume_reservation_type="NO_RESERVATION")
    if placement.service_account or placement.scopes:
        scopes = [s if "/" in s else f"https://www.googleapis.com/auth/{s}" for s in placement.scopes]
        props.service_accounts = [compute_v1.ServiceAccount(
            email=placement.service_account or "default",
            scopes=scopes or ["https://www.googleapis.com/auth/cloud-platform"])]
    if placement.tags:
        props.tags = compute_v1.Tags(items=list(placement.tags))
    if placement.reservation:
        props.reservation_affinity = compute_v1.ReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key="compute.googleapis.com/reservation-name", values=[placement.reservation.rsplit("/", 1)[-1]])
    elif placement.reserved:
        props.reservation_affinity = compute_v1.ReservationAffinity(consume_reservation_type="ANY_RESERVATION")
    _, zone = parse_parent(request.parent)
    return compute_v1.InstanceTemplate(name=template_name(request.name), properties=props,
                                       description=template_description(request.name, zone, spec.describe()))


def _refuse_what_compute_engine_lacks(request: CreateRequest) -> None:
    spec, placement = request.spec, request.placement
    if spec.num_slices > 1:
        raise InvalidValueError("multislice is a Cloud TPU API request (queued resources); through "
                                "Compute Engine ask for one slice (--num-slices 1), or use --api tpu.")
    if spec.tier == "guaranteed":
        raise InvalidValueError("--guaranteed is a Cloud TPU queued-resource tier; Compute Engine has "
                                "flex-start (--queued) and reservations (--reservation NAME) instead.")
    if spec.queued and spec.tier == "spot":
        raise InvalidValueError("--spot with --queued: on Compute Engine --queued is flex-start, its "
                                "own provisioning model; choose one.")
    if spec.queued and spec.valid_for_seconds is not None:
        raise InvalidValueError("--valid-for has no Compute Engine form: a flex-start resize request "
                                "waits until capacity comes or the slice is deleted; drop --valid-for "
                                "and bound the wait with --timeout.")
    if spec.queued and (placement.reservation or placement.reserved):
        raise InvalidValueError("flex-start VMs (--queued) consume no reservation on Compute Engine; "
                                "drop --queued to use the reservation.")


def _interface(network: str | None, subnetwork: str | None, internal: bool) -> compute_v1.NetworkInterface:
    interface = compute_v1.NetworkInterface(network=f"global/networks/{network or 'default'}")
    if subnetwork:
        interface.subnetwork = subnetwork
    if not internal:
        interface.access_configs = [compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")]
    return interface


def plan_of(request: CreateRequest) -> SlicePlan:
    """Everything `create` sends for REQUEST, in the order it is sent."""
    project, zone = parse_parent(request.parent)
    template = template_of(request)
    slice_type = request.spec.slice_type
    policy = None
    if slice_type.hosts > 1:
        policy = compute_v1.ResourcePolicy(
            name=policy_name(request.name), description=POLICY_DESCRIPTION + request.name,
            workload_policy=compute_v1.ResourcePolicyWorkloadPolicy(
                type_=WORKLOAD_TYPE, accelerator_topology=slice_type.topology))
    flex = request.spec.queued
    mig = compute_v1.InstanceGroupManager(
        name=request.name, base_instance_name=request.name, target_size=0 if flex else slice_type.hosts,
        instance_template=f"projects/{project}/global/instanceTemplates/{template.name}",
        description=f"podctl {request.spec.describe()}")
    if policy is not None:
        mig.resource_policies = compute_v1.InstanceGroupManagerResourcePolicies(
            workload_policy=f"projects/{project}/regions/{region_of(zone)}/resourcePolicies/{policy.name}")
    resize = None
    if flex:
        resize = compute_v1.InstanceGroupManagerResizeRequest(
            name=resize_request_name(request.name), resize_by=slice_type.hosts,
            requested_run_duration=compute_v1.Duration(seconds=FLEX_RUN_SECONDS),
            description=f"podctl flex-start of slice {request.name}")
    return SlicePlan(project, zone, request.name, template, policy, mig, resize)


def slice_of(machine: str, accelerator_topology: str | None) -> topology.SliceType:
    """The slice a MIG of MACHINE VMs forms (under a workload policy's topology, if any)."""
    for gen in topology.generations().values():
        for chips, name in gen.machine_types:
            if name == machine:
                if accelerator_topology:
                    return gen.slice_type(accelerator_topology)
                shape = gen.shape_for_chips(chips)
                if shape is not None:
                    return gen.slice_type(shape)
    raise InvalidValueError(f"machine type {machine!r} is no TPU machine type podctl knows.")
