"""A node's upcoming maintenance, which only the v2alpha1 API shows (Node.upcomingMaintenance:
type, canReschedule, windowStartTime, windowEndTime, latestWindowStartTime,
maintenanceStatus PENDING|ONGOING); podctl otherwise speaks v2, which lacks the field.
google-cloud-tpu's v2alpha1 client has no REST transport, so this is one REST GET with the
v2 client's own credentials. It only adds to what `status` shows: any failure is None.
"""

from __future__ import annotations

import asyncio
from typing import Any

from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.types import SliceInfo


def _get(api: TpuApi, name: str) -> dict[str, Any] | None:
    from google.auth.transport.requests import AuthorizedSession

    base = api.endpoint if "://" in api.endpoint else f"https://{api.endpoint}"
    session = AuthorizedSession(api.client.transport._credentials)  # the v2 client's own
    try:
        response = session.get(f"{base.rstrip('/')}/v2alpha1/{name}", timeout=10)
        if response.status_code != 200:
            return None
        found = response.json().get("upcomingMaintenance")
        return found if isinstance(found, dict) else None
    finally:
        session.close()


async def upcoming(api: TpuApi, info: SliceInfo) -> dict[str, dict[str, Any]]:
    """Node short name -> its upcomingMaintenance, for the nodes of slice INFO that have one."""
    parent = f"projects/{info.project}/locations/{info.zone}"

    async def one(node: Any) -> tuple[str, dict[str, Any] | None]:
        try:
            return node.name, await asyncio.to_thread(_get, api, f"{parent}/nodes/{node.name}")
        except Exception:  # noqa: BLE001 - an extra for the display, never a failure of it
            return node.name, None

    found = await asyncio.gather(*(one(n) for n in info.nodes))
    return {name: plan for name, plan in found if plan}


def describe(plan: dict[str, Any]) -> str:
    """'PENDING SCHEDULED 2026-12-03T17:00:00Z to 2026-12-03T17:10:00Z'."""
    start, end = plan.get("windowStartTime", "?"), plan.get("windowEndTime")
    return (f"{plan.get('maintenanceStatus', '?')} {plan.get('type', '')} {start}"
            + (f" to {end}" if end else "")).replace("  ", " ")
