"""How `podctl plan` prints a plan: the working for one system, a table for several, the
project's bill, the break-even MFU and the frontier. Imported only by `plan` when it runs."""

from __future__ import annotations

from typing import Any

import click

from podctl.base.numbers import fmt_count, fmt_usd


def short_source(source: str) -> str:
    """'URL via https://github.com/OWNER/REPO/blob/... (what)' -> 'URL via OWNER/REPO'
    (--json has it all)."""
    first, _, via = source.partition(" via ")
    if "github.com/" in via:
        via = "/".join(via.split("github.com/", 1)[1].split("/")[:2])
    elif "github.com/" in first:
        first = "github.com/" + "/".join(first.split("github.com/", 1)[1].split("/")[:2])
    else:
        first = first.split(" (", 1)[0]
    return f"{first} via {via}" if via else first


def _price_line(p: Any, unit: str, pinned: str | None) -> str:
    dated = f", as of {p.as_of}" if p.as_of else ""
    if not p.reread:
        dated += ", copied: not re-read from the source"
    cheapest = "on-demand's cheapest region" if p.tier == "spot" else "cheapest region"
    where = p.region if pinned or p.source == "--price" else f"{p.region} ({cheapest})"
    return (f"${p.usd_per_chip_hour:.2f} per {unit}-hour, {p.tier}, {where} "
            f"({short_source(p.source)}{dated})")


def _spot_line(r: Any, unit: str) -> str:
    p = r.spot_price
    return (f"${p.usd_per_chip_hour:.2f} per {unit}-hour in {p.region} (on-demand's region)"
            f"{'' if p.reread else ', not re-read'}; goodput {r.goodput:g} x (1 - "
            f"{r.spot_loss:g} preemption loss: {r.spot_loss_source}): "
            f"{fmt_usd(r.spot_total_usd)}")


def _mfu_text(m: Any) -> str:
    low, high = m.band
    return f"{m.value:g} ({low:g}-{high:g})" if m.has_band else f"{m.value:g}"


def _money_range(ends: tuple[float | None, float | None]) -> str:
    low, high = ends
    return "-" if low is None or high is None or low == high else \
        f"{fmt_usd(low)}-{fmt_usd(high)}"


def _rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")


def bill_lines(bill: Any) -> list[tuple[str, str]]:
    parts = [(f"  {p.name.replace('_', ' ')}", f"{fmt_usd(p.usd)}  ({p.working})") for p in bill.parts]
    return [("project", f"{fmt_usd(bill.total_usd)} in all:"), *parts]


def flops_line(r: Any) -> str:
    s = r.shape
    return (f"(6 x {fmt_count(r.params)} params + 12 x {s.layers} layers x {s.width:,} width x "
            f"{s.seq_len:,} seq) x {fmt_count(r.tokens)} tokens = {r.flops:.3e} "
            f"(attention +{r.attention_share:.1%} over 6ND {r.six_nd:.3e})")


def print_one(plan: Any) -> None:
    r = plan.rows[0]
    s = r.system
    peak, unit = s.peak_flops_per_chip, "GPU" if s.kind == "gpu" else "chip"
    chips = (f"{s.chips} GPUs ({s.name}: {s.detail})" if s.kind == "gpu" else f"{s.chips} ({s.name})")
    low, high = r.mfu.band
    rows = [
        ("FLOPs", flops_line(r)),
        ("chips", f"{chips} x {peak / 1e12:g} TFLOP/s peak (bf16) = {s.chips * peak:.3e} FLOP/s"),
        ("MFU", f"{r.mfu.value:g} ({r.mfu.describe()})"),
        ("time", f"{r.flops:.3e} / ({s.chips * peak:.3e} x {r.mfu.value:g}) = "
                 f"{r.hours:,.1f} h; / goodput {r.row_goodput:g} = {r.days:,.1f} days"),
        ("memory", r.fit.sentence(s.name)),
    ]
    if r.mfu.has_band:
        rows.append(("MFU band", f"{low:g}-{high:g}: {r.band_days[0]:,.1f}-{r.band_days[1]:,.1f} "
                                 f"days" + (f", {_money_range(r.band_totals)}" if r.price else "")))
    if r.deadline_days is not None:
        rows.append(("deadline", f"{r.deadline_days:g} days: "
                                 + ("MISSED" if r.misses_deadline else "met")))
    if r.price:
        rows += [
            ("price", _price_line(r.price, unit, plan.region)),
            ("$/hour", f"{s.chips} {unit}s x ${r.price.usd_per_chip_hour:.2f} = {fmt_usd(r.usd_per_hour)}"),
            ("total", f"{fmt_usd(r.usd_per_hour)} x {r.hours:,.1f} h / goodput {r.row_goodput:g} = "
                      f"{fmt_usd(r.total_usd)}"),
        ]
        if r.spot_price:
            rows.append(("spot", _spot_line(r, unit)))
        rows.append(("$/M tokens", fmt_usd(r.usd_per_million_tokens)))
    if s.kind == "gpu":
        rows.append(("note", "podctl provisions only TPUs; this GPU system is for comparison"))
    _rows(rows)
    if r.bill:
        _rows(bill_lines(r.bill))
    for line in plan.findings:
        click.echo(f"note: {line}")


