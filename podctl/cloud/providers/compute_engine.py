"""Compute Engine as a SliceProvider: TPU7x (which only it serves) and v5p/v6e with
`--api compute`. A slice is a managed instance group of TPU VMs made from an instance
template and, when multi-host, a workload policy that forms its ICI topology
(cloud/compute_requests.py builds the three; cloud/compute_client.py sends them).

    create:   template -> workload policy -> MIG of the slice's VM count (a failure part
              way deletes what this call made; a client killed part way leaves a template
              or policy that `podctl gc` finds by podctl's labels and description)
              flex-start (--queued): the MIG is made at 0 VMs, its insert waited for, then
              one resize request of the slice's VM count, which waits for capacity
    ready:    every managed instance RUNNING with no action, the MIG stable, and its
              accelerator topology ACTIVE; an instance's stockout error ends the wait
              (StockoutError), a topology that FAILED too (SliceLostError); a flex-start
              slice WAITING_FOR_RESOURCES while its resize request is ACCEPTED, FAILED with
              the request's error
    delete:   the MIG (its VMs with it), waited for, then its template and policy

The steps see a slice as one node NAME (the MIG), whose hosts are its instances in name
order. Its labels and metadata are the template's (a MIG has none). A key set on the
slice (the boot channel's run pointer) is set on each of its VMs (compute_metadata.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from google.cloud import compute_v1

from podctl.base import topology
from podctl.base.errors import (
    InvalidValueError,
    NotFoundError,
    PodctlError,
    SliceLostError,
    StockoutError,
)
from podctl.cloud import compute_names as names
from podctl.cloud import compute_requests as req
from podctl.cloud.compute_client import STOCKOUT_CODES, ComputeApi, operation_error
from podctl.cloud.create import CreateRequest, Creation, CreationOutcome
from podctl.cloud.describe import Kind
from podctl.cloud.names import validate_name
from podctl.cloud.operations import Operation
from podctl.cloud.placement import Placement
from podctl.cloud.providers import compute_metadata
from podctl.cloud.types import GuestEntry, Host, NodeInfo, SliceInfo
from podctl.cloud.wait import Clock, Progress, WaitPolicy, wait_until

API = "compute"
DELETE_TIMEOUT = 900.0  # seconds a MIG's delete may take (its VMs with it)
TPU_RUNTIME_PORT = 8470  # a host's address is what counts; SSH is on 22 (jobs/launch.py)


def _seconds(stamp: str) -> float:
    """Compute Engine's RFC 3339 timestamp (creationTimestamp) -> epoch seconds; 0 unread."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _labels_of(template: compute_v1.InstanceTemplate) -> dict[str, str]:
    return dict(template.properties.labels)


def _metadata_of(template: compute_v1.InstanceTemplate) -> dict[str, str]:
    return {i.key: i.value for i in template.properties.metadata.items}


