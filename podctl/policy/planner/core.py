"""`podctl.plan(...)`: how long a model trains, and what it costs, on each system.

Every row gets the same working: FLOPs = (6·N + 12·L·H·Q·T)·D (mfu.FORMULA: the model's
FLOPs with attention at the plan's sequence length T, the same count the MFU table's figures
are converted by); hours = FLOPs / (chips x peak x MFU); days = hours / goodput / 24 (the
wall-clock, restarts and saves included); cost = chips x price per chip-hour x hours /
goodput, in the system's cheapest region unless a region is pinned, spot beside it in the
same region, with its preemption loss; cost and days again at the MFU band's ends; memory
fit first (fit.py); the project's bill on top (bill.py); what the comparison says about
itself (findings.py).
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
from podctl.policy.planner import findings
from podctl.policy.planner import fit as fitting
from podctl.policy.planner.mfu import (
    DEFAULT_SEQ_LEN,
    BreakEven,
    MfuFigure,
    break_even,
    flops_per_token,
    model_shape,
    published,
)

SPOT_PREEMPTION_LOSS = 0.10
SPOT_LOSS_SOURCE = ("assumed: a further tenth of billed time lost to preemptions on spot "
                    "(a synchronous job restarts from its last checkpoint at each one); "
                    "measure it with --goodput-from a spot run")


@dataclass(frozen=True)
class SystemPlan:
    """One system's plan: the working, its price and where it comes from, fit and bill."""

    system: System
    params: float
    tokens: float
    mfu: MfuFigure
    tier: str
    price: cost.Price | None  # per chip (GPU) hour, at TIER
    spot_price: cost.Price | None  # beside on-demand when no tier was chosen (same region)
    fit: fitting.Fit
    bill: billing.Bill | None  # None when the price is unknown
    price_note: str | None = None
    shape: fitting.Shape = fitting.Shape(80, 8192, DEFAULT_SEQ_LEN)  # plan_system sets the model's
    goodput: float = billing.DEFAULT_GOODPUT
    spot_loss: float = SPOT_PREEMPTION_LOSS  # extra share of spot's billed time lost
    spot_loss_source: str = SPOT_LOSS_SOURCE
    deadline_days: float | None = None
    flops_override: float | None = None  # the preflight's compiled FLOPs, when given

    @property
    def six_nd(self) -> float:
        return 6 * self.params * self.tokens

    @property
    def flops(self) -> float:
        if self.flops_override is not None:
            return self.flops_override
        s = self.shape
        return flops_per_token(self.params, s.layers, s.width, s.seq_len) * self.tokens

    @property
    def attention_share(self) -> float:
        """Attention's FLOPs over 6·N·D."""
        return self.flops / self.six_nd - 1

    @property
    def flops_per_second(self) -> float:
        return self.system.chips * self.system.peak_flops_per_chip * self.mfu.value

    def hours_at(self, mfu: float) -> float:
        """Training hours at MFU, without badput."""
        return self.flops / (self.system.chips * self.system.peak_flops_per_chip * mfu) / 3600

    @property
    def hours(self) -> float:
        return self.hours_at(self.mfu.value)

    @property
    def row_goodput(self) -> float:
        """Goodput of this row's tier: spot loses its preemptions on top."""
        return self.goodput * (1 - self.spot_loss) if self.tier == "spot" else self.goodput

    def days_at(self, mfu: float) -> float:
        """Wall-clock days at MFU: hours / goodput."""
        return self.hours_at(mfu) / self.row_goodput / 24

    @property
    def days(self) -> float:
        return self.days_at(self.mfu.value)

    @property
    def misses_deadline(self) -> bool:
        return self.deadline_days is not None and self.days > self.deadline_days

    def _total(self, price: cost.Price | None, mfu: float, goodput: float) -> float | None:
        return (None if price is None
                else self.system.chips * price.usd_per_chip_hour * self.hours_at(mfu) / goodput)

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.price is None else self.system.chips * self.price.usd_per_chip_hour

    def total_at(self, mfu: float) -> float | None:
        """One run's billed cost at MFU: chips x price x hours / goodput."""
        return self._total(self.price, mfu, self.row_goodput)

    @property
    def total_usd(self) -> float | None:
        return self.total_at(self.mfu.value)

    @property
    def band_totals(self) -> tuple[float | None, float | None]:
        """(cost at the band's high MFU, cost at its low MFU): cheapest first."""
        low, high = self.mfu.band
        return self.total_at(high), self.total_at(low)

    @property
    def band_days(self) -> tuple[float, float]:
        low, high = self.mfu.band
        return self.days_at(high), self.days_at(low)

    @property
    def spot_total_usd(self) -> float | None:
        return self._total(self.spot_price, self.mfu.value, self.goodput * (1 - self.spot_loss))

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
        low, high = self.mfu.band
        return {"slice": s.name, "system": s.family, "kind": s.kind,
                "provisioned_by_podctl": s.kind == "tpu", "detail": s.detail, "chips": s.chips,
                "num_slices": s.num_slices, "params": self.params, "tokens": self.tokens,
                "seq_len": self.shape.seq_len, "layers": self.shape.layers,
                "width": self.shape.width, "six_nd": self.six_nd,
                "attention_share": self.attention_share,
                "mfu": self.mfu.value, "mfu_low": low, "mfu_high": high,
                "mfu_source": self.mfu.describe(), "flops": self.flops,
                "peak_flops_per_chip": s.peak_flops_per_chip, "hours": self.hours,
                "goodput": self.row_goodput, "days": self.days,
                "days_band": list(self.band_days), "deadline_days": self.deadline_days,
                "misses_deadline": self.misses_deadline, "tier": self.tier,
                "region": self.price.region if self.price else None,
                "usd_per_hour": self.usd_per_hour, "total_usd": self.total_usd,
                "total_usd_band": list(self.band_totals),
                "usd_per_million_tokens": self.usd_per_million_tokens,
                "price": self.price.to_json() if self.price else None,
                "spot_price": self.spot_price.to_json() if self.spot_price else None,
                "spot_total_usd": self.spot_total_usd, "spot_loss": self.spot_loss,
                "spot_loss_source": self.spot_loss_source, "fit": self.fit.to_json(),
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
    findings: tuple[str, ...] = field(default=())  # what the comparison says about itself
    warnings: tuple[str, ...] = field(default=())  # sizes no run has (a unit left off?)

    def row(self, name: str) -> SystemPlan:
        return next(r for r in self.rows if r.system.name == name)

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "tokens": self.tokens, "six_nd": 6 * self.params * self.tokens,
                "flops": self.rows[0].flops if self.rows else None,
                "seq_len": self.rows[0].shape.seq_len if self.rows else None,
                "tier": self.tier, "region": self.region, "zone": self.region,
                "estimates": [r.to_json() for r in self.rows],
                "mfu_source": self.rows[0].mfu.describe() if self.rows else None,
                "break_even": [b.to_json() for b in self.break_even],
                "findings": list(self.findings), "warnings": list(self.warnings),
                "price_note": "; ".join(self.notes) or None}


