"""Fit before price: does training the model fit in each chip's memory?

Per chip, with the model state sharded over every chip (FSDP, as MaxText trains):

    state        16 bytes/param: bf16 weights (2) and grads (2), fp32 master weights (4)
                 and two fp32 Adam moments (8) (ZeRO, Rajbhandari et al. 2019, section 3.1)
    buffer        4 bytes/param: the fp32 gradient buffer of the update (ZeRO, section 3.2,
                 "temporary buffers")
    activations  tokens per chip x width x layers x 2 bytes with full rematerialization (each
                 layer's bf16 input kept), x 34 bytes without (Korthikanti et al. 2022, eq. 1,
                 its 5·a·s/h attention term dropped: flash attention keeps no score matrix)

against the chip's HBM. `podctl preflight`'s compiled figure replaces the rule where one is
given (`plan --from-preflight`). Checked against MaxText's published Llama 2 70B run on
v6e-256 (4 sequences of 4,096 per chip, remat full: it fits) and its Llama 3.1 70B and 405B
runs there, which keep each layer's input in host memory (the rule: not in HBM alone) in
tests/unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from podctl.policy.compare import System, gpu_systems

STATE_BYTES_PER_PARAM = 16  # bf16 weights + bf16 grads + fp32 master + 2 fp32 Adam moments
BUFFER_BYTES_PER_PARAM = 4  # the fp32 gradient buffer of the optimizer step
ACTIVATION_BYTES = {"full": 2, "none": 34}  # per token x width x layer, by remat policy
REMATS = tuple(ACTIVATION_BYTES)
DEFAULT_REMAT = "full"
DEFAULT_BATCH_PER_CHIP = 1  # sequences per chip per step
SOURCES = ("ZeRO https://arxiv.org/abs/1910.02054 (16 bytes/param of state; fp32 buffers); "
           "Korthikanti et al. https://arxiv.org/abs/2205.05198 (eq. 1: 34·s·b·h bytes per "
           "layer without recomputation)")


def state_bytes(params: float) -> float:
    return params * (STATE_BYTES_PER_PARAM + BUFFER_BYTES_PER_PARAM)


def training_bytes(params: float) -> float:
    """State and buffer of PARAMS, every chip together (activations are per chip: Shape)."""
    return state_bytes(params)


@dataclass(frozen=True)
class Shape:
    """What the activations depend on: the model's layers and width, tokens per chip, remat."""

    layers: int
    width: int
    seq_len: int
    batch_per_chip: int = DEFAULT_BATCH_PER_CHIP
    remat: str = DEFAULT_REMAT

    @property
    def tokens_per_chip(self) -> int:
        return self.seq_len * self.batch_per_chip

    @property
    def activation_bytes_per_chip(self) -> float:
        return float(self.tokens_per_chip * self.width * self.layers * ACTIVATION_BYTES[self.remat])

    def rule(self) -> str:
        return (f"{STATE_BYTES_PER_PARAM + BUFFER_BYTES_PER_PARAM} bytes/param of state and "
                f"fp32 buffer over every chip + activations {self.tokens_per_chip:,} tokens/chip "
                f"x width {self.width:,} x {self.layers} layers x "
                f"{ACTIVATION_BYTES[self.remat]} bytes (remat {self.remat})")