class ComputeEngine:
    """The SliceProvider over ComputeApi (cloud/provider.py's protocol)."""

    def __init__(self, api: ComputeApi):
        self.api = api
        self.endpoint = api.endpoint

    # ---- the service ---------------------------------------------------------------------

    @property
    def total_calls(self) -> int:
        return self.api.total_calls

    def server_now(self) -> float:
        return self.api.server_now()

    async def server_clock(self, parent: str) -> float:
        if self.api._clock_offset is None:
            with contextlib.suppress(PodctlError):
                await self.list_slices(parent)
        return self.server_now()

    def close(self) -> None:
        self.api.close()

    # ---- slices ---------------------------------------------------------------------------

    async def check_zone(self, parent: str, slice_type: topology.SliceType) -> None:
        _, zone = names.parse_parent(parent)
        req.machine_type(slice_type)  # served by Compute Engine at all
        gen = slice_type.generation
        if zone not in gen.zones:
            raise InvalidValueError(f"zone {zone!r} offers no {gen.name} (or does not exist); "
                                    f"{gen.name} zones include {', '.join(gen.zones[:2])}: pass --zone {gen.zones[0]}.")

    async def create(self, request: CreateRequest) -> Creation:
        plan = req.plan_of(request)
        made: list[tuple[str, str]] = []  # what to delete again if a later step fails
        try:
            op = await self.api.call("instanceTemplates.insert", f"creating template {plan.template.name}",
                                     self.api.templates.insert_unary, project=plan.project,
                                     instance_template_resource=plan.template, mutates=True)
            made.append(("template", str(plan.template.name)))
            await self.api.until_done(plan.project, "global", op, f"creating template {plan.template.name}")
            if plan.policy is not None:
                op = await self.api.call("resourcePolicies.insert", f"creating policy {plan.policy.name}",
                                         self.api.policies.insert_unary, project=plan.project,
                                         region=plan.region, resource_policy_resource=plan.policy,
                                         mutates=True)
                made.append(("policy", str(plan.policy.name)))
                await self.api.until_done(plan.project, f"regions/{plan.region}", op,
                                          f"creating policy {plan.policy.name}")
            op = await self.api.call("instanceGroupManagers.insert", f"creating MIG {plan.name}",
                                     self.api.migs.insert_unary, project=plan.project, zone=plan.zone,
                                     instance_group_manager_resource=plan.mig, mutates=True)
            made.append(("mig", plan.name))
            scope = f"zones/{plan.zone}"
            if plan.resize is not None:  # flex-start: the MIG must exist before its resize request
                await self.api.until_done(plan.project, scope, op, f"creating MIG {plan.name}")
                op = await self.api.call(
                    "instanceGroupManagerResizeRequests.insert", f"asking for {plan.name}'s flex-start VMs",
                    self.api.resize_requests.insert_unary, project=plan.project, zone=plan.zone,
                    instance_group_manager=plan.name, instance_group_manager_resize_request_resource=plan.resize,
                    mutates=True)
                await self.api.until_done(plan.project, scope, op, f"asking for {plan.name}'s flex-start VMs")
        except BaseException:
            with contextlib.suppress(PodctlError):
                await asyncio.shield(self._remove(plan.project, plan.region, made, plan.zone))
            raise
        # the MIG's insert, followed by wait_ready here and by creation_outcome from another
        # process (the queue's): DONE once the group exists, its VMs not yet made
        # (instanceGroupManagers.insert's reference), or with error.errors[] and no MIG
        return Creation(request.name, "node", Operation(names.operation_path(plan.project, scope, op.name),
                                                        done=plan.resize is not None))

    async def _remove(self, project: str, region: str, made: list[tuple[str, str]], zone: str = "") -> None:
        for kind, name in reversed(made):
            try:
                if kind == "mig":
                    op = await self.api.call("instanceGroupManagers.delete", f"deleting MIG {name}",
                                             self.api.migs.delete_unary, project=project, zone=zone,
                                             instance_group_manager=name, mutates=True)
                    await self.api.until_done(project, f"zones/{zone}", op, f"deleting MIG {name}",
                                              timeout=DELETE_TIMEOUT)
                elif kind == "template":
                    op = await self.api.call("instanceTemplates.delete", f"deleting template {name}",
                                             self.api.templates.delete_unary, project=project,
                                             instance_template=name, mutates=True)
                    await self.api.until_done(project, "global", op, f"deleting template {name}")
                else:
                    op = await self.api.call("resourcePolicies.delete", f"deleting policy {name}",
                                             self.api.policies.delete_unary, project=project, region=region,
                                             resource_policy=name, mutates=True)
                    await self.api.until_done(project, f"regions/{region}", op, f"deleting policy {name}")
            except NotFoundError:
                continue

    async def creation_outcome(self, operation_name: str) -> CreationOutcome | None:
        """How the MIG's insert (create's Creation names it) ended; None where it is no
        Compute Engine operation or the service has forgotten it. A MIG made is DONE with
        no error even while its VMs are not (their errors are the slice's state)."""
        parsed = names.parse_operation(operation_name)
        if parsed is None:
            return None
        project, scope, name = parsed
        try:
            op = await self.api.operation(project, scope, name)
        except NotFoundError:
            return None
        if op.status != compute_v1.Operation.Status.DONE:
            return CreationOutcome(done=False)
        errors = list(op.error.errors)
        if not errors:
            return CreationOutcome(done=True)
        said = operation_error(errors, f"creating {op.target_link.rsplit('/', 1)[-1]}", scope.partition("/")[2])
        return CreationOutcome(done=True, stockout=isinstance(said, StockoutError), error=str(said))

    async def describe(self, parent: str, name: str, kind: Kind | None = None) -> SliceInfo:
        validate_name(name)
        project, zone = names.parse_parent(parent)
        try:
            mig = await self.api.call("instanceGroupManagers.get", f"reading MIG {name}", self.api.migs.get,
                                      project=project, zone=zone, instance_group_manager=name)
        except NotFoundError as e:
            raise NotFoundError(f"no slice named {name!r} in {zone} on Compute Engine; "
                                "`podctl ls --api compute` lists them.") from e
        return await self._slice(project, zone, mig)

    async def _slice(self, project: str, zone: str, mig: compute_v1.InstanceGroupManager) -> SliceInfo:
        template_name = mig.instance_template.rsplit("/", 1)[-1]
        template, managed = await asyncio.gather(
            self.api.call("instanceTemplates.get", f"reading template {template_name}", self.api.templates.get,
                          project=project, instance_template=template_name),
            self.api.call("instanceGroupManagers.listManagedInstances", f"listing the VMs of {mig.name}",
                          self.api.migs.list_managed_instances, project=project, zone=zone,
                          instance_group_manager=mig.name))
        instances = sorted(managed, key=lambda m: m.name)  # worker order (fake/README.md)
        running = [m for m in instances if m.instance_status == "RUNNING" and m.current_action == "NONE"]
        details = await asyncio.gather(*(
            self.api.call("instances.get", f"reading VM {m.name}", self.api.instances.get,
                          project=project, zone=zone, instance=m.name) for m in running))
        by_name = {d.name: d for d in details}
        topologies = list(mig.status.applied_accelerator_topologies)
        shape = topologies[0].accelerator_topology if topologies else None
        sliced = req.slice_of(template.properties.machine_type.rsplit("/", 1)[-1], shape)
        state, error = _state(mig, instances, running, topologies)
        flex = template.properties.scheduling.provisioning_model == "FLEX_START"
        if flex and state == "CREATING" and not instances:
            state, error = await self._flex_state(project, zone, mig.name)
        hosts = []
        for worker, m in enumerate(instances):
            vm = by_name.get(m.name)
            nic = vm.network_interfaces[0] if vm is not None and vm.network_interfaces else None
            if nic is None or not nic.network_i_p:
                continue
            external = nic.access_configs[0].nat_i_p if nic.access_configs else None
            hosts.append(Host(0, worker, nic.network_i_p, TPU_RUNTIME_PORT, external or None))
        labels = _labels_of(template)
        spot = template.properties.scheduling.provisioning_model == "SPOT"
        metadata = _metadata_of(template)  # its pin and watcher's version: the boot channel's
        created = _seconds(mig.creation_timestamp)
        # a VM under maintenance (its upcomingMaintenance ONGOING): the slice's health says
        # so as a Cloud TPU node's does, which is what policy/maintenance.py waits out
        ongoing = any((_upcoming(d) or {}).get("maintenanceStatus") == "ONGOING" for d in details)
        health = ("UNHEALTHY_MAINTENANCE" if ongoing else "HEALTHY") if state == "READY" else None
        node = NodeInfo(name=mig.name, state=state, health=health,
                        accelerator_type=sliced.name, topology=sliced.topology, hosts=tuple(hosts),
                        spot=spot, created=created, labels=labels, queued_resource=None,
                        metadata=metadata)
        return SliceInfo(name=mig.name, project=project, zone=zone, kind="node", state=state,
                         accelerator_type=sliced.name, topology=sliced.topology, num_slices=1,
                         tier="spot" if spot else "on-demand", created=created, labels=labels,
                         nodes=(node,), error=error, runtime_version="", api=API)

    async def _flex_state(self, project: str, zone: str, name: str) -> tuple[str, str | None]:
        """A flex-start MIG with no VMs yet, by its resize request: WAITING_FOR_RESOURCES while
        ACCEPTED, FAILED (with why) when it failed or was cancelled or its VMs' run ended,
        ORPHANED without one, CREATING otherwise."""
        try:
            request = await self.api.call(
                "instanceGroupManagerResizeRequests.get", f"reading {name}'s flex-start request",
                self.api.resize_requests.get, project=project, zone=zone, instance_group_manager=name,
                resize_request=names.resize_request_name(name))
        except NotFoundError:  # a half-made slice: gc's to remove (policy/gc.py DEAD_NODE_STATES)
            return "ORPHANED", ("a flex-start MIG without its resize request (an `up` that did not "
                                "finish, or the request was deleted): it can make no VM")
        if request.state == "ACCEPTED":  # Compute Engine's enums are strings on the wire and here
            return "WAITING_FOR_RESOURCES", None
        if request.state in ("FAILED", "CANCELLED"):
            said = "; ".join(f"{e.code}: {e.message}" for e in request.status.error.errors)
            return "FAILED", f"its flex-start resize request {request.state} ({said or 'no reason given'})"
        if request.state == "SUCCEEDED":  # its VMs were made, and are gone: the run time ended
            return "FAILED", "its flex-start VMs were deleted at the end of their run duration"
        return "CREATING", None

    async def find(self, parent: str, name: str) -> SliceInfo | None:
        try:
            return await self.describe(parent, name)
        except NotFoundError:
            return None

    async def list_slices(self, parent: str, page_size: int = 0) -> list[SliceInfo]:
        """The zone's MIGs as slices, and podctl's templates in the zone whose MIG does not
        exist (an `up` killed before it made the MIG) as ORPHANED slices, for gc."""
        project, zone = names.parse_parent(parent)
        migs, templates = await asyncio.gather(
            self.api.call("instanceGroupManagers.list", f"listing MIGs in {zone}", self.api.migs.list,
                          project=project, zone=zone),
            self.api.call("instanceTemplates.list", "listing instance templates", self.api.templates.list,
                          project=project))
        listed = list(migs)
        found = []
        for mig in listed:
            with contextlib.suppress(NotFoundError):  # deleted between the list and the reads
                found.append(await self._slice(project, zone, mig))
        made = {mig.name for mig in listed}
        for template in templates:
            owner = names.template_slice(template.description)
            if owner is None or owner[1] != zone or owner[0] in made or names.template_name(owner[0]) != template.name:
                continue
            found.append(_orphan(project, zone, owner[0], template))
        return sorted(found, key=lambda s: s.name)

    async def owning_slice(self, parent: str, info: SliceInfo) -> SliceInfo:
        return info

    async def ask_again(self, parent: str, member: str) -> None:
        raise InvalidValueError(f"{member}: a Compute Engine slice has no queued resource per "
                                "slice (`up --elastic` is the Cloud TPU API's).")

    async def stop_asking(self, parent: str, member: str) -> None:
        await self.ask_again(parent, member)

    async def delete(self, parent: str, info: SliceInfo) -> SliceInfo:
        """The MIG (and its VMs), then its template and policy once it is gone: a template
        in use cannot be deleted, so this waits for the MIG's delete operation (what `up`'s
        undo and `down` both need: nothing of the slice left behind)."""
        project, zone = names.parse_parent(parent)
        if info.state != "DELETING":
            try:
                op = await self.api.call("instanceGroupManagers.delete", f"deleting MIG {info.name}",
                                         self.api.migs.delete_unary, project=project, zone=zone,
                                         instance_group_manager=info.name, mutates=True)
                await self.api.until_done(project, f"zones/{zone}", op, f"deleting MIG {info.name}",
                                          timeout=DELETE_TIMEOUT)
            except NotFoundError:
                pass
        else:
            await self.wait_deleted(parent, info.name)
        await self._remove(project, names.region_of(zone), [("template", names.template_name(info.name)),
                                                          ("policy", names.policy_name(info.name))])
        return info

    async def _inserted(self, parent: str, name: str, creation: Creation | None) -> None:
        """CREATION's MIG insert followed to DONE; where it failed (no MIG was made: a quota,
        a stockout, something not found) the template and policy are deleted here, since
        `up`'s undo finds no slice to delete, and its error raised in the cloud's words."""
        parsed = names.parse_operation(creation.operation.name) if creation and creation.operation else None
        if parsed is None or (creation is not None and creation.operation is not None and creation.operation.done):
            return
        project, scope, op_name = parsed
        try:
            op = await self.api.operation(project, scope, op_name)
            await self.api.until_done(project, scope, op, f"creating MIG {name}")
        except PodctlError:
            with contextlib.suppress(PodctlError):
                await asyncio.shield(self._remove(project, names.region_of(names.parse_parent(parent)[1]), [
                    ("template", names.template_name(name)), ("policy", names.policy_name(name))]))
            raise

    async def wait_ready(self, parent: str, name: str, *, kind: Kind | None = None,
                         creation: Creation | None = None, policy: WaitPolicy | None = None,
                         clock: Clock | None = None, progress: Progress | None = None) -> SliceInfo:
        await self._inserted(parent, name, creation)

        async def probe() -> SliceInfo | None:
            info = await self.describe(parent, name)
            if info.state in ("STOCKOUT", "QUOTA_EXCEEDED"):  # what the MIG met making its VMs
                raise info_error(info)
            if info.state in ("FAILED", "ORPHANED"):
                raise SliceLostError(f"{name}: {info.error}; `podctl down {name}`, then `podctl up` again.")
            if info.state == "DELETING":
                raise SliceLostError(f"{name} is being deleted.")
            if progress:
                progress(f"{info.state.lower()} ({len(info.hosts)}/{topology.parse_slice(info.accelerator_type).hosts}"
                         " VMs running)")
            return info if info.ready else None

        return await wait_until(probe, what=f"waiting for {name}", policy=policy or WaitPolicy(),
                                clock=clock or Clock())

    async def wait_deleted(self, parent: str, name: str, *, kind: Kind | None = None,
                           policy: WaitPolicy | None = None, clock: Clock | None = None,
                           progress: Progress | None = None) -> None:
        project, zone = names.parse_parent(parent)

        async def gone() -> bool | None:
            try:
                await self.api.call("instanceGroupManagers.get", f"reading MIG {name}", self.api.migs.get,
                                    project=project, zone=zone, instance_group_manager=name)
            except NotFoundError:
                return True
            return None

        await wait_until(gone, what=f"deleting {name}", policy=policy or WaitPolicy(), clock=clock or Clock())
        await self._remove(project, names.region_of(zone), [("template", names.template_name(name)),
                                                          ("policy", names.policy_name(name))])

    async def set_labels(self, parent: str, info: SliceInfo, labels: Mapping[str, str],
                         policy: WaitPolicy | None = None) -> SliceInfo:
        raise InvalidValueError(f"{info.name} is a Compute Engine slice, whose labels are its instance "
                                f"template's and cannot change; `podctl down {info.name}` and make it "
                                "again with the labels wanted.")

    async def placement(self, parent: str, info: SliceInfo) -> Placement:
        project, _ = names.parse_parent(parent)
        template = await self.api.call("instanceTemplates.get", f"reading the template of {info.name}",
                                       self.api.templates.get, project=project,
                                       instance_template=names.template_name(info.name))
        props = template.properties
        nic = props.network_interfaces[0] if props.network_interfaces else None
        network = nic.network.rsplit("/", 1)[-1] if nic is not None and nic.network else None
        accounts = list(props.service_accounts)
        affinity = props.reservation_affinity
        return Placement(
            reservation=(affinity.values[0] if affinity.consume_reservation_type == "SPECIFIC_RESERVATION"
                         and affinity.values else None),
            reserved=affinity.consume_reservation_type == "ANY_RESERVATION",
            network=None if network == "default" else network,
            subnetwork=(nic.subnetwork or None) if nic is not None else None,
            service_account=(accounts[0].email if accounts and accounts[0].email != "default" else None),
            scopes=tuple(accounts[0].scopes) if accounts else (), tags=tuple(props.tags.items),
            internal_ips=nic is not None and not nic.access_configs)

    async def upcoming_maintenance(self, info: SliceInfo) -> dict[str, dict[str, Any]]:
        """The MIG -> the soonest of its VMs' announced maintenance (compute v1
        Instance.resourceStatus.upcomingMaintenance: the fields Cloud TPU's v2alpha1 node
        has, same JSON names), with `workers` the VMs it names. An extra for `status`:
        any failure is none."""
        try:
            project, zone = info.project, info.zone
            managed = await self.api.call("instanceGroupManagers.listManagedInstances",
                                          f"listing the VMs of {info.name}", self.api.migs.list_managed_instances,
                                          project=project, zone=zone, instance_group_manager=info.name)
            vm_names = sorted(m.name for m in managed if m.instance_status)
            vms = await asyncio.gather(*(
                self.api.call("instances.get", f"reading VM {n}", self.api.instances.get, project=project,
                              zone=zone, instance=n) for n in vm_names))
        except PodctlError:
            return {}
        plans = {w: _upcoming(vm) for w, vm in enumerate(vms)}
        found = sorted((plan.get("windowStartTime", ""), w) for w, plan in plans.items() if plan)
        if not found:
            return {}
        soonest = dict(plans[found[0][1]] or {})
        soonest["workers"] = [w for w, plan in plans.items()
                              if plan and plan.get("windowStartTime") == soonest.get("windowStartTime")]
        return {info.name: soonest}

    # ---- a node's metadata and what its hosts publish ------------------------------------

    async def set_metadata_key(self, node_name: str, key: str, value: str, *,
                               current: Mapping[str, str] | None = None,
                               wait: bool = True) -> dict[str, str]:
        """KEY on every VM of the MIG (compute_metadata.py: the template's map reaches only
        VMs made after; a running VM's is its own, set with its fingerprint)."""
        return await compute_metadata.set_key_on_vms(self.api, node_name, key, value, wait=wait)

    async def remove_metadata_key(self, node_name: str, key: str, *,
                                  current: Mapping[str, str] | None = None,
                                  wait: bool = True) -> dict[str, str]:
        return await compute_metadata.set_key_on_vms(self.api, node_name, key, None, wait=wait)

    async def guest_attributes(self, node_name: str, query_path: str = "", *,
                               workers: int | None = None) -> list[list[GuestEntry]]:
        project, zone, name = names.parse_node(node_name)
        managed = await self.api.call("instanceGroupManagers.listManagedInstances",
                                      f"listing the VMs of {name}", self.api.migs.list_managed_instances,
                                      project=project, zone=zone, instance_group_manager=name)
        instances = sorted(managed, key=lambda m: m.name)

        async def one(instance: str) -> list[GuestEntry]:
            try:
                # queryPath is no flattened argument of the client's method: the request's
                said = await self.api.call("instances.getGuestAttributes", f"reading {instance}'s guest "
                                           "attributes", self.api.instances.get_guest_attributes,
                                           request=compute_v1.GetGuestAttributesInstanceRequest(
                                               project=project, zone=zone, instance=instance,
                                               query_path=query_path))
            except NotFoundError:
                return []
            return [GuestEntry(i.namespace, i.key, i.value) for i in said.query_value.items]

        return list(await asyncio.gather(*(one(m.name) for m in instances)))


