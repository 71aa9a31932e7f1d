"""`podctl.plan(...)`: how long a model trains, and what it costs, on each system.

Every row gets the same working: FLOPs = 6·N·D; time = FLOPs / (chips x peak x MFU);
cost = chips x hours x price per chip-hour, in the system's cheapest region unless a
region is pinned; memory fit first (fit.py); the project's bill on top (bill.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podctl.base.errors import InvalidValueError
from podctl.money import cost, prices
from podctl.policy.compare import System, resolve
from podctl.policy.planner import bill as billing
from podctl.policy.planner import fit as fitting
from podctl.policy.planner.mfu import BreakEven, MfuFigure, break_even, published


@dataclass(frozen=True)
class SystemPlan:
    """One system's plan: the working, its price and where it comes from, fit and bill."""

    system: System
    params: float
    tokens: float
    mfu: MfuFigure
    tier: str
    price: cost.Price | None  # per chip (GPU) hour, at TIER
    spot_price: cost.Price | None  # beside on-demand when no tier was chosen
    fit: fitting.Fit
    bill: billing.Bill | None  # None when the price is unknown
    price_note: str | None = None

    @property
    def flops(self) -> float:
        return 6 * self.params * self.tokens

    @property
    def flops_per_second(self) -> float:
        return self.system.chips * self.system.peak_flops_per_chip * self.mfu.value

    @property
    def hours(self) -> float:
        return self.flops / self.flops_per_second / 3600

    @property
    def days(self) -> float:
        return self.hours / 24

    def _total(self, price: cost.Price | None) -> float | None:
        return None if price is None else self.system.chips * price.usd_per_chip_hour * self.hours

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.price is None else self.system.chips * self.price.usd_per_chip_hour

    @property
    def total_usd(self) -> float | None:
        return self._total(self.price)

    @property
    def spot_total_usd(self) -> float | None:
        return self._total(self.spot_price)

    @property
    def usd_per_million_tokens(self) -> float | None:
        total = self.total_usd
        return None if total is None else total / (self.tokens / 1e6)

    def numbers(self) -> list[float]:
        project = self.bill.total_usd if self.bill else None
        return [x for x in (self.flops, self.hours, self.usd_per_hour, self.total_usd,
                            self.spot_total_usd, project) if x is not None]

    def to_json(self) -> dict[str, Any]:
        s = self.system
        return {"slice": s.name, "system": s.family, "kind": s.kind,
                "provisioned_by_podctl": s.kind == "tpu", "detail": s.detail, "chips": s.chips,
                "num_slices": s.num_slices, "params": self.params, "tokens": self.tokens,
                "mfu": self.mfu.value, "mfu_source": self.mfu.describe(), "flops": self.flops,
                "peak_flops_per_chip": s.peak_flops_per_chip, "hours": self.hours,
                "days": self.days, "tier": self.tier, "usd_per_hour": self.usd_per_hour,
                "total_usd": self.total_usd, "usd_per_million_tokens": self.usd_per_million_tokens,
                "price": self.price.to_json() if self.price else None,
                "spot_price": self.spot_price.to_json() if self.spot_price else None,
                "spot_total_usd": self.spot_total_usd, "fit": self.fit.to_json(),
                "project": self.bill.to_json() if self.bill else None,
                "price_note": self.price_note}


@dataclass(frozen=True)
class Plan:
    params: float
    tokens: float
    rows: tuple[SystemPlan, ...]
    break_even: tuple[BreakEven, ...]
    tier: str
    tier_chosen: bool  # False: on-demand, with spot beside it
    region: str | None  # pinned by --zone/--region; None: each system's cheapest
    notes: tuple[str, ...] = field(default=())

    def row(self, name: str) -> SystemPlan:
        return next(r for r in self.rows if r.system.name == name)

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "tokens": self.tokens, "flops": 6 * self.params * self.tokens,
                "tier": self.tier, "region": self.region, "zone": self.region,
                "estimates": [r.to_json() for r in self.rows],
                "mfu_source": self.rows[0].mfu.describe() if self.rows else None,
                "break_even": [b.to_json() for b in self.break_even],
                "price_note": "; ".join(self.notes) or None}


