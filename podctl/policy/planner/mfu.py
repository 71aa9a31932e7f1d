"""MFU per system and model size, from published runs, and the break-even MFU.

podctl/data/mfu.toml holds one figure per system (the keys of prices.toml) and model-size
band, each with where it comes from and the run's size. Beyond that size MFU is taken to
fall 2% per doubling of chips (the rule and its source are in the table's header). `plan`
prints the figure beside its source; `--mfu` and `--mfu-from RUN_ID` replace it (and are
not scaled).

Break-even: system A costs less per token than system B while
    MFU_A >= MFU_B x (price_A / peak_A) / (price_B / peak_B)
(cost per token is price per chip-hour / (peak x MFU), the same 6·N·D on both).
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

SCALING = 0.98  # MFU kept per doubling of chips beyond a published run (see data/mfu.toml)

@dataclass(frozen=True)
class MfuFigure:
    value: float
    source: str  # where the figure comes from: a published run, --mfu, a measured run
    note: str = ""  # what was measured there

    def describe(self) -> str:
        return f"{self.note}; {self.source}" if self.note else self.source


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return tomllib.loads(resources.files("podctl").joinpath("data/mfu.toml").read_text())


def rows() -> list[dict[str, Any]]:
    named = _table().get("sources", {})
    return [{**r, "source": named.get(r["source"], r["source"])} for r in _table()["rows"]]


def scaled(mfu: float, published_chips: int, chips: int) -> float:
    """MFU at CHIPS from a run at PUBLISHED_CHIPS: SCALING per doubling beyond it, no gain below."""
    doublings = max(0.0, math.log2(chips / published_chips)) if chips > 0 else 0.0
    kept: float = SCALING ** doublings  # float ** float is typed Any (it may be complex)
    return mfu * kept


def published(system: str, params: float, chips: int | None = None) -> MfuFigure | None:
    """The published MFU of SYSTEM's band for a model of PARAMS parameters, carried to
    CHIPS (when given) by the scaling rule."""
    bands = sorted((r for r in rows() if r["system"] == system), key=lambda r: r["min_params"])
    chosen = [r for r in bands if r["min_params"] <= params]
    if not chosen:
        return None
    row = chosen[-1]
    value, note = float(row["mfu"]), row.get("note", "")
    if chips is not None and chips > row["chips"]:
        value = scaled(value, row["chips"], chips)
        note = (f"{row['mfu']:g} at {row['chips']} chips ({note}), x {SCALING:g} per doubling "
                f"to {chips}")
    return MfuFigure(round(value, 4), row["source"], note)


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
