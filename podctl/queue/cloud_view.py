"""What the cloud holds, seen once per tick (the tick's World): one list of nodes and
one of queued resources per zone that has an entry needing a look (steps.slices_in,
1,000 to a page), then every entry is a dictionary lookup. A naive reconciler would
GET each entry's slice: one call per entry per tick."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from podctl import steps
from podctl.base.failures import slice_lost_reason
from podctl.steps import SliceInfo


@dataclass
class World:
    slices: dict[str, dict[str, SliceInfo]] = field(default_factory=dict)  # parent -> name -> info

    def get(self, parent: str, name: str | None) -> SliceInfo | None:
        return self.slices.get(parent, {}).get(name) if name else None

    def seen(self, parent: str) -> bool:
        return parent in self.slices


async def observe(session: steps.Session, parents: Iterable[str]) -> World:
    parents = sorted(set(parents))
    listed = await asyncio.gather(*(steps.slices_in(session, p) for p in parents))
    return World({p: {s.name: s for s in slices} for p, slices in zip(parents, listed)})


def lost_reason(info: SliceInfo) -> str | None:
    """Why INFO can no longer run an attempt (an infrastructure failure), or None."""
    return slice_lost_reason(info)
