"""`podctl plan --compare`: TPU slices of any generation against GPU reference systems.

The question podctl started from: what does training a model cost on TPU v5p against
the GPUs a user would rent instead? Each system gets the same working (6·N·D FLOPs,
chips x peak x MFU, hours, dollars, $ per million tokens). GPU systems are Google
Cloud machines (podctl/data/gpu_systems.toml, each figure with its source and date);
podctl provisions only TPUs, and GPU rows say so.

Per-system settings are written KEY=VALUE,...: `--mfu v5p=0.5,h100=0.4`, where KEY is
a system (`v5p-4096`, `h100-512`), a generation or GPU (`v5p`, `h100`), and a plain
number applies to every system left unnamed (`--mfu 0.5`).
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any
from collections.abc import Mapping

from podctl import cost
from podctl.errors import InvalidSliceError, InvalidValueError
from podctl.topology import parse_slice


@dataclass(frozen=True)
class GpuSystem:
    key: str  # "h100"
    name: str
    machine_type: str
    gpus_per_machine: int
    peak_flops_per_gpu: float
    prices: dict[str, dict[str, Any]]  # region -> {tier: USD per machine-hour, as_of, source}
    sources: dict[str, str]


@functools.lru_cache(maxsize=1)
def gpu_systems() -> dict[str, GpuSystem]:
    text = resources.files("podctl").joinpath("data/gpu_systems.toml").read_text()
    return {key: GpuSystem(key, r["name"], r["machine_type"], r["gpus_per_machine"],
                           float(r["peak_dense_bf16_tflops_per_gpu"]) * 1e12,
                           dict(r.get("prices", {})),
                           {"peak": r["peak_source"], "machine": r["machine_source"]})
            for key, r in tomllib.loads(text).items()}


@dataclass(frozen=True)
class PerSystem:
    """A setting given once for all systems and/or per system: `0.5` or `v5p=0.5,h100=0.4`."""

    default: float | None
    named: dict[str, float]

    def for_system(self, name: str) -> float | None:
        return self.named.get(name, self.named.get(_family(name), self.default))

    def check_names(self, option: str, names: list[str]) -> None:
        """Refuse a key that names no system being compared (a typo would pass unseen)."""
        known = {n.lower() for n in names} | {_family(n.lower()) for n in names}
        for key in self.named:
            if key not in known:
                raise InvalidValueError(f"{option} {key}=...: no system {key!r} in this plan "
                                        f"({', '.join(names)}).")


def _family(name: str) -> str:
    return name.rsplit("-", 1)[0] if name[-1:].isdigit() and "-" in name else name


def parse_per_system(text: str | None, option: str, check: Any) -> PerSystem:
    """'0.5' or 'v5p=0.5,h100=0.4' (or both: '0.45,h100=0.4'); CHECK validates each value."""
    if text is None or not text.strip():
        return PerSystem(None, {})
    default, named = None, {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, eq, value = part.rpartition("=")
        try:
            number = float(value)
        except ValueError:
            raise InvalidValueError(f"{option} {text!r}: expected a number or SYSTEM=NUMBER "
                                    f"pairs, e.g. {option} v5p=0.5,h100=0.4.") from None
        if not eq:
            default = check(number, option)
        else:
            named[key.strip().lower()] = check(number, f"{option} {key.strip()}=")
    return PerSystem(default, named)


def _gpu_estimate(system: GpuSystem, name: str, count_text: str, *, params: float,
                  tokens: float, mfu: float, zone: str | None, spot: bool,
                  price_override: float | None) -> cost.Estimate:
    per = system.gpus_per_machine
    gpus = int(count_text) if count_text.isdigit() else 0
    if count_text and (gpus <= 0 or gpus % per):
        raise InvalidValueError(f"{name!r}: N in {system.key}-N counts GPUs, a multiple of "
                                f"{per} ({system.machine_type} has {per}), e.g. {system.key}-{per * 64}.")
    gpus = gpus or per
    tier = "spot" if spot else "on-demand"
    region = cost.region_of(zone) if zone else "-"
    price = None
    if price_override is not None:
        price = cost.Price(cost.check_price(price_override), tier, region, "--price", None)
    elif tier in system.prices.get(region, {}):
        row = system.prices[region]
        price = cost.Price(float(row[tier]) / per, tier, region, row["source"], row.get("as_of"))
    label = f"{system.key}-{gpus}"
    return cost.Estimate(label, gpus, params, tokens, mfu, price, system.peak_flops_per_gpu,
                         kind="gpu", detail=f"{gpus // per} x {system.machine_type}")


def estimate_system(name: str, *, params: float, tokens: float, mfu: float, zone: str | None,
                    spot: bool, price_override: float | None,
                    config: Mapping[str, Any] | None = None) -> cost.Estimate:
    """One row of the comparison: a TPU slice (`v6e-256`) or a GPU system (`h100-512`)."""
    text = name.strip().lower()
    family, dash, count = text.rpartition("-")
    if not dash:
        family, count = text, ""
    if family in gpu_systems():
        system = gpu_systems()[family]
        return _gpu_estimate(system, name, count, params=params, tokens=tokens,
                             mfu=cost.check_mfu(mfu), zone=zone, spot=spot,
                             price_override=price_override)
    try:
        kind = parse_slice(text)
    except InvalidSliceError as e:
        raise InvalidSliceError(f"{e} GPU reference systems: "
                                f"{', '.join(f'{k}-N (N GPUs)' for k in gpu_systems())}.") from e
    price = None
    if zone or price_override is not None:
        price = cost.chip_hour_price(zone or "-", spot=spot, override=price_override,
                                     config=config, generation=kind.generation.key)
    return cost.estimate(kind.name, params=params, tokens=tokens, mfu=mfu, price=price)


def price_note(e: cost.Estimate, zone: str | None) -> str | None:
    """What to do about a row whose price is unknown."""
    if e.price is not None:
        return None
    key = e.slice_type.rsplit("-", 1)[0]
    if e.kind == "gpu":
        return (f"{e.slice_type}: price unknown for {cost.region_of(zone) if zone else 'this zone'}; "
                f"pass --price {key}=USD_PER_GPU_HOUR")
    return f"{e.slice_type}: {cost.unknown_price_message(zone, key)} (or --price {key}=USD)"


def same_inputs(estimates: list[cost.Estimate]) -> bool:
    return all(math.isclose(e.flops, estimates[0].flops) for e in estimates)
