"""The systems `podctl plan` compares: TPU slices of any generation and GPU reference systems.

The question podctl started from: what does training a model cost on TPU v5p against
the GPUs a user would rent instead? Each system gets the same working (6·N·D FLOPs,
chips x peak x MFU, hours, dollars, $ per million tokens; podctl/policy/planner/). GPU systems
are Google Cloud machines (podctl/data/gpu_systems.toml, each figure with its source and
date); podctl provisions only TPUs, and GPU rows say so.

Per-system settings are written KEY=VALUE,...: `--mfu v5p=0.5,h100=0.4`, where KEY is
a system (`v5p-4096`, `h100-512`), a generation or GPU (`v5p`, `h100`), and a plain
number applies to every system left unnamed (`--mfu 0.5`).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from podctl.base.errors import InvalidSliceError, InvalidValueError
from podctl.base.numbers import plain_number
from podctl.base.topology import parse_multislice


@dataclass(frozen=True)
class GpuSystem:
    key: str  # "h100"
    name: str
    machine_type: str
    gpus_per_machine: int
    peak_flops_per_gpu: float
    hbm_bytes_per_gpu: float
    sources: dict[str, str]


@functools.lru_cache(maxsize=1)
def gpu_systems() -> dict[str, GpuSystem]:
    text = resources.files("podctl").joinpath("data/gpu_systems.toml").read_text()
    return {key: GpuSystem(key, r["name"], r["machine_type"], r["gpus_per_machine"],
                           float(r["peak_dense_bf16_tflops_per_gpu"]) * 1e12,
                           float(r["hbm_gb_per_gpu"]) * 1e9,
                           {"peak": r["peak_source"], "machine": r["machine_source"]})
            for key, r in tomllib.loads(text).items()}


@dataclass(frozen=True)
class System:
    """One system of a plan: a TPU slice (or several, multislice) or GPU machines."""

    name: str  # as podctl prints it: "v5p-4096", "v6e-256 x 2", "h100-1024"
    family: str  # the key of prices.toml, mfu.toml and --mfu: "v5p", "h100"
    kind: str  # "tpu" or "gpu" (podctl provisions only TPUs; GPU rows are for comparison)
    chips: int  # TPU chips or GPUs, every slice counted
    num_slices: int
    peak_flops_per_chip: float
    hbm_bytes_per_chip: float  # HBM counted in GB (10^9 bytes) as the record gives it
    detail: str  # "256 hosts, 8x16x16", "128 x a3-highgpu-8g"
    slice_type: str  # one slice's accelerator type (or the GPU system's name)

    @property
    def hbm_bytes(self) -> float:
        return self.chips * self.hbm_bytes_per_chip


def _gpu_system(system: GpuSystem, name: str, count_text: str, num_slices: int) -> System:
    per = system.gpus_per_machine
    gpus = int(count_text) if count_text.isdigit() else 0
    if count_text and (gpus <= 0 or gpus % per):
        raise InvalidValueError(f"{name!r}: N in {system.key}-N counts GPUs, a multiple of "
                                f"{per} ({system.machine_type} has {per}), e.g. {system.key}-{per * 64}.")
    if num_slices != 1:
        raise InvalidValueError(f"--num-slices is for TPU slices; {system.key}-N already counts "
                                f"every GPU (e.g. {system.key}-{per * 128}).")
    gpus = gpus or per
    label = f"{system.key}-{gpus}"
    return System(label, system.key, "gpu", gpus, 1, system.peak_flops_per_gpu,
                  system.hbm_bytes_per_gpu, f"{gpus // per} x {system.machine_type}", label)


def resolve(name: str, num_slices: int = 1) -> System:
    """A system by name: `v6e-256` (with NUM_SLICES slices), `h100-512`, `h100` (one machine)."""
    text = name.strip().lower()
    family, dash, count = text.rpartition("-")
    if not dash:
        family, count = text, ""
    if family in gpu_systems():
        return _gpu_system(gpu_systems()[family], name, count, num_slices)
    try:
        multi = parse_multislice(text, num_slices)
    except InvalidSliceError as e:
        if "--num-slices" in str(e) or "multislice" in str(e):
            raise
        raise InvalidSliceError(f"{e} GPU reference systems: "
                                f"{', '.join(f'{k}-N (N GPUs)' for k in gpu_systems())}.") from e
    kind = multi.slice_type
    hosts = kind.hosts * num_slices
    label = kind.name if num_slices == 1 else f"{kind.name} x {num_slices}"
    return System(label, kind.generation.key, "tpu", multi.chips, num_slices,
                  kind.generation.peak_flops_per_chip, kind.generation.hbm_gib_per_chip * 1e9,
                  f"{hosts} host{'s' if hosts > 1 else ''}, {kind.topology}"
                  + (f", {num_slices} slices" if num_slices > 1 else ""), kind.name)


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
        number = plain_number(value)  # ASCII digits, finite (no '０.５', no 'nan')
        if number is None:
            raise InvalidValueError(f"{option} {text!r}: expected a number or SYSTEM=NUMBER "
                                    f"pairs, e.g. {option} v5p=0.5,h100=0.4.")
        name = key.strip().lower() if eq else "(all systems)"
        if (name in named) if eq else (default is not None):  # which would win is a guess
            raise InvalidValueError(f"{option} {text!r}: {name} is given twice; give each "
                                    "system (and the figure for all) once.")
        if not eq:
            default = check(number, option)
        else:
            named[name] = check(number, f"{option} {key.strip()}=")
    return PerSystem(default, named)