def _price(system: System, tier: str, region: str | None, override: float | None,
           config: Mapping[str, Any]) -> tuple[cost.Price | None, str | None]:
    """SYSTEM's price per chip-hour at TIER, and what to do when there is none."""
    if override is not None:
        cost.check_price(override)
        return cost.Price(float(override), tier, region or "any region", "--price", None), None
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
    unpublished_tier = prices.not_published(system.family, tier)
    if unpublished_tier:
        return None, (f"{system.name}: no published {tier} price ({unpublished_tier}); "
                      f"pass --price {system.family}=USD")
    best = prices.cheapest(system.family, tier)
    if best is not None:
        return None, (f"{system.name}: no {tier} price for {system.family} in {region}; cheapest: "
                      f"{best.region} at ${best.usd_per_unit_hour:.2f}; pass --price "
                      f"{system.family}=USD")
    return None, (f"{system.name}: podctl's price table has no {tier} price for "
                  f"{system.family} in any region (no source it could read publishes one); "
                  f"pass --price {system.family}=USD")


def home_region(system: System) -> str | None:
    """Where SYSTEM's on-demand price is lowest: spot is priced there too unless pinned."""
    row = prices.cheapest(system.family, "on-demand")
    return row.region if row else None


def _finite(row: SystemPlan) -> SystemPlan:
    if not all(math.isfinite(x) for x in row.numbers()):
        raise InvalidValueError(
            f"{row.system.name}: 6 x {row.params:g} params x {row.tokens:g} tokens overflows "
            "(the result is beyond 1e308); pass sizes a run could have.")
    return row


