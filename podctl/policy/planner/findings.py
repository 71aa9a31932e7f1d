"""What a comparison says about itself, in sentences `plan` prints under its table.

- A ranking that flips inside the MFU bands: system A is cheaper (or faster) than B at the
  central MFU, but A at its band's low end costs more than B at its band's high end.
- Systems more than SPREAD apart in days or chips: the cheapest row may be the one that
  takes weeks longer; the equal-chip plan is offered (`--slice TYPE --num-slices K`, or
  the GPU count) so that money and time are compared at the same size.
- Rows that miss `--deadline`.
- GPU rows whose MFU was published only for far fewer GPUs (B200: 8), held at their size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from podctl.base.numbers import fmt_usd

if TYPE_CHECKING:
    from podctl.policy.planner.core import SystemPlan

SPREAD = 3.0  # systems this many times apart in days or chips are flagged


def _cost(r: SystemPlan) -> float:
    return r.total_usd or 0.0


def _cost_band(r: SystemPlan) -> tuple[float | None, float | None]:
    return r.band_totals


def _days(r: SystemPlan) -> float:
    return r.days


def _days_band(r: SystemPlan) -> tuple[float | None, float | None]:
    return r.band_days


def _fmt_days(days: float) -> str:
    return f"{days:,.1f} days"


def _fmt_usd(usd: float) -> str:
    return fmt_usd(usd)


def flips(rows: Sequence[SystemPlan]) -> list[str]:
    """Pairs whose order by cost, or by days, can turn over inside the MFU bands."""
    out = []
    measures: list[tuple[str, Callable[[SystemPlan], float],
                         Callable[[SystemPlan], tuple[float | None, float | None]],
                         Callable[[float], str]]] = [
        ("cost", _cost, _cost_band, _fmt_usd), ("days", _days, _days_band, _fmt_days)]
    for what, key, band, fmt in measures:
        pool = [r for r in rows if r.total_usd is not None] if what == "cost" else list(rows)
        ranked = sorted(pool, key=key)
        for i, a in enumerate(ranked):
            for b in ranked[i + 1:]:
                a_worst, b_best = band(a)[1], band(b)[0]
                if a_worst is not None and b_best is not None and a_worst > b_best:
                    out.append(f"the ranking by {what} can flip inside the MFU bands: "
                               f"{a.system.name} {fmt(key(a))} {_range(band(a), fmt)} against "
                               f"{b.system.name} {fmt(key(b))} {_range(band(b), fmt)}")
    return out


def _range(ends: tuple[float | None, float | None], fmt: Callable[[float], str]) -> str:
    low, high = ends
    if low is None or high is None or low == high:
        return "(no band)"
    return f"({fmt(low)} to {fmt(high)})"


def equal_chip_plan(row: SystemPlan, chips: int) -> str | None:
    """The same system at CHIPS: more slices of its type, or more GPUs."""
    s = row.system
    if s.chips >= chips:
        return None
    if s.kind == "gpu":
        return f"--slice {s.family}-{chips}"
    from podctl.base.topology import generation

    per_slice = s.chips // s.num_slices
    k = math.ceil(chips / per_slice)
    limit = generation(s.family).multislice_max_chips
    if limit is not None and k * per_slice > limit:
        return None
    return f"--slice {s.slice_type} --num-slices {k} ({k * per_slice:,} chips)"


def spread(rows: Sequence[SystemPlan]) -> list[str]:
    if len(rows) < 2:
        return []
    fast, slow = min(rows, key=lambda r: r.days), max(rows, key=lambda r: r.days)
    few, many = min(rows, key=lambda r: r.system.chips), max(rows, key=lambda r: r.system.chips)
    days_apart, chips_apart = slow.days / fast.days, many.system.chips / few.system.chips
    if days_apart <= SPREAD and chips_apart <= SPREAD:
        return []
    out = [f"time differs {days_apart:.1f}x: {fast.system.name} trains in {fast.days:,.1f} "
           f"days, {slow.system.name} in {slow.days:,.1f}; chips differ {chips_apart:.1f}x "
           f"({few.system.chips:,} against {many.system.chips:,}): the cheapest row is not "
           "the same job done as fast"]
    first = rows[0]
    for r in rows[1:]:
        days_x, chips_x = r.days / first.days, r.system.chips / first.system.chips
        if max(days_x, 1 / days_x) > SPREAD or max(chips_x, 1 / chips_x) > SPREAD:
            out.append(f"{r.system.name} takes {days_x:.1f}x the days of {first.system.name} "
                       f"({r.days:,.1f} against {first.days:,.1f}) on {chips_x:g}x the chips "
                       f"({r.system.chips:,} against {first.system.chips:,})")
    target = many.system.chips
    offers = [f"{r.system.name}: {o}" for r in rows if (o := equal_chip_plan(r, target))]
    if offers:
        out.append(f"at equal chips ({target:,}): " + "; ".join(offers))
    return out


def missed(rows: Sequence[SystemPlan]) -> list[str]:
    late = [r for r in rows if r.misses_deadline]
    if not late:
        return []
    deadline = late[0].deadline_days or 0.0
    return [f"misses the {deadline:g}-day deadline: "
            + ", ".join(f"{r.system.name} ({r.days:,.1f} days)" for r in late)]


def unscaled(rows: Sequence[SystemPlan]) -> list[str]:
    """GPU rows whose MFU was measured on far fewer GPUs (more than SPREAD x 2 fewer): no
    published run says how it scales, so the figure is held, and the row leans on that."""
    out = []
    for r in rows:
        measured = r.mfu.measured_chips
        if r.system.kind == "gpu" and measured and r.system.chips > 2 * SPREAD * measured:
            out.append(f"{r.system.name}: its MFU was published for {measured:,} GPUs only and "
                       f"is held at {r.system.chips:,} (no published run at that scale); pass "
                       f"--mfu {r.system.family}=X to try another")
    return out


def findings(rows: Sequence[SystemPlan]) -> tuple[str, ...]:
    return tuple(flips(rows) + spread(rows) + missed(rows) + unscaled(rows))
