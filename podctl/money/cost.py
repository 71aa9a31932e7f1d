"""Prices, estimates before a run, and cost and goodput after it.

Prices are US dollars per chip-hour, by TPU generation, region and tier, from the table
shipped in podctl/data/prices.toml (podctl/money/prices.py; each row with its date and source).
A user's figure wins: `--price` on the command line, else a `[prices]` table in podctl.toml:

    [prices]
    on-demand = 4.20          # v5p, every region
    spot = 2.10
    [prices.us-central1]      # v5p in one region (or one zone: [prices.us-central1-a])
    on-demand = 4.20
    [prices.v6e]              # another generation: the same keys, one level down
    on-demand = 2.70

Every price is asked for with its generation: nothing here defaults to v5p's. A price
that none of them gives is unknown (None), never guessed; commands then say
`price unknown for REGION; pass --price or set [prices] in podctl.toml`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podctl.base.errors import ConfigError, InvalidValueError
from podctl.base.numbers import (  # base/numbers.py owns them; re-exported for cost's callers
    check_mfu as check_mfu,
)
from podctl.base.numbers import (
    check_price as check_price,
)
from podctl.base.numbers import (
    fmt_count as fmt_count,
)
from podctl.base.numbers import (
    fmt_usd as fmt_usd,
)
from podctl.base.numbers import (
    parse_count as parse_count,
)
from podctl.base.settings import load_podctl_toml
from podctl.base.topology import generations, parse_slice
from podctl.cloud.types import SliceInfo
from podctl.money import prices
from podctl.money.prices import TIERS as TIERS  # money/prices.py owns them
from podctl.money.prices import region_of as region_of

DEFAULT_MFU = 0.45  # preflight's assumption; plan takes its MFU from podctl/mfu.py


@dataclass(frozen=True)
class Price:
    usd_per_chip_hour: float
    tier: str
    region: str
    source: str  # a URL, "--price", or "podctl.toml [prices]"
    as_of: str | None  # the date of the figure, when known
    reread: bool = True  # False: a copy of the source, not read from it again (prices.toml)

    def to_json(self) -> dict[str, Any]:
        return {"usd_per_chip_hour": self.usd_per_chip_hour, "tier": self.tier,
                "region": self.region, "source": self.source, "as_of": self.as_of,
                "reread": self.reread}


def unknown_price_message(zone: str | None, generation: str) -> str:
    where = region_of(zone) if zone else "this slice (no zone given)"
    table = "[prices]" if generation == "v5p" else f"[prices.{generation}]"
    if prices.not_published(generation):
        return f"Google publishes no {generation} price; pass --price or set {table} in podctl.toml"
    return f"price unknown for {where}; pass --price or set {table} in podctl.toml"


def generation_of(accelerator_type: str) -> str:
    """'v6e-256' -> 'v6e' (the key of its generations.toml and prices.toml records)."""
    return accelerator_type.strip().lower().rsplit("-", 1)[0]


def price_from_row(row: prices.PriceRow) -> Price:
    return Price(row.usd_per_unit_hour, row.tier, row.region, row.source, row.as_of, row.reread)


def load_price_config(cwd: Path | None = None) -> dict[str, Any]:
    """The [prices] table of podctl.toml in CWD (also under [podctl]), checked."""
    path = (cwd or Path.cwd()) / "podctl.toml"
    data = load_podctl_toml(cwd or Path.cwd())
    prices = data.get("prices", data.get("podctl", {}).get("prices", {}))
    if not isinstance(prices, dict):
        raise ConfigError(f"{path}: [prices] must be a table, e.g. on-demand = 4.20.")
    _check_prices(path, prices, nested=True)
    return prices


def _check_prices(path: Path, prices: dict[str, Any], *, nested: bool) -> None:
    for key, value in prices.items():
        if nested and key in generations() and isinstance(value, dict):
            _check_prices(path, value, nested=False)  # [prices.v6e]: the same keys again
            continue
        for tier, figure in (value.items() if isinstance(value, dict) else [(key, value)]):
            if tier not in TIERS or isinstance(figure, bool) or not isinstance(figure, (int, float)) \
                    or not 0 < figure < float("inf"):  # TOML has inf and nan
                raise ConfigError(f"{path}: [prices] {key} = {value!r}: expected tiers "
                                  f"({', '.join(TIERS)}) with prices in USD per chip-hour above 0.")


def chip_hour_price(zone: str, *, spot: bool, generation: str, override: float | None = None,
                    config: Mapping[str, Any] | None = None,
                    tier: str | None = None) -> Price | None:
    """USD per chip-hour of a GENERATION chip in ZONE (or a region) at TIER (else spot or
    on-demand as SPOT says): OVERRIDE, else CONFIG (podctl.toml's [prices]; read from the
    current directory when None), else the shipped table; None when none of them knows.
    [prices] without a generation key is v5p's."""
    tier = tier or ("spot" if spot else "on-demand")
    region = region_of(zone)
    if override is not None:
        check_price(override)
        return Price(float(override), tier, region, "--price", None)
    config = load_price_config() if config is None else config
    if isinstance(config.get(generation), dict):
        config = config[generation]
    elif generation != "v5p":
        config = {}
    for key in (zone, region):
        figure = config.get(key, {}).get(tier) if isinstance(config.get(key), dict) else None
        if figure is not None:
            return Price(float(figure), tier, region, f"podctl.toml [prices.{key}]", None)
    if isinstance(config.get(tier), (int, float)):
        return Price(float(config[tier]), tier, region, "podctl.toml [prices]", None)
    row = prices.lookup(generation, region, tier)
    return None if row is None else price_from_row(row)


