"""What a run cost: its slice's billed time from the run's start to its end, at the
slice's price, and how much of it trained (goodput), with tokens and MFU from the
template's metric lines. `podctl cost RUN_ID` and `Run.cost()`."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from podctl.base.topology import parse_slice
from podctl.base.vocabulary import LIVE_RUN_STATES
from podctl.jobs.metrics import RunMetrics, read_metrics
from podctl.jobs.run_files import load_record, read_statuses
from podctl.money import cost
from podctl.steps.session import Session


@dataclass(frozen=True)
class RunBill:
    """`podctl cost RUN_ID --json`, field for field."""

    run_id: str
    slice: str
    zone: str
    state: str
    chips: int
    tier: str  # "spot" or "on-demand"
    tier_known: bool  # False: the slice is gone, its tier assumed
    created: float
    ended: float | None
    billed_seconds: float
    usd_per_hour: float | None
    cost_usd: float | None
    productive_seconds: float
    goodput: float | None
    tokens: float
    usd_per_million_tokens: float | None
    median_mfu: float | None
    steps: int
    final_step: int | None
    final_loss: float | None
    price: dict[str, Any] | None
    price_note: str | None  # why there is no price (a zone podctl has none for)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def run_cost(session: Session, run_id: str, *, price: float | None = None) -> RunBill:
    """RUN_ID's bill; PRICE (USD per chip-hour) overrides the price table."""
    storage = session.storage
    record = await load_record(storage, run_id)
    ended = record.ended
    if ended is None and record.state not in LIVE_RUN_STATES:  # settled from statuses
        statuses = await read_statuses(storage, run_id)
        ended = max((s.ended for s in statuses.values()), default=None)
    # The slice, if it is still there, says its tier; a slice made after the run is another.
    info = await session.api.find(f"projects/{record.project}/locations/{record.zone}",
                      record.slice_name)
    if info is not None and info.created > record.created:
        info = None
    same = info is not None
    spot = info is not None and info.tier == "spot"
    # Records from before generations.toml are v5p's, the only generation podctl ran then.
    accelerator_type = info.accelerator_type if info is not None else record.extra.get("accelerator_type", "v5p-8")
    chips = info.chips if info is not None else record.num_hosts * parse_slice(accelerator_type).chips_per_host
    generation = cost.generation_of(accelerator_type)
    chip_price = cost.chip_hour_price(record.zone, spot=spot, override=price, generation=generation)
    metrics = await read_metrics(storage, run_id)
    billed = max(0.0, (ended or time.time()) - record.created)
    bill = cost.RunCost(billed_seconds=billed, chips=chips, price=chip_price,
                        productive_seconds=metrics.productive_seconds, tokens=metrics.tokens)
    return RunBill(
        run_id=run_id, slice=record.slice_name, zone=record.zone, state=record.state,
        chips=chips, tier="spot" if spot else "on-demand", tier_known=same,
        created=record.created, ended=ended, billed_seconds=round(billed, 1),
        usd_per_hour=None if chip_price is None else chips * chip_price.usd_per_chip_hour,
        cost_usd=bill.usd, productive_seconds=round(metrics.productive_seconds, 3),
        goodput=bill.goodput, tokens=metrics.tokens,
        usd_per_million_tokens=bill.usd_per_million_tokens, median_mfu=metrics.median_mfu,
        steps=metrics.steps, final_step=metrics.final_step, final_loss=metrics.final_loss,
        price=chip_price.to_json() if chip_price else None,
        price_note=None if chip_price else cost.unknown_price_message(record.zone, generation))


async def checkpoint_bytes(session: Session, run_id: str) -> int:
    """What RUN_ID's checkpoints under its run directory hold in GCS now, in bytes."""
    from podctl.host.run_layout import checkpoints_prefix

    return sum(o.size for o in await session.storage.list(checkpoints_prefix(run_id)))


async def run_metrics(session: Session, run_id: str) -> RunMetrics:
    """What RUN_ID measured (its metric lines): steps, tokens, median MFU, platform, ...
    (`podctl plan --mfu-from / --goodput-from`)."""
    return await read_metrics(session.storage, run_id)
