"""MFU per system from published throughput, its band, and the break-even MFU.

podctl/data/mfu.toml holds published training runs (tokens/s per chip, or the source's
model TFLOP/s per chip), each converted to MFU by one formula (FORMULA, PaLM's count):

    flops per token = 6·N + 12·L·H·Q·T      mfu = tokens/s per chip x flops per token / peak

`plan` prices its run with the same formula at its own sequence length (model_flops), so a
figure measured at 4K and a plan at 32K agree. For a plan, `published` picks the system's
single-slice run nearest the model's size (then sequence length, then chips) as the central
figure and every run within 2x of that size and 4x of its sequence length as its band; across
TPU slices it applies the measured multislice column (inside one slice MFU is flat, as
MaxText's own rows show); a GPU
count outside the published ones is held at the nearest. Each step is said in the figure's
note. `--mfu` and `--mfu-from RUN_ID` replace it (with no band).

Break-even: system A costs less per token than system B while
    MFU_A >= MFU_B x (price_A / peak_A) / (price_B / peak_B)
(cost per token is price per chip-hour / (peak x MFU), the same FLOPs on both).
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

FORMULA = ("MFU = tokens/s per chip x (6·N + 12·L·H·Q·T) / peak FLOP/s per chip (PaLM's "
           "model FLOPs, attention without the causal halving)")
BAND_SIZE_FACTOR = 2.0  # the band: runs within 2x of the central run's model size
# ... and within 4x of its sequence length: Llama 3's 38% was measured at 131,072 tokens with
# context parallelism, a different job from an 8K plan (its table: 41-43% at 8,192)
BAND_SEQ_FACTOR = 4.0
FLAT_IN_SLICE = ("flat inside one slice (MaxText: 128B at 68.68% on v5p-256, 68.83% on "
                 "v5p-512)")
DEFAULT_SEQ_LEN = 8192  # Llama 3's pre-training sequence length (its paper, section 3.4)
DCN_FALLBACK = "v5litepod"  # the one published multislice table to 32 slices (v5e)


def attention_flops_per_token(layers: int, width: int, seq_len: int) -> float:
    """12·L·H·Q·T: attention's score and value matmuls, forward and backward, per token
    (WIDTH = heads x head dim), without the causal halving."""
    return 12.0 * layers * width * seq_len


def flops_per_token(params: float, layers: int, width: int, seq_len: int) -> float:
    return 6.0 * params + attention_flops_per_token(layers, width, seq_len)


# Llama 3's shapes (The Llama 3 Herd of Models, Table 3): layers, model width.
KNOWN_SHAPES = {8e9: (32, 4096), 70e9: (80, 8192), 405e9: (126, 16384)}
SHAPE_RULE = ("Llama 3's layers and width for 8B, 70B, 405B (within 15%); else width = "
              "128 x layers with N = 12·L·width² (Llama 3's aspect)")


def model_shape(params: float) -> tuple[int, int]:
    """(layers, width) of a dense decoder of PARAMS parameters (SHAPE_RULE)."""
    for size, shape in KNOWN_SHAPES.items():
        if abs(params / size - 1) <= 0.15:
            return shape
    layers = max(1, round((params * 128 / 12) ** (1 / 3) / 128))
    return layers, round(math.sqrt(params / (12 * layers)))


@dataclass(frozen=True)
class PublishedRun:
    """One row of data/mfu.toml: a published training run and its MFU."""

    system: str
    model: str
    params: float
    seq_len: int
    chips: int
    slices: int
    mfu: float  # as the table states it (the formula's result, 4 decimals)
    source: str  # the full text of its source
    quote: str
    basis: str = ""  # "" (tokens/s through FORMULA) or whose FLOP count the figure is
    layers: int | None = None
    width: int | None = None  # heads x head dim
    tokens_per_s_per_chip: float | None = None
    model_tflops_per_chip: float | None = None
    source_mfu: float | None = None

    def recomputed(self, peak_flops_per_chip: float) -> float:
        """The MFU from this row's own throughput fields (FORMULA), unrounded."""
        if self.tokens_per_s_per_chip is not None:
            assert self.layers is not None and self.width is not None
            per_token = flops_per_token(self.params, self.layers, self.width, self.seq_len)
            return self.tokens_per_s_per_chip * per_token / peak_flops_per_chip
        if self.model_tflops_per_chip is not None:
            return self.model_tflops_per_chip * 1e12 / peak_flops_per_chip
        assert self.source_mfu is not None
        return self.source_mfu

    def label(self) -> str:
        where = f"{self.chips} chips" + (f" in {self.slices} slices" if self.slices > 1 else "")
        return f"{self.model} at {self.seq_len} tokens on {where}: {self.mfu:.4g}"


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return tomllib.loads(resources.files("podctl").joinpath("data/mfu.toml").read_text())


