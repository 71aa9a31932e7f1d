"""What slices cost: `podctl ls` (the $/HOUR and COST columns) and `podctl cost [NAME]`.

    priced = await slice_costs(session)                     # every slice in the zone
    priced = await slice_costs(session, managed_only=True, price=4.2)
    priced = await slice_costs(session, name="mine")        # one

Each slice with its price (money/cost.py: --price, podctl.toml [prices], the shipped table)
and the budget `up --max-cost/--max-hours` wrote on it; a run's bill is run_cost.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

from podctl.cloud.types import SliceInfo
from podctl.money import cost
from podctl.money.budget import SliceBudget, slice_budget
from podctl.steps.session import Session

# A slice's price per hour (None: unknown), for callers above the door (the queue's
# budgets: `queue add` refuses a --max-cost it cannot price, a tick enforces it).
slice_hourly_cost = cost.slice_hourly_cost


@dataclass(frozen=True)
class PricedSlice:
    info: SliceInfo
    cost: cost.SliceCost  # per hour and so far (chips x age x price); unknown: None in it
    budget: SliceBudget | None  # from its labels (`up --max-cost/--max-hours`)


@dataclass(frozen=True)
class SliceCosts:
    slices: list[PricedSlice]
    notes: list[str]  # one per generation whose price is unknown: what to do about it


async def slice_costs(session: Session, *, name: str | None = None, managed_only: bool = False,
                      price: float | None = None) -> SliceCosts:
    """NAME (else every slice in the zone, podctl's own only if MANAGED_ONLY), priced at
    PRICE per chip-hour (else podctl.toml [prices], else the shipped table)."""
    settings = session.settings
    slices = ([await session.api.describe(settings.parent, name)] if name else
              [s for s in await session.api.list_slices(settings.parent)
               if s.managed or not managed_only])
    config = cost.load_price_config()
    priced = [PricedSlice(s, cost.slice_cost(s, override=price, config=config), slice_budget(s))
              for s in slices]
    unknown = dict.fromkeys(cost.generation_of(p.info.accelerator_type) for p in priced
                            if p.cost.usd_so_far is None)
    return SliceCosts(priced, [cost.unknown_price_message(settings.zone, g) for g in unknown])


def unknown_price(accelerator_type: str, zone: str) -> str:
    """Why ACCELERATOR_TYPE in ZONE has no price, and what to do (pass --price or set
    podctl.toml's [prices])."""
    return cost.unknown_price_message(zone, cost.generation_of(accelerator_type))