def _price(system: System, tier: str, region: str | None, override: float | None,
           config: Mapping[str, Any]) -> tuple[cost.Price | None, str | None]:
    """SYSTEM's price per chip-hour at TIER, and what to do when there is none."""
    where = region or "cheapest"
    if override is not None:
        cost.check_price(override)
        return cost.Price(float(override), tier, where, "--price", None), None
    if system.kind == "tpu":
        own = cost.chip_hour_price(region or "-", spot=False, tier=tier, generation=system.family,
                                   config=config)
        if own is not None:
            return own, None
    row = prices.lookup(system.family, region, tier) if region else prices.cheapest(system.family, tier)
    if row is not None:
        return cost.price_from_row(row), None
    unpublished = prices.not_published(system.family)
    if unpublished:
        return None, (f"{system.name}: no published price ({unpublished}); "
                      f"pass --price {system.family}=USD")
    best = prices.cheapest(system.family, tier)
    elsewhere = f"; cheapest: {best.region} at ${best.usd_per_unit_hour:.2f}" if best else ""
    return None, (f"{system.name}: no {tier} price for {system.family} in {where}{elsewhere}; "
                  f"pass --price {system.family}=USD")


def _finite(row: SystemPlan) -> SystemPlan:
    if not all(math.isfinite(x) for x in row.numbers()):
        raise InvalidValueError(
            f"{row.system.name}: 6 x {row.params:g} params x {row.tokens:g} tokens overflows "
            "(the result is beyond 1e308); pass sizes a run could have.")
    return row


def plan_system(system: System, *, params: float, tokens: float, mfu: MfuFigure, tier: str,
                tier_chosen: bool, region: str | None, price_override: float | None,
                config: Mapping[str, Any], inputs: billing.BillInputs,
                data_region: str | None = None) -> SystemPlan:
    price, note = _price(system, tier, region, price_override, config)
    spot = None
    if not tier_chosen and price_override is None:
        spot, _ = _price(system, "spot", region, None, config)
    fit = fitting.check(system, params)
    row = SystemPlan(system, params, tokens, mfu, tier, price, spot, fit, None, note)
    if price is not None:
        if data_region and not inputs.egress_usd_per_gb:  # the dataset elsewhere: priced by where
            egress, why = billing.egress_for(data_region, region or price.region)
            inputs = dataclasses.replace(inputs, egress_usd_per_gb=egress, egress_why=why)
        row = dataclasses.replace(row, bill=billing.bill(
            run_compute_usd=row.total_usd or 0.0, run_hours=row.hours, params=params,
            inputs=inputs))
    return _finite(row)


def mfu_for(system: System, params: float, given: float | None = None,
            measured: MfuFigure | None = None) -> MfuFigure:
    if given is not None:
        return MfuFigure(cost.check_mfu(given), "--mfu")
    if measured is not None:
        return measured
    return (published(system.family, params, system.chips)
            or MfuFigure(cost.DEFAULT_MFU, "assumed; pass --mfu"))


def break_evens(rows: tuple[SystemPlan, ...]) -> tuple[BreakEven, ...]:
    """The first system against each other priced system."""
    first, others = rows[0], rows[1:]
    if first.price is None:
        return ()
    return tuple(break_even(first.system.name, first.price.usd_per_chip_hour,
                            first.system.peak_flops_per_chip, o.system.name,
                            o.price.usd_per_chip_hour, o.system.peak_flops_per_chip, o.mfu.value)
                 for o in others if o.price is not None)


