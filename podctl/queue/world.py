"""What the cloud holds, seen once per tick: one list of nodes and one of queued
resources per zone that has an entry needing a look (podctl/cloud/describe.py's
list_slices, 1,000 to a page), then every entry is a dictionary lookup. A naive
reconciler would GET each entry's slice: one call per entry per tick."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Iterable

from podctl.cloud.describe import list_slices
from podctl.cloud.types import SliceInfo

PAGE_SIZE = 1000  # the API's largest page
# A slice in one of these can no longer run the entry's attempt.
LOST_STATES = {"PREEMPTED", "SUSPENDING", "SUSPENDED", "FAILED", "TERMINATED", "STOPPED",
               "STOPPING", "DELETING", "HIDDEN", "HIDING"}


@dataclass
class World:
    slices: dict[str, dict[str, SliceInfo]] = field(default_factory=dict)  # parent -> name -> info

    def get(self, parent: str, name: str | None) -> SliceInfo | None:
        return self.slices.get(parent, {}).get(name) if name else None

    def seen(self, parent: str) -> bool:
        return parent in self.slices


async def observe(api: Any, parents: Iterable[str]) -> World:
    parents = sorted(set(parents))
    listed = await asyncio.gather(*(list_slices(api, p, PAGE_SIZE) for p in parents))
    return World({p: {s.name: s for s in slices} for p, slices in zip(parents, listed)})


def lost_reason(info: SliceInfo) -> str | None:
    """Why INFO can no longer run an attempt (an infrastructure failure), or None."""
    if any(n.state == "PREEMPTED" for n in info.nodes):
        return f"{info.name} was PREEMPTED"
    if info.state in LOST_STATES:
        why = f": {info.error}" if info.error else ""
        return f"{info.kind} {info.name} is {info.state}{why}"
    if info.kind == "queued-resource" and info.state == "ACTIVE" and len(info.nodes) < info.num_slices:
        return f"queued resource {info.name} is ACTIVE but lost its nodes"
    return None