def _upcoming(vm: compute_v1.Instance) -> dict[str, Any] | None:
    """VM's upcomingMaintenance in its JSON names ({} fields left out), None without one."""
    plan = vm.resource_status.upcoming_maintenance
    if not plan.maintenance_status and not plan.window_start_time:
        return None
    said: dict[str, Any] = type(plan).to_dict(plan, preserving_proto_field_name=False)
    return {k: v for k, v in said.items() if v not in ("", [], None)}


def _orphan(project: str, zone: str, name: str, template: compute_v1.InstanceTemplate) -> SliceInfo:
    """Slice NAME's template (and maybe its policy) with no MIG: nothing runs, nothing bills,
    but it is podctl's to remove (gc's DEAD states; delete() removes both)."""
    machine = template.properties.machine_type.rsplit("/", 1)[-1]
    try:
        sliced = req.slice_of(machine, None)
        kind, shape = sliced.name, sliced.topology
    except InvalidValueError:
        kind, shape = machine, ""
    return SliceInfo(name=name, project=project, zone=zone, kind="node", state="ORPHANED",
                     accelerator_type=kind, topology=shape, num_slices=1, tier="on-demand",
                     created=_seconds(template.creation_timestamp), labels=_labels_of(template),
                     error="its template (and workload policy) were left without a MIG by an `up` "
                     "that did not finish", api=API)