@functools.lru_cache(maxsize=1)
def runs() -> tuple[PublishedRun, ...]:
    table = _table()
    named, bases = table.get("sources", {}), table.get("basis", {})
    out = []
    for r in table["runs"]:
        width = r["heads"] * r["head_dim"] if "heads" in r else None
        out.append(PublishedRun(
            r["system"], r["model"], float(r["params"]), int(r["seq_len"]), int(r["chips"]),
            int(r.get("slices", 1)), float(r["mfu"]), named.get(r["source"], r["source"]),
            r["quote"], bases.get(r.get("basis", ""), r.get("basis", "")), r.get("layers"),
            width, r.get("tokens_per_s_per_chip"), r.get("model_tflops_per_chip"),
            r.get("source_mfu")))
    return tuple(out)


@dataclass(frozen=True)
class MfuFigure:
    value: float
    source: str  # where the figure comes from: a published run, --mfu, a measured run
    note: str = ""  # what was measured there, and how it was carried to this plan
    low: float | None = None  # the band's ends (None: no band, e.g. --mfu)
    high: float | None = None
    measured_chips: int | None = None  # the central run's chips (GPUs), when published

    @property
    def band(self) -> tuple[float, float]:
        return (self.value if self.low is None else self.low,
                self.value if self.high is None else self.high)

    @property
    def has_band(self) -> bool:
        low, high = self.band
        return high > low

    def describe(self) -> str:
        return f"{self.note}; {self.source}" if self.note else self.source


def _distance(a: float, b: float) -> float:
    return abs(math.log(a / b)) if a > 0 and b > 0 else math.inf


def dcn_ratio(system: str, params: float, slices: int,
              chips_per_slice: int | None = None) -> tuple[float, str]:
    """MFU kept across SLICES slices over DCN: the measured multislice column of the model
    size nearest PARAMS (then of the slice size nearest CHIPS_PER_SLICE: MaxText's 128B keeps
    96.6% across 2 v5p-256 but 86.7% across 2 v5p-512), SYSTEM's own where it has SLICES,
    else v5e's (DCN_FALLBACK)."""
    if slices <= 1:
        return 1.0, FLAT_IN_SLICE

    def columns(family: str) -> dict[tuple[str, int, int], tuple[PublishedRun, PublishedRun]]:
        # keyed by slice size too: one model size can be published on several (v5p's 128B)
        mine = [r for r in runs() if r.system == family]
        pairs = {}
        for multi in (r for r in mine if r.slices > 1):
            one = next((r for r in mine if r.model == multi.model and r.slices == 1
                        and r.chips * multi.slices == multi.chips), None)
            if one is not None:
                pairs[(multi.model, multi.slices, one.chips)] = (one, multi)
        return pairs

    own = {k: v for k, v in columns(system).items() if k[1] == slices}
    family, pairs = (system, own) if own else (DCN_FALLBACK, columns(DCN_FALLBACK))
    if not pairs:
        return 1.0, "multislice not published: flat"
    counts = sorted({k[1] for k in pairs})
    wanted = next((k for k in counts if k >= slices), counts[-1])
    per_slice = chips_per_slice or 0
    one, multi = min((v for k, v in pairs.items() if k[1] == wanted),
                     key=lambda v: (round(_distance(v[0].params, params), 9),
                                    round(_distance(v[0].chips, per_slice), 9)))
    ratio = multi.mfu / one.mfu
    held = f"; beyond the published {wanted} slices held at {wanted}'s" if wanted < slices else ""
    whose = "" if family == system else f" ({system}'s not published: {family}'s)"
    return ratio, (f"x {ratio:.4f} for {slices} slices over DCN{whose}: {one.model} "
                   f"{one.mfu:.4g} -> {multi.mfu:.4g} at {wanted} slices of {one.chips} "
                   f"chips{held}")