def slice_hourly_cost(accelerator_type: str, zone: str, *, spot: bool,
                      override: float | None = None) -> float | None:
    """USD per hour for the whole slice `KEY-N` in ZONE; None when the price is unknown."""
    price = chip_hour_price(zone, spot=spot, override=override,
                            generation=generation_of(accelerator_type))
    return None if price is None else parse_slice(accelerator_type).chips * price.usd_per_chip_hour


# ---- before: an estimate --------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """One training run on one system (a TPU slice, or GPU machines for comparison):
    6·N·D FLOPs at MFU of the chips' peak."""

    slice_type: str  # the system's name: v5p-4096, h100-512
    chips: int  # TPU chips or GPUs
    params: float
    tokens: float
    mfu: float
    price: Price | None  # per chip (GPU) hour
    peak_flops_per_chip: float
    kind: str = "tpu"  # or "gpu": podctl provisions TPUs only; GPU rows are for comparison
    detail: str = ""  # e.g. "64 x a3-highgpu-8g (8 x H100)"

    @property
    def flops(self) -> float:
        return 6 * self.params * self.tokens

    @property
    def seconds(self) -> float:
        return self.flops / (self.chips * self.peak_flops_per_chip * self.mfu)

    @property
    def hours(self) -> float:
        return self.seconds / 3600

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.price is None else self.chips * self.price.usd_per_chip_hour

    @property
    def total_usd(self) -> float | None:
        return None if self.usd_per_hour is None else self.usd_per_hour * self.hours

    @property
    def usd_per_million_tokens(self) -> float | None:
        return None if self.total_usd is None else self.total_usd / (self.tokens / 1e6)

    def to_json(self) -> dict[str, Any]:
        return {"slice": self.slice_type, "kind": self.kind,
                "provisioned_by_podctl": self.kind == "tpu", "detail": self.detail,
                "chips": self.chips, "params": self.params,
                "tokens": self.tokens, "mfu": self.mfu, "flops": self.flops,
                "peak_flops_per_chip": self.peak_flops_per_chip, "hours": self.hours,
                "days": self.hours / 24, "usd_per_hour": self.usd_per_hour,
                "total_usd": self.total_usd, "usd_per_million_tokens": self.usd_per_million_tokens,
                "price": self.price.to_json() if self.price else None}


def estimate(slice_type: str, *, params: float, tokens: float, mfu: float,
             price: Price | None) -> Estimate:
    if not params > 0 or not tokens > 0:
        raise InvalidValueError("--params and --tokens must be above zero.")
    kind = parse_slice(slice_type)
    return Estimate(kind.name, kind.chips, params, tokens, check_mfu(mfu), price,
                    kind.generation.peak_flops_per_chip,
                    detail=f"{kind.hosts} host{'s' if kind.hosts > 1 else ''}, {kind.topology}")


# ---- after: what a slice or a run cost ------------------------------------------------

def cost_so_far(chips: int, seconds: float, price: Price | None) -> float | None:
    return None if price is None else chips * price.usd_per_chip_hour * seconds / 3600


@dataclass(frozen=True)
class RunCost:
    """A run's bill (its slice's time from start to end) against its training."""

    billed_seconds: float
    chips: int
    price: Price | None
    productive_seconds: float
    tokens: float

    @property
    def usd(self) -> float | None:
        return cost_so_far(self.chips, self.billed_seconds, self.price)

    @property
    def goodput(self) -> float | None:
        return self.productive_seconds / self.billed_seconds if self.billed_seconds > 0 else None

    @property
    def usd_per_million_tokens(self) -> float | None:
        return None if self.usd is None or not self.tokens else self.usd / (self.tokens / 1e6)


@dataclass(frozen=True)
class SliceCost:
    price: Price | None
    usd_per_hour: float | None
    usd_so_far: float | None  # chips x age (from createTime) x price

    def to_json(self) -> dict[str, Any]:
        return {"usd_per_hour": self.usd_per_hour, "cost_usd": self.usd_so_far,
                "price": self.price.to_json() if self.price else None}


def slice_cost(info: SliceInfo, *, override: float | None = None,
               config: Mapping[str, Any] | None = None) -> SliceCost:
    """What a slice (a podctl SliceInfo) costs per hour and has cost since it was
    created; unknown for a generation podctl has no record of."""
    generation = generation_of(info.accelerator_type)
    if generation not in generations() or not info.chips:
        return SliceCost(None, None, None)
    price = chip_hour_price(info.zone, spot=info.tier == "spot", override=override, config=config,
                            generation=generation)
    if price is None:
        return SliceCost(None, None, None)
    # the slices that bill now: an elastic slice that lost one (or deleted it at
    # --grow-deadline) is priced at the slices it holds, its cost so far at that rate
    hourly = info.billed_chips * price.usd_per_chip_hour
    return SliceCost(price, hourly, hourly * info.age_seconds / 3600)
