"""Fit before price: does training the model fit in the system's memory?

The rule of thumb (stated wherever it is used): training with Adam keeps bf16 weights
(2 bytes per parameter), bf16 gradients (2), fp32 master weights (4) and two fp32 Adam
moments (8): 16 bytes per parameter, sharded over every chip; activations (with
rematerialization) and XLA's workspace are taken as a further 25%: 20 bytes per
parameter against chips x HBM. `podctl preflight`'s compiled figure replaces the rule
where one is given (`plan --from-preflight`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from podctl.policy.compare import System, gpu_systems

STATE_BYTES_PER_PARAM = 16  # bf16 weights + bf16 grads + fp32 master + 2 fp32 Adam moments
ACTIVATION_SHARE = 0.25  # activations and workspace, on top of the state
RULE = (f"{STATE_BYTES_PER_PARAM} bytes/param (bf16 weights and grads, fp32 master and Adam "
        f"moments) + {ACTIVATION_SHARE:.0%} for activations")


def training_bytes(params: float) -> float:
    return params * STATE_BYTES_PER_PARAM * (1 + ACTIVATION_SHARE)


@dataclass(frozen=True)
class Fit:
    needed_bytes: float
    capacity_bytes: float
    rule: str
    suggestion: str | None = None  # the smallest system of the same kind that fits

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.capacity_bytes

    def sentence(self, name: str) -> str:
        have = f"{self.needed_bytes / 1e12:,.2f} TB needed, {self.capacity_bytes / 1e12:,.2f} TB of HBM"
        if self.fits:
            return f"{name} fits: {have} ({self.rule})"
        better = f"; smallest that fits: {self.suggestion}" if self.suggestion else ""
        return f"{name} does not fit in memory: {have} ({self.rule}){better}"

    def to_json(self) -> dict[str, Any]:
        return {"fits": self.fits, "needed_bytes": self.needed_bytes,
                "capacity_bytes": self.capacity_bytes, "rule": self.rule,
                "suggestion": self.suggestion}


def smallest_fitting(system: System, needed: float) -> str | None:
    """The smallest slice (or slices) of SYSTEM's generation, or GPU count, that holds NEEDED."""
    if system.kind == "gpu":
        gpu = gpu_systems()[system.family]
        per = gpu.gpus_per_machine
        gpus = max(per, math.ceil(needed / gpu.hbm_bytes_per_gpu / per) * per)
        return f"{gpu.key}-{gpus}"
    from podctl.base.topology import generation

    gen = generation(system.family)
    per_chip = system.hbm_bytes_per_chip
    for size in gen.valid_sizes(documented_only=True):
        chips = size // gen.cores_per_chip if gen.size_unit == "cores" else size
        if chips * per_chip >= needed:
            return f"{gen.key}-{size}"
    biggest = gen.max_chips
    slices = math.ceil(needed / (biggest * per_chip))
    limit = gen.multislice_max_chips
    if limit is not None and slices * biggest > limit:
        return None
    return f"{gen.type_name(biggest)} --num-slices {slices}"


def check(system: System, params: float, *, needed: float | None = None,
          rule: str = RULE) -> Fit:
    """SYSTEM against PARAMS by the rule of thumb, or against NEEDED bytes (a compiled figure)."""
    need = training_bytes(params) if needed is None else needed
    fit = Fit(need, system.hbm_bytes, rule)
    if fit.fits:
        return fit
    return Fit(need, system.hbm_bytes, rule, smallest_fitting(system, need))