def published(system: str, params: float, chips: int | None = None, *, slices: int = 1,
              seq_len: int = DEFAULT_SEQ_LEN, kind: str = "tpu") -> MfuFigure | None:
    """SYSTEM's MFU for a model of PARAMS on CHIPS (SLICES slices) at SEQ_LEN, with its band."""
    mine = [r for r in runs() if r.system == system]
    if not mine:
        return None
    singles = [r for r in mine if r.slices == 1] or mine
    chips = chips or max(r.chips for r in singles)
    per_slice = chips // max(slices, 1)  # a single-slice run is matched to one of the slices
    central = min(singles, key=lambda r: (round(_distance(r.params, params), 9),
                                          round(_distance(r.seq_len, seq_len), 9),
                                          round(_distance(r.chips, per_slice), 9)))
    band = [r for r in singles
            if _distance(r.params, central.params) <= math.log(BAND_SIZE_FACTOR) + 1e-9
            and _distance(r.seq_len, central.seq_len) <= math.log(BAND_SEQ_FACTOR) + 1e-9]
    if kind == "tpu":
        factor, how = dcn_ratio(system, params, slices, per_slice)
    else:
        factor = 1.0
        counts = sorted({r.chips for r in singles})
        how = ("published at this GPU count" if chips in counts else
               f"published at {', '.join(f'{c:,}' for c in counts)} GPUs: held at the nearest")
    value = central.mfu * factor
    low, high = (min(r.mfu for r in band) * factor, max(r.mfu for r in band) * factor)
    spread = (f"band {low:.3f}-{high:.3f} from {len(band)} published runs within "
              f"{BAND_SIZE_FACTOR:g}x of {central.params / 1e9:g}B and {BAND_SEQ_FACTOR:g}x of "
              f"{central.seq_len:,} tokens" if len(band) > 1
              else "no band: one published run")
    note = f"{central.label()} ({central.quote}); {how}; {spread}"
    if central.basis:
        note += f"; {central.basis}"
    return MfuFigure(round(value, 4), central.source, note, round(low, 4), round(high, 4),
                     central.chips)


@dataclass(frozen=True)
class BreakEven:
    """SYSTEM is cheaper per token than AGAINST while its MFU >= MFU_NEEDED."""

    system: str
    against: str
    against_mfu: float
    mfu_needed: float

    @property
    def reachable(self) -> bool:
        return self.mfu_needed <= 1.0

    def sentence(self) -> str:
        if not self.reachable:
            return (f"{self.system} is never cheaper per token than {self.against} at MFU "
                    f"{self.against_mfu:g}: it would need MFU {self.mfu_needed:.2f} > 1")
        return (f"{self.system} is cheaper per token than {self.against} (at MFU "
                f"{self.against_mfu:g}) while its MFU >= {self.mfu_needed:.3f}")

    def to_json(self) -> dict[str, Any]:
        return {"system": self.system, "against": self.against, "against_mfu": self.against_mfu,
                "mfu_needed": self.mfu_needed, "reachable": self.reachable,
                "sentence": self.sentence()}


def break_even(system: str, usd_per_chip_hour: float, peak: float, against: str,
               against_usd_per_chip_hour: float, against_peak: float,
               against_mfu: float) -> BreakEven:
    needed = against_mfu * (usd_per_chip_hour / peak) / (against_usd_per_chip_hour / against_peak)
    return BreakEven(system, against, against_mfu, needed)