def _state(mig: compute_v1.InstanceGroupManager, instances: list[Any], running: list[Any],
           topologies: list[Any]) -> tuple[str, str | None]:
    """The slice's state in podctl's words (READY, CREATING, REPAIRING, DELETING, STOCKOUT,
    QUOTA_EXCEEDED, FAILED: a topology that could not form, or VMs the MIG cannot make) and,
    for the last three, why (each managed instance's lastAttempt errors, `CODE: message`)."""
    actions = {m.current_action for m in instances}
    if "DELETING" in actions or mig.current_actions.deleting:
        return "DELETING", None
    for t in topologies:
        if t.state == "FAILED":
            said = "; ".join(e.message for e in t.state_details.error.errors) or "no reason given"
            return "FAILED", f"its accelerator topology {t.accelerator_topology} could not form ({said})"
    errors = [e for m in instances for e in m.last_attempt.errors.errors]
    if any(e.code in STOCKOUT_CODES for e in errors):
        return "STOCKOUT", "; ".join(dict.fromkeys(f"{e.code}: {e.message}" for e in errors))
    if any(e.code.startswith("QUOTA") for e in errors):  # passes only when someone raises it
        return "QUOTA_EXCEEDED", "; ".join(dict.fromkeys(f"{e.code}: {e.message}" for e in errors))
    # Anything else the MIG's last attempt met (a reservation that does not exist, a quota)
    # does not pass by waiting: the MIG would try again and again while `up` waited out
    # its timeout. Rate limits do pass.
    lasting = [e for e in errors if not e.code.startswith(("RATE_LIMIT", "RESOURCE_OPERATION_RATE"))]
    if lasting:
        return "FAILED", "its VMs cannot be made: " + "; ".join(
            dict.fromkeys(f"{e.code}: {e.message}" for e in lasting))
    formed = all(t.state == "ACTIVE" for t in topologies)
    if instances and len(running) == len(instances) == mig.target_size and mig.status.is_stable and formed:
        return "READY", None
    if "RECREATING" in actions:
        return "REPAIRING", None
    return "CREATING", None


def info_error(info: SliceInfo) -> PodctlError:
    """A STOCKOUT or QUOTA_EXCEEDED slice's error (its VMs' last attempt) as podctl's: the
    same StockoutError or QuotaExceededError a failed operation gives (compute_client.py)."""
    errors = [compute_v1.Errors(code=code, message=message)
              for code, _, message in (part.partition(": ") for part in (info.error or "").split("; "))]
    return operation_error(errors, f"making {info.name}'s VMs", info.zone)