@dataclass(frozen=True)
class RunShape:
    """What the FLOPs and the fit need beyond N and D: sequence, batch, remat, shape."""

    seq_len: int = DEFAULT_SEQ_LEN
    batch_per_chip: int = fitting.DEFAULT_BATCH_PER_CHIP
    remat: str = fitting.DEFAULT_REMAT
    layers: int | None = None  # None: mfu.model_shape(N)
    width: int | None = None

    def for_params(self, params: float) -> fitting.Shape:
        layers, width = model_shape(params)
        return fitting.Shape(self.layers or layers, self.width or width, self.seq_len,
                             self.batch_per_chip, self.remat)


def plan_system(system: System, *, params: float, tokens: float, mfu: MfuFigure, tier: str,
                tier_chosen: bool, region: str | None, price_override: float | None,
                config: Mapping[str, Any], inputs: billing.BillInputs,
                data_region: str | None = None, run_shape: RunShape = RunShape(),
                deadline_days: float | None = None,
                spot_loss: tuple[float, str] = (SPOT_PREEMPTION_LOSS, SPOT_LOSS_SOURCE)) -> SystemPlan:
    where = region or (home_region(system) if tier in ("on-demand", "spot") else None)
    price, note = _price(system, tier, where, price_override, config)
    spot = None
    if not tier_chosen and price_override is None and price is not None:
        spot, _ = _price(system, "spot", region or price.region, None, config)
    shape = run_shape.for_params(params)
    fit = fitting.check(system, params, shape)
    row = SystemPlan(system, params, tokens, mfu, tier, price, spot, fit, None, note, shape,
                     inputs.goodput, spot_loss[0], spot_loss[1], deadline_days)
    if price is not None:
        if data_region and not inputs.egress_usd_per_gb:  # the dataset elsewhere: priced by where
            egress, why = billing.egress_for(data_region, region or price.region)
            inputs = dataclasses.replace(inputs, egress_usd_per_gb=egress, egress_why=why)
        if tier == "spot":
            inputs = dataclasses.replace(
                inputs, goodput=row.row_goodput,
                goodput_source=f"{inputs.goodput_source}; spot: x (1 - {row.spot_loss:g}), "
                               f"{row.spot_loss_source}")
        row = dataclasses.replace(row, bill=billing.bill(
            run_compute_usd=system.chips * price.usd_per_chip_hour * row.hours,
            run_hours=row.hours, params=params, inputs=inputs))
    return _finite(row)


