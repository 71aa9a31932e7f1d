"""A key of a Compute Engine slice's metadata, written on every VM of its MIG.

A MIG has no metadata of its own that reaches running VMs: its template's is copied into
each VM when the VM is made, and a template cannot change (a new one set on the MIG
reaches only VMs made after). What a running VM's metadata server serves is the
instance's own metadata, changed by `instances.setMetadata`, which takes the whole map
with the fingerprint of the map it replaces (compute v1 discovery document: "fingerprint
... must be provided in order to modify or update the metadata ... An up-to-date
fingerprint must be provided"; a stale one is refused with 412 conditionNotMet). So a
key is set VM by VM, all VMs at once: instances.get for the map and its fingerprint,
setMetadata with both, and on a 412 (another writer in between) read and write again.

A VM the MIG makes again (preemption, repair) starts from the template's map: what
podctl wrote is gone, and whoever needs it there (the boot channel's start) writes it
again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from podctl.base.errors import CloudError, NotFoundError
from podctl.cloud import compute_names as names
from podctl.cloud.compute_client import ComputeApi

STALE_TRIES = 5  # reads and writes of one VM's map while other writers keep changing it


def stale(error: BaseException) -> bool:
    """A setMetadata refused for its fingerprint (HTTP 412, conditionNotMet)."""
    return isinstance(error.__cause__, gexc.PreconditionFailed)


async def set_key_on_vms(api: ComputeApi, node_name: str, key: str, value: str | None, *,
                         wait: bool) -> dict[str, str]:
    """KEY set to VALUE (None: removed) in the metadata of every VM of the MIG NODE_NAME
    names, in parallel. WAIT: until each setMetadata's operation is DONE. Returns the
    first VM's map as written; {} for a MIG with no VM."""
    project, zone, mig = names.parse_node(node_name)
    managed = await api.call("instanceGroupManagers.listManagedInstances", f"listing the VMs of {mig}",
                             api.migs.list_managed_instances, project=project, zone=zone,
                             instance_group_manager=mig)
    vms = sorted(m.name for m in managed if m.instance_status)  # one not made yet has no map

    def change(items: dict[str, str]) -> dict[str, str]:
        out = {k: v for k, v in items.items() if k != key}
        if value is not None:
            out[key] = value
        return out

    written = await asyncio.gather(*(_one(api, project, zone, vm, change, wait=wait) for vm in vms))
    return written[0] if written else {}


async def _one(api: ComputeApi, project: str, zone: str, vm: str,
               change: Callable[[dict[str, str]], dict[str, str]], *, wait: bool) -> dict[str, str]:
    what = f"setting the metadata of VM {vm}"
    for _ in range(STALE_TRIES):
        instance = await api.call("instances.get", f"reading VM {vm}", api.instances.get,
                                  project=project, zone=zone, instance=vm)
        now = {i.key: i.value for i in instance.metadata.items}
        after = change(now)
        if after == now:
            return now  # nothing to write: no call, no new fingerprint
        body = compute_v1.Metadata(fingerprint=instance.metadata.fingerprint,
                                   items=[compute_v1.Items(key=k, value=v) for k, v in sorted(after.items())])
        try:
            op: Any = await api.call("instances.setMetadata", what, api.instances.set_metadata_unary,
                                     project=project, zone=zone, instance=vm, metadata_resource=body,
                                     mutates=True)
        except CloudError as e:
            if stale(e) and not isinstance(e, NotFoundError):
                continue  # another writer's map came between: read it, and write ours over it
            raise
        if wait:
            await api.until_done(project, f"zones/{zone}", op, what)
        return after
    raise CloudError(f"{what}: its metadata kept changing under podctl ({STALE_TRIES} stale "
                     "fingerprints in a row); try again.")
