"""Time against money: every size of every system, the cheapest plan that meets a deadline
and the fastest within a budget.

Sizes: a TPU generation's documented slices (Google's table) that hold the model (fit.py),
then 2, 4, 8 ... of its largest slice (multislice) up to MAX_CHIPS; a GPU system's machines
in powers of two. Each point is a plan of its own (core.plan_system): days and dollars at
the system's published MFU (carried across slices by the measured multislice column: mfu.py)
and cheapest price; days with goodput.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podctl.base.errors import InvalidValueError
from podctl.policy.compare import System, gpu_systems, resolve
from podctl.policy.planner import fit as fitting
from podctl.policy.planner.core import SystemPlan

MAX_CHIPS = 16384  # the largest system considered: 16K chips or GPUs
DEFAULT_SYSTEMS = ("v5p", "v6e", "h100", "b200")


def sizes(family: str, params: float, shape: fitting.Shape | None = None) -> list[System]:
    """FAMILY's systems that hold PARAMS (and SHAPE's activations) in memory, smallest
    first, up to MAX_CHIPS."""
    if family in gpu_systems():
        per = gpu_systems()[family].gpus_per_machine
        counts = [per * 2 ** k for k in range(16) if per * 2 ** k <= MAX_CHIPS]
        every = [resolve(f"{family}-{n}") for n in counts]
    else:
        from podctl.base.topology import generation

        gen = generation(family)
        every = [resolve(f"{family}-{size}") for size in gen.valid_sizes(documented_only=True)]
        biggest = gen.type_name(gen.max_chips)
        limit = min(MAX_CHIPS, gen.multislice_max_chips or MAX_CHIPS)
        k = 2
        while gen.max_chips * k <= limit:
            every.append(resolve(biggest, k))
            k *= 2
    return [s for s in every if fitting.check(s, params, shape).fits]


@dataclass(frozen=True)
class Frontier:
    points: tuple[SystemPlan, ...]  # every priced plan, by days
    deadline_days: float | None
    budget_usd: float | None
    # the families whose every size fits but has no price where planned (TPU7x: none
    # published): not on the frontier, and said so rather than left out without a word
    unpriced: tuple[str, ...] = ()

    @property
    def pareto(self) -> tuple[SystemPlan, ...]:
        """The plans no other plan beats on both days and dollars, fastest first."""
        best: list[SystemPlan] = []
        for p in sorted(self.points, key=lambda p: (p.days, p.total_usd or 0.0)):
            if not best or (p.total_usd or 0.0) < (best[-1].total_usd or 0.0):
                best.append(p)
        return tuple(best)

    @property
    def cheapest_within_deadline(self) -> SystemPlan | None:
        if self.deadline_days is None:
            return None
        ok = [p for p in self.points if p.days <= self.deadline_days]
        return min(ok, key=lambda p: (round(p.total_usd or 0.0, 2), p.system.chips), default=None)

    @property
    def fastest_within_budget(self) -> SystemPlan | None:
        if self.budget_usd is None:
            return None
        ok = [p for p in self.points if (p.total_usd or 0.0) <= self.budget_usd]
        return min(ok, key=lambda p: (p.days, p.total_usd or 0.0), default=None)

    def __repr__(self) -> str:
        pick = self.cheapest_within_deadline
        return (f"<podctl frontier: {len(self.points)} plans, {len(self.pareto)} on the frontier"
                + (f"; cheapest within {self.deadline_days:g} days: {pick.system.name}" if pick else "")
                + ">")

    def _repr_png_(self) -> bytes:
        """A notebook shows the frontier as its picture."""
        from podctl.policy import plot

        return plot.png_bytes(draw(self))

    def to_json(self) -> dict[str, Any]:
        def brief(p: SystemPlan | None) -> dict[str, Any] | None:
            return None if p is None else {
                "system": p.system.name, "chips": p.system.chips, "days": p.days,
                "total_usd": p.total_usd, "mfu": p.mfu.value,
                "region": p.price.region if p.price else None}

        return {"points": [brief(p) for p in self.points],
                "pareto": [brief(p) for p in self.pareto],
                "deadline_days": self.deadline_days, "budget_usd": self.budget_usd,
                "cheapest_within_deadline": brief(self.cheapest_within_deadline),
                "fastest_within_budget": brief(self.fastest_within_budget),
                "unpriced": list(self.unpriced)}


def frontier(params: float | str, tokens: float | str,
             systems: str | list[str] | tuple[str, ...] = DEFAULT_SYSTEMS,
             *, deadline_days: float | None = None, budget_usd: float | None = None,
             **plan_args: Any) -> Frontier:
    """Every size of each of SYSTEMS (families: "v5p", "h100"), planned with PLAN_ARGS as
    `plan` takes them (mfu, tier, region, price, ...)."""
    from podctl.money import cost
    from podctl.policy.planner.core import RunShape, check_run_shape, counts, plan

    n, d = counts(params, tokens)
    defaults = RunShape()
    shape = check_run_shape(plan_args.get("seq_len", defaults.seq_len),
                            plan_args.get("batch_per_chip", defaults.batch_per_chip),
                            plan_args.get("remat", defaults.remat)).for_params(n)
    plan_args.setdefault("config", cost.load_price_config())
    families = [s.strip().lower() for s in (systems.split(",") if isinstance(systems, str)
                                            else systems) if s.strip()]
    families = list(dict.fromkeys(f.rsplit("-", 1)[0] if f[-1:].isdigit() and "-" in f else f
                                  for f in families))
    if not families:
        raise InvalidValueError("--systems: name at least one, e.g. v5p,v6e,h100,b200.")
    points: list[SystemPlan] = []
    unpriced: dict[str, None] = {}
    for family in families:
        for system in sizes(family, n, shape):
            row = plan(n, d, [system.slice_type], num_slices=system.num_slices,
                       **plan_args).rows[0]
            if row.total_usd is not None:
                points.append(row)
            else:
                unpriced[family] = None
    priced = {p.system.family for p in points}
    return Frontier(tuple(sorted(points, key=lambda p: p.days)), deadline_days, budget_usd,
                    tuple(f for f in unpriced if f not in priced))


def draw(front: Frontier, path: Path | None = None) -> Any:
    """Days against dollars, one colour per system, the Pareto line and the picks; saved
    to PATH (.png or .html, as `podctl plot` writes) when given. Returns the figure."""
    from podctl.policy import plot

    if path is not None:
        plot.check_output(path)
    plot._matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot(1, 1, 1)
    families = list(dict.fromkeys(p.system.family for p in front.points))
    for family, colour in zip(families, plot._colours(len(families)), strict=True):
        mine = [p for p in front.points if p.system.family == family]
        ax.scatter([p.days for p in mine], [(p.total_usd or 0) / 1e6 for p in mine],
                   label=family, color=colour, s=18)
    best = front.pareto
    ax.plot([p.days for p in best], [(p.total_usd or 0) / 1e6 for p in best], color="black",
            linewidth=1, label="frontier")
    for pick, label in ((front.cheapest_within_deadline, "cheapest within deadline"),
                        (front.fastest_within_budget, "fastest within budget")):
        if pick is not None:
            ax.annotate(f"{label}: {pick.system.name}", (pick.days, (pick.total_usd or 0) / 1e6),
                        fontsize=8, xytext=(8, 8), textcoords="offset points")
    if front.deadline_days is not None:
        ax.axvline(front.deadline_days, color="grey", linestyle="--", linewidth=1)
    if front.budget_usd is not None:
        ax.axhline(front.budget_usd / 1e6, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("days")
    ax.set_ylabel("US$ millions")
    ax.set_title("time against money")
    ax.legend(fontsize=8)
    if path is not None:
        plot.save(fig, path)
    return fig