def counts(params: float | str, tokens: float | str) -> tuple[float, float]:
    """Parameters and tokens as numbers ("70B", "1T" or floats), finite and above zero."""
    n = params if isinstance(params, float | int) else cost.parse_count(params, "--params")
    d = tokens if isinstance(tokens, float | int) else cost.parse_count(tokens, "--tokens")
    for value, option in ((n, "--params"), (d, "--tokens")):
        if not (math.isfinite(value) and value > 0):
            raise InvalidValueError(f"{option} {value}: must be a finite number above zero.")
    return float(n), float(d)


def plan(params: float | str, tokens: float | str, systems: str | list[str], *,
         mfu: Any = None, tier: str | None = None,
         region: str | None = None, price: Any = None,
         num_slices: int = 1, runs: int = 1, people: float = 0.0, rate: float = 0.0,
         goodput: float | None = None, checkpoints_kept: int = 3, dataset_tb: float = 0.0,
         data_region: str | None = None, egress_usd_per_gb: float | None = None,
         measured_mfu: MfuFigure | None = None, goodput_source: str | None = None,
         config: Mapping[str, Any] | None = None, where_option: str = "--region") -> Plan:
    """Plan training PARAMS x TOKENS on each of SYSTEMS ("v5p-4096,h100-2048" or a list).

    MFU and PRICE are one number for every system or a mapping by system or family
    ({"v5p": 0.5}); without them MFU comes from published runs (data/mfu.toml) and prices
    from the shipped table, each system in its cheapest region unless REGION (a region or
    a zone) pins one. TIER: "on-demand" (default, with spot beside it), "spot", "1y", "3y".
    """
    n, d = counts(params, tokens)
    names = [s.strip() for s in systems.split(",")] if isinstance(systems, str) else list(systems)
    names = list(dict.fromkeys(s.strip().lower() for s in names if s.strip()))  # folded
    if not names:
        raise InvalidValueError("which systems? pass --slice v5p-N or --compare v5p-A,h100-B.")
    config = cost.load_price_config() if config is None else config
    own_regions = [k for k, v in config.items() if isinstance(v, dict) and "-" in k] + [
        k for v in config.values() if isinstance(v, dict) for k in v if "-" in k]
    pinned = prices.check_where(region, where_option, extra=own_regions) if region else None
    chosen_tier = prices.parse_tier(tier) if tier else "on-demand"
    resolved = list({s.name: s for s in (resolve(name, num_slices) for name in names)}.values())
    inputs = billing.BillInputs(
        runs=runs, people=people, usd_per_person_hour=rate,
        goodput=billing.DEFAULT_GOODPUT if goodput is None else goodput,
        goodput_source=goodput_source or (billing.GOODPUT_SOURCE if goodput is None else "--goodput"),
        checkpoints_kept=checkpoints_kept, dataset_tb=dataset_tb,
        egress_usd_per_gb=egress_usd_per_gb or 0.0,
        egress_why="--egress-usd-per-gb" if egress_usd_per_gb else "the data is in the chips' region",
    ).check()
    rows = []
    for system in resolved:
        given_mfu = _per(mfu, system)
        rows.append(plan_system(
            system, params=float(n), tokens=float(d),
            mfu=mfu_for(system, float(n), given_mfu, measured_mfu), tier=chosen_tier,
            tier_chosen=tier is not None, region=pinned, price_override=_per(price, system),
            config=config, inputs=inputs, data_region=data_region))
    row_tuple = tuple(rows)
    notes = tuple(r.price_note for r in rows if r.price_note)
    return Plan(float(n), float(d), row_tuple, break_evens(row_tuple), chosen_tier,
                tier is not None, pinned, notes)


def _per(value: Any, system: System) -> float | None:
    """VALUE for SYSTEM: one number for all, a mapping by name or family, or compare.PerSystem."""
    if value is None or isinstance(value, float | int):
        return None if value is None else float(value)
    if hasattr(value, "for_system"):
        per: float | None = value.for_system(system.slice_type)
        return per
    for key in (system.name, system.slice_type, system.family):
        if key in value:
            return float(value[key])
    return None
