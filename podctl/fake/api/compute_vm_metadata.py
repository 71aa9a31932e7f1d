"""Each VM's own metadata in a MIG of TPU VMs, as Compute Engine keeps it (compute v1):

    POST projects/P/zones/Z/instances/I/setMetadata   body: Metadata {fingerprint, items}

A VM is made with a copy of its template's map and a fingerprint of its own; setMetadata
replaces the whole map and is refused with 412 conditionNotMet ("Supplied fingerprint
does not match current metadata fingerprint.") unless it carries the current fingerprint,
which changes with every write (discovery document, Metadata.fingerprint: "An up-to-date
fingerprint must be provided in order to modify metadata"). A fingerprint left out is
refused the same way (the fake's guess: stricter than a first write that might pass).
The new map reaches the VM's metadata server `timings.metadata_propagation` after the
call, in order, as a node's patch does (world._metadata_propagated). A VM the MIG makes
again (recreate: preemption, repair) starts from the template's map with a new
fingerprint: whatever was set on the old one is gone.

The MIG's VMs are one node record (compute_tpu.py): per-VM maps live in its `_vms`
(worker -> {items, fingerprint, host: the map the metadata server still serves, queue}).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from podctl.fake.api.node_fields import check_metadata, host_metadata

if TYPE_CHECKING:
    from podctl.fake.world import World


class StaleFingerprint(Exception):
    """setMetadata with a fingerprint that is not the VM's current one (HTTP 412)."""


class BadBody(Exception):
    """setMetadata's body is no Metadata (HTTP 400 parseError)."""


def _fingerprint() -> str:
    return secrets.token_urlsafe(8)  # base64 of 8 bytes, as Compute Engine's look


def vm(node: dict[str, Any], worker: int) -> dict[str, Any]:
    """WORKER's own record, made from the template's map (the node's) on first sight."""
    vms = node.setdefault("_vms", {})
    if str(worker) not in vms:
        vms[str(worker)] = {"items": dict(node.get("metadata") or {}), "fingerprint": _fingerprint()}
    found: dict[str, Any] = vms[str(worker)]
    return found


def rendered(node: dict[str, Any], worker: int) -> dict[str, Any]:
    """An instance's `metadata` field."""
    own = vm(node, worker)
    return {"kind": "compute#metadata", "fingerprint": own["fingerprint"],
            "items": [{"key": k, "value": v} for k, v in sorted(own["items"].items())]}


def set_metadata(world: World, node: dict[str, Any], worker: int, body: Any) -> None:
    """setMetadata's checks and change (its operation is the caller's)."""
    if not isinstance(body, dict) or not isinstance(body.get("items", []), list):
        raise BadBody("Invalid JSON payload received. 'items' must be a list")
    own = vm(node, worker)
    if body.get("fingerprint") != own["fingerprint"]:
        raise StaleFingerprint("Supplied fingerprint does not match current metadata fingerprint.")
    items = {str(i.get("key")): i.get("value") for i in body.get("items") or [] if isinstance(i, dict)}
    check_metadata(items)
    own.setdefault("host", dict(own["items"]))  # what the metadata server serves until it propagates
    own.setdefault("queue", []).append(dict(items))
    own["items"], own["fingerprint"] = dict(items), _fingerprint()
    world.schedule(world.timings.metadata_propagation, "mig_vm_metadata_propagated", f"{node['name']}#{worker}")


def propagated(world: World, target: str) -> None:
    """The oldest map written to a VM, not yet on its metadata server, reaches it."""
    name, _, worker = target.rpartition("#")
    node = world.nodes.get(name)
    own = ((node or {}).get("_vms") or {}).get(worker)
    if node is None or own is None or not own.get("queue"):
        return
    own["host"] = own["queue"].pop(0)
    if not own["queue"]:
        own.pop("queue")
        own.pop("host")  # the server serves the VM's map again
    node["_metadata_seq"] = int(node.get("_metadata_seq", 0)) + 1  # hosts.py wakes the waits


def host_view(node: dict[str, Any], worker: int) -> dict[str, Any]:
    """The map WORKER's metadata server serves now: a Compute Engine VM's own (once a
    write has propagated), else the node's as its hosts see it (node_fields.host_metadata)."""
    own = (node.get("_vms") or {}).get(str(worker)) if node.get("_api") == "compute" else None
    if own is None:
        return host_metadata(node)
    shown: dict[str, Any] = own.get("host", own["items"])
    return shown


def remade(node: dict[str, Any], worker: int) -> None:
    """WORKER's VM made again by its MIG: the template's map, a new fingerprint."""
    (node.get("_vms") or {}).pop(str(worker), None)
    node["_metadata_seq"] = int(node.get("_metadata_seq", 0)) + 1


HANDLERS = {"mig_vm_metadata_propagated": propagated}
