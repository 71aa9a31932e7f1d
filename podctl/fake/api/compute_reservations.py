"""Compute Engine reservations, as the fake serves them: enough for a template's
`reservationAffinity` SPECIFIC_RESERVATION to name one that exists or not.

    POST/GET         projects/P/zones/Z/reservations
    GET/DELETE       projects/P/zones/Z/reservations/R

A reservation holds `specificReservation {count, instanceProperties {machineType}}` and
`specificReservationRequired`; a MIG whose template names a reservation gets no VM where
that reservation does not exist in its zone, or may not be targeted by name (each
managed instance's lastAttempt says why: compute_tpu.reservation_refusal). Rows in
fake/README.md.
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING, Any

from podctl.fake.api import compute_tpu as ce
from podctl.fake.api.apierror import rfc3339

if TYPE_CHECKING:
    from podctl.fake.world import World

def serve(world: World, method: str, project: str, rest: str, body: Any) -> dict[str, Any] | None:
    found = re.fullmatch(r"zones/([^/]+)/reservations(?:/([^/]+))?", rest)
    if not found:
        return None
    zone, name = found.groups()
    if zone not in world.zones:
        raise ce._not_found(f"projects/{project}/zones/{zone}")
    if name is None:
        if method == "POST":
            return _insert(world, project, zone, body)
        items = [r for k, r in sorted(world.reservations.items()) if k.startswith(f"{project}/{zone}/")]
        return {"kind": "compute#reservationList", **({"items": items} if items else {})}
    key = f"{project}/{zone}/{name}"
    if key not in world.reservations:
        raise ce._not_found(f"projects/{project}/{rest}")
    if method == "DELETE":
        gone = world.reservations.pop(key)
        return ce._operation(world, project, f"zones/{zone}", "delete", rest, target_id=gone["id"])
    return world.reservations[key]


def _insert(world: World, project: str, zone: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ce.ComputeError(400, "Invalid JSON payload received.", "parseError")
    name = ce._name(body)
    key = f"{project}/{zone}/{name}"
    if key in world.reservations:
        raise ce._exists(f"projects/{project}/zones/{zone}/reservations/{name}")
    specific = body.get("specificReservation") or {}
    count = str(specific.get("count", ""))
    machine = str((specific.get("instanceProperties") or {}).get("machineType") or "")
    if not count.isdigit() or int(count) < 1:
        raise ce._invalid("resource.specificReservation.count", f"'{specific.get('count')}'")
    if machine not in ce._machine_types():
        raise ce._invalid("resource.specificReservation.instanceProperties.machineType", f"'{machine}'")
    reservation_id = str(secrets.randbelow(2**62))
    reservation: dict[str, Any] = {
        "kind": "compute#reservation", "name": name, "id": reservation_id,
        "creationTimestamp": rfc3339(world.now()), "zone": f"{ce.BASE}/projects/{project}/zones/{zone}",
        "status": "READY", "specificReservationRequired": bool(body.get("specificReservationRequired")),
        "specificReservation": {"count": count, "inUseCount": "0", "instanceProperties": {"machineType": machine}},
        "selfLink": f"{ce.BASE}/projects/{project}/zones/{zone}/reservations/{name}"}
    world.reservations[key] = reservation
    return ce._operation(world, project, f"zones/{zone}", "insert", f"zones/{zone}/reservations/{name}",
                         target_id=reservation_id)