def print_table(plan: Any) -> None:
    first = plan.rows[0]
    goodput = first.row_goodput
    click.echo(f"{fmt_count(plan.params)} params, {fmt_count(plan.tokens)} tokens, sequence "
               f"{first.shape.seq_len:,}: {first.flops:.3e} FLOPs (6ND + attention) on every "
               f"system; DAYS = FLOPs / (chips x peak x MFU) / goodput {goodput:g}; TOTAL at "
               "the same goodput; MFU and its band from published runs (below)")
    spot = not plan.tier_chosen
    deadline = first.deadline_days is not None
    head = ["SYSTEM", "CHIPS", "PEAK/CHIP", "MFU (BAND)", "DAYS", "DAYS (BAND)", "REGION",
            "$/CHIP-H", "TOTAL", "TOTAL (BAND)", *(["SPOT TOTAL"] if spot else []),
            "$/M TOKENS", "PROJECT", "FITS", *(["DEADLINE"] if deadline else []), ""]
    table = []
    for r in plan.rows:
        s = r.system
        days_band = (f"{r.band_days[0]:,.1f}-{r.band_days[1]:,.1f}" if r.mfu.has_band else "-")
        table.append([
            s.name, str(s.chips), f"{s.peak_flops_per_chip / 1e12:g} TF", _mfu_text(r.mfu),
            f"{r.days:,.1f}", days_band, r.price.region if r.price else "-",
            fmt_usd(r.price.usd_per_chip_hour if r.price else None), fmt_usd(r.total_usd),
            _money_range(r.band_totals), *([fmt_usd(r.spot_total_usd)] if spot else []),
            fmt_usd(r.usd_per_million_tokens), fmt_usd(r.bill.total_usd if r.bill else None),
            "yes" if r.fit.fits else "NO",
            *(["MISSED" if r.misses_deadline else "met"] if deadline else []),
            "GPU: comparison only" if s.kind == "gpu" else ""])
    widths = [max(len(row[i]) for row in [head, *table]) for i in range(len(head))]
    left = {0, 3, 5, 6, 9, len(head) - 1}
    for row in [head, *table]:
        click.echo("  ".join(c.ljust(w) if i in left else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip())
    for r in plan.rows:
        click.echo(f"MFU {r.system.name}: {r.mfu.value:g} ({r.mfu.describe()})")
    for r in plan.rows:
        unit = "GPU" if r.system.kind == "gpu" else "chip"
        if r.price:
            click.echo(f"price {r.system.name}: {_price_line(r.price, unit, plan.region)}")
    if spot and any(r.spot_price for r in plan.rows):
        loss = next(r for r in plan.rows if r.spot_price)
        click.echo(f"SPOT TOTAL: each system's spot price in its REGION (on-demand's), goodput "
                   f"x (1 - {loss.spot_loss:g}) for preemptions ({loss.spot_loss_source})")
    unpriced = [r for r in plan.rows if spot and r.price and not r.spot_price]
    if unpriced:  # the "?" in SPOT TOTAL says why, rather than leave a reader to guess
        click.echo("SPOT TOTAL ?: no spot price in podctl's price table for " + ", ".join(
            f"{r.system.name} in {r.price.region}" for r in unpriced))
    for r in plan.rows:
        if not r.fit.fits:
            click.echo(f"memory: {r.fit.sentence(r.system.name)}")
    for b in plan.break_even:
        click.echo(f"break-even: {b.sentence()}")
    for line in plan.findings:
        click.echo(f"note: {line}")
    if plan.rows[0].bill:
        b = plan.rows[0].bill
        click.echo(f"PROJECT: {b.inputs.runs} run(s) at goodput {b.inputs.goodput:g} "
                   f"({b.inputs.goodput_source}), staff, checkpoints, data; "
                   f"`--slice SYSTEM` shows each part, --json carries them all")
    if any(r.system.kind == "gpu" for r in plan.rows):
        click.echo("podctl provisions only TPUs; GPU rows are Google Cloud machines, for comparison.")


def print_frontier(front: Any, output: Any) -> None:
    click.echo("frontier: days (with goodput) against dollars for every size that fits, each "
               "system in its cheapest region (published MFU; across slices the measured "
               "multislice column)")
    head = ["SYSTEM", "CHIPS", "MFU", "DAYS", "TOTAL", "REGION"]
    table = [[p.system.name, str(p.system.chips), f"{p.mfu.value:g}", f"{p.days:,.1f}",
              fmt_usd(p.total_usd), p.price.region if p.price else "-"] for p in front.pareto]
    widths = [max(len(row[i]) for row in [head, *table]) for i in range(len(head))]
    for row in [head, *table]:
        click.echo("  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w)
                             for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip())
    click.echo(f"({len(front.pareto)} plans on the frontier of {len(front.points)}; --json has "
               "every one)")
    if front.deadline_days is not None:
        pick = front.cheapest_within_deadline
        click.echo(f"cheapest within {front.deadline_days:g} days: " + (
            f"{pick.system.name}, {pick.days:,.1f} days, {fmt_usd(pick.total_usd)}" if pick
            else "none: no system finishes in time"))
    if front.budget_usd is not None:
        pick = front.fastest_within_budget
        click.echo(f"fastest within {fmt_usd(front.budget_usd)}: " + (
            f"{pick.system.name}, {pick.days:,.1f} days, {fmt_usd(pick.total_usd)}" if pick
            else "none: every plan costs more"))
    for family in front.unpriced:
        click.echo(f"podctl: {family}: no price where it was planned, so on no frontier; pass "
                   f"--price {family}=USD", err=True)
    if output is not None:
        click.echo(f"wrote {output}")