def mfu_for(system: System, params: float, given: float | None = None,
            measured: MfuFigure | None = None, seq_len: int = DEFAULT_SEQ_LEN) -> MfuFigure:
    if given is not None:
        return MfuFigure(cost.check_mfu(given), "--mfu")
    if measured is not None:
        return measured
    return (published(system.family, params, system.chips, slices=system.num_slices,
                      seq_len=seq_len, kind=system.kind)
            or MfuFigure(cost.DEFAULT_MFU, f"assumed; not published for {system.family}: "
                                           "pass --mfu"))


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
         config: Mapping[str, Any] | None = None, where_option: str = "--region",
         seq_len: int = DEFAULT_SEQ_LEN, batch_per_chip: int = fitting.DEFAULT_BATCH_PER_CHIP,
         remat: str = fitting.DEFAULT_REMAT, deadline_days: float | None = None,
         goodput_measured: bool = False) -> Plan:
    """Plan training PARAMS x TOKENS on each of SYSTEMS ("v5p-4096,h100-2048" or a list).

    MFU and PRICE are one number for every system or a mapping by system or family
    ({"v5p": 0.5}); without them MFU comes from published runs (data/mfu.toml) and prices
    from the shipped table, each system in its cheapest region unless REGION (a region or
    a zone) pins one. TIER: "on-demand" (default, with spot beside it, in the same region),
    "spot", "1y", "3y". SEQ_LEN puts attention into the FLOPs; BATCH_PER_CHIP (sequences)
    and REMAT ("full" or "none") size the activations of the fit; DEADLINE_DAYS marks the
    rows that miss it. GOODPUT_MEASURED: GOODPUT came from a run's history, preemptions
    included (spot then takes no assumed preemption loss on top).
    """
    n, d = counts(params, tokens)
    shape = check_run_shape(seq_len, batch_per_chip, remat)
    if deadline_days is not None and not (math.isfinite(deadline_days) and deadline_days > 0):
        raise InvalidValueError(f"--deadline {deadline_days:g} days: expected a duration above "
                                "zero, e.g. 30d.")
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
            mfu=mfu_for(system, float(n), given_mfu, measured_mfu, shape.seq_len),
            tier=chosen_tier, tier_chosen=tier is not None, region=pinned,
            price_override=_per(price, system), config=config, inputs=inputs,
            data_region=data_region, run_shape=shape, deadline_days=deadline_days,
            spot_loss=(0.0, f"none on top: {inputs.goodput_source}, its preemptions included")
            if goodput_measured else (SPOT_PREEMPTION_LOSS, SPOT_LOSS_SOURCE)))
    row_tuple = tuple(rows)
    notes = tuple(r.price_note for r in rows if r.price_note)
    return Plan(float(n), float(d), row_tuple, break_evens(row_tuple), chosen_tier,
                tier is not None, pinned, notes, findings.findings(row_tuple), implausible(n, d))


SEQ_LEN_RANGE = (128, 10_000_000)
PLAUSIBLE_PARAMS = (1e6, 1e14)  # a million to a hundred trillion parameters
PLAUSIBLE_TOKENS_PER_PARAM = (0.1, 1e5)  # Chinchilla's optimum is about 20 (Hoffmann et al. 2022)


def check_run_shape(seq_len: int, batch_per_chip: int, remat: str) -> RunShape:
    low, high = SEQ_LEN_RANGE
    if not (isinstance(seq_len, int) and low <= seq_len <= high):
        raise InvalidValueError(f"--seq-len {seq_len}: expected whole tokens per sequence from "
                                f"{low} to {high:,}, e.g. 8192.")
    if not (isinstance(batch_per_chip, int) and batch_per_chip >= 1):
        raise InvalidValueError(f"--batch-per-chip {batch_per_chip}: expected whole sequences "
                                "per chip per step, 1 or more.")
    if remat not in fitting.REMATS:
        raise InvalidValueError(f"--remat {remat!r}: expected {' or '.join(fitting.REMATS)}.")
    return RunShape(seq_len, batch_per_chip, remat)


def implausible(params: float, tokens: float) -> tuple[str, ...]:
    """Warnings (not errors) for sizes no training run has: a unit left off, a typo."""
    out = []
    low, high = PLAUSIBLE_PARAMS
    if not low <= params <= high:
        # too few: a unit left off (70 for 70B); too many has no such likely slip to name
        hint = f"; did you mean {params:g}B?" if params < low else ""
        out.append(f"--params {params:g}: a model of {params:g} parameters is implausible "
                   f"(expected {low:g} to {high:g}){hint}")
    ratio = tokens / params
    few, many = PLAUSIBLE_TOKENS_PER_PARAM
    if not few <= ratio <= many:
        out.append(f"--tokens {tokens:g}: {ratio:g} tokens per parameter is implausible "
                   f"(expected {few:g} to {many:g}; Chinchilla-optimal is about 20)")
    return tuple(out)


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