@dataclass(frozen=True)
class Fit:
    needed_bytes: float  # every chip together
    capacity_bytes: float
    rule: str
    suggestion: str | None = None  # the smallest system of the same kind that fits
    state_per_chip: float = 0.0
    activations_per_chip: float = 0.0
    hbm_per_chip: float = 0.0
    remat: str = DEFAULT_REMAT

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.capacity_bytes

    @property
    def full(self) -> float:
        return self.needed_bytes / self.capacity_bytes if self.capacity_bytes else math.inf

    def sentence(self, name: str) -> str:
        if self.hbm_per_chip:
            have = (f"{(self.state_per_chip + self.activations_per_chip) / 1e9:,.1f} GB per chip "
                    f"needed ({self.state_per_chip / 1e9:,.1f} state + "
                    f"{self.activations_per_chip / 1e9:,.1f} activations), "
                    f"{self.hbm_per_chip / 1e9:,.0f} GB of HBM ({self.full:.0%} full)")
        else:
            have = (f"{self.needed_bytes / 1e12:,.2f} TB needed, "
                    f"{self.capacity_bytes / 1e12:,.2f} TB of HBM")
        if self.fits:
            return f"{name} fits: {have} ({self.rule})"
        better = f"; smallest that fits: {self.suggestion}" if self.suggestion else ""
        if self.hbm_per_chip and self.activations_per_chip >= self.hbm_per_chip:
            # with remat full already, what is left is host memory: MaxText's Llama 3.1 405B
            # on v6e-256 (8,192 per chip) offloads each layer's input there, which this rule
            # does not model (benchmarks/maxtext_trillium_model_configs.py, llama3_1_405b_*)
            other = ("or keep each layer's input in host memory (MaxText's 405B on v6e-256 "
                     "offloads it: decoder_layer_input=offload; not modelled here)"
                     if self.remat == "full" else "or --remat full")
            better = (f"; the activations alone ({self.activations_per_chip / 1e9:,.1f} GB) exceed "
                      f"a chip's HBM at any size: lower --seq-len or --batch-per-chip, {other}")
        return f"{name} does not fit in memory: {have} ({self.rule}){better}"

    def to_json(self) -> dict[str, Any]:
        return {"fits": self.fits, "needed_bytes": self.needed_bytes,
                "capacity_bytes": self.capacity_bytes, "rule": self.rule,
                "suggestion": self.suggestion, "state_bytes_per_chip": self.state_per_chip,
                "activation_bytes_per_chip": self.activations_per_chip,
                "hbm_bytes_per_chip": self.hbm_per_chip}


def chips_needed(state: float, activations_per_chip: float, hbm_per_chip: float) -> float:
    """The fewest chips whose HBM holds STATE sharded plus each chip's activations."""
    room = hbm_per_chip - activations_per_chip
    return math.inf if room <= 0 else state / room


def smallest_fitting(system: System, state: float, activations_per_chip: float = 0.0) -> str | None:
    """The smallest slice (or slices) of SYSTEM's generation, or GPU count, that holds it."""
    per_chip = system.hbm_bytes_per_chip
    need = chips_needed(state, activations_per_chip, per_chip)
    if math.isinf(need):
        return None
    if system.kind == "gpu":
        gpu = gpu_systems()[system.family]
        per = gpu.gpus_per_machine
        return f"{gpu.key}-{max(per, math.ceil(need / per) * per)}"
    from podctl.base.topology import generation

    gen = generation(system.family)
    for size in gen.valid_sizes(documented_only=True):
        chips = size // gen.cores_per_chip if gen.size_unit == "cores" else size
        if chips >= need:
            return f"{gen.key}-{size}"
    biggest = gen.max_chips
    slices = math.ceil(need / biggest)
    limit = gen.multislice_max_chips
    if limit is not None and slices * biggest > limit:
        return None
    return f"{gen.type_name(biggest)} --num-slices {slices}"


def check(system: System, params: float, shape: Shape | None = None, *,
          needed: float | None = None, rule: str | None = None) -> Fit:
    """SYSTEM against PARAMS (and SHAPE's activations) by the rule, or against NEEDED bytes
    (a compiled figure, every chip together)."""
    if needed is not None:
        fit = Fit(needed, system.hbm_bytes, rule or "compiled")
        return fit if fit.fits else Fit(needed, system.hbm_bytes, fit.rule,
                                        smallest_fitting(system, needed))
    state = state_bytes(params)
    acts = shape.activation_bytes_per_chip if shape else 0.0
    text = shape.rule() if shape else (f"{STATE_BYTES_PER_PARAM + BUFFER_BYTES_PER_PARAM} "
                                       "bytes/param of state and fp32 buffer")
    remat = shape.remat if shape else DEFAULT_REMAT
    fit = Fit(state + acts * system.chips, system.hbm_bytes, text, None,
              state / system.chips, acts, system.hbm_bytes_per_chip, remat)
    if fit.fits:
        return fit
    return Fit(fit.needed_bytes, fit.capacity_bytes, text, smallest_fitting(system, state, acts),
               fit.state_per_chip, acts, fit.hbm_per_chip, remat)
