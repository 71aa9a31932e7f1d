"""podctl cost / budget check (`plan` is plan_cmd.py)."""

from __future__ import annotations

from typing import Any

import click

from podctl.cli.common import AMOUNT, POSITIVE, Context, bucket_option, guarded
from podctl.cli.slice_cmds import json_option, pass_context, where_options

price_option = click.option("--price", type=POSITIVE, default=None, metavar="USD_PER_CHIP_HOUR",
                            help="Price per chip-hour (default: podctl.toml [prices], else the "
                            "shipped table).")


def _notice(text: str) -> None:
    click.echo(f"podctl: {text}", err=True)


# ---- podctl cost ----------------------------------------------------------------------

def _slice_json(priced: Any) -> dict[str, Any]:
    """A steps.slice_cost.PricedSlice as `podctl cost --json` gives it."""
    info, c, budget = priced.info, priced.cost, priced.budget
    return {"name": info.name, "accelerator_type": info.accelerator_type,
            "num_slices": info.num_slices, "chips": info.chips, "tier": info.tier,
            "zone": info.zone, "state": info.state, "created": info.created,
            "age_seconds": round(info.age_seconds, 1), **c.to_json(),
            "budget": {"max_cost": budget.max_cost, "deadline": budget.deadline} if budget else None}


def _run_cost(ctx: Context, run_id: str, price: float | None, project: str | None,
              zone: str | None, bucket: str | None, inputs: Any) -> dict[str, Any]:
    """RUN_ID's bill, and the project's parts (as `plan` gives them) from what it measured."""
    from podctl.base._sync import run_sync
    from podctl.policy.planner.bill import measured_bill
    from podctl.steps import Session
    from podctl.steps.run_cost import checkpoint_bytes, run_cost

    session = Session.open(ctx.settings(project, zone, bucket))
    try:
        bill = run_sync(run_cost(session, run_id, price=price))
        saved = run_sync(checkpoint_bytes(session, run_id))
    finally:
        session.close()
    project_bill = measured_bill(bill, saved, inputs)
    return {**bill.to_json(), "checkpoint_bytes": saved,
            "project": project_bill.to_json() if project_bill else None}


def _print_run(r: dict[str, Any]) -> None:
    from podctl.base.numbers import fmt_usd

    goodput = "?" if r["goodput"] is None else f"{r['goodput']:.1%}"
    tier = r["tier"] + ("" if r["tier_known"] else " (assumed: the slice is gone)")
    rows = [
        ("run", f"{r['run_id']} ({r['state']}) on {r['slice']}, {r['chips']} chips, {tier}"),
        ("billed", f"{r['billed_seconds'] / 3600:,.2f} h x {fmt_usd(r['usd_per_hour'])}/h = "
                   f"{fmt_usd(r['cost_usd'])}"),
        ("training", f"{r['productive_seconds'] / 3600:,.2f} h in {r['steps']} steps "
                     "(compile excluded)"),
        ("goodput", goodput),
        ("tokens", f"{r['tokens']:,.0f} ({fmt_usd(r['usd_per_million_tokens'])} per million)"),
        ("MFU", "-" if r["median_mfu"] is None else f"{r['median_mfu']:.3f} (median)"),
    ]
    project = [("project", f"{fmt_usd(r['project']['total_usd'])} in all:"), *(
        (f"  {name.replace('_', ' ')}", f"{fmt_usd(p['usd'])}  ({p['working']})")
        for name, p in r["project"]["parts"].items())] if r["project"] else []
    for block in (rows, project):
        width = max((len(k) for k, _ in block), default=0)
        for key, value in block:
            click.echo(f"{key:<{width}}  {value}")


@click.command(name="cost")
@click.argument("target", required=False, metavar="[NAME|RUN_ID]")
@price_option
@click.option("--people", default=0.0, show_default=True, type=AMOUNT,
              help="RUN_ID: people paid while it ran.")
@click.option("--rate", default=0.0, show_default=True, type=AMOUNT, metavar="USD_PER_HOUR",
              help="RUN_ID: what one person costs per hour.")
@click.option("--dataset-tb", default=0.0, show_default=True, type=AMOUNT,
              help="RUN_ID: the dataset it read, in TB.")
@click.option("--egress-usd-per-gb", default=0.0, show_default=True, type=AMOUNT,
              help="RUN_ID: what moving the dataset to the slice cost per GB.")
@where_options
@bucket_option
@json_option
@pass_context
def cost_cmd(ctx: Context, target: str | None, price: float | None, people: float, rate: float,
             dataset_tb: float, egress_usd_per_gb: float, project: str | None,
             zone: str | None, bucket: str | None, as_json: bool) -> None:
    """What a slice has cost so far (chips x age x price), or a run: its billed slice
    time, goodput (training time / billed time), cost per million tokens trained, and the
    project's parts as `plan` gives them (compute, staff, checkpoint storage, data
    transfer) from what it measured. Without NAME: every podctl slice in the zone."""

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.base.numbers import check_price, fmt_usd
        from podctl.cli.render import emit_json
        from podctl.steps import Session, valid_run_id
        from podctl.steps.slice_cost import slice_costs

        check_price(price)
        if target and valid_run_id(target):
            from podctl.policy.planner.bill import BillInputs

            inputs = BillInputs(people=people, usd_per_person_hour=rate, dataset_tb=dataset_tb,
                                egress_usd_per_gb=egress_usd_per_gb,
                                egress_why="--egress-usd-per-gb").check()
            report = _run_cost(ctx, target, price, project, zone, bucket, inputs)
            if as_json:
                emit_json(report)
            else:
                _print_run(report)
                if report["price_note"]:
                    _notice(report["price_note"])
            return
        session = Session.open(ctx.settings(project, zone))
        priced = run_sync(slice_costs(session, name=target, managed_only=True, price=price))
        listed = [_slice_json(p) for p in priced.slices]
        if as_json:
            emit_json(listed if not target else listed[0])
            return
        if not listed:
            click.echo(f"no podctl slices in {session.settings.zone}")
            return
        click.echo(f"{'SLICE':30s} {'CHIPS':>11s}  {'TIER':9s} {'AGE':>10s}  {'USD/HOUR':>14s}  "
                   f"{'COST':>14s}")
        for r in listed:
            click.echo(f"{r['name']:30s} {r['chips']:>5d} chips  {r['tier']:9s} "
                       f"{r['age_seconds'] / 3600:8.2f} h  {fmt_usd(r['usd_per_hour']):>12s}/h  "
                       f"{fmt_usd(r['cost_usd']):>14s}")
        known = [r["cost_usd"] for r in listed if r["cost_usd"] is not None]
        if len(listed) > 1:
            click.echo(f"{'total':30s} {fmt_usd(sum(known)) if known else '?':>60s}")
        for note in priced.notes:
            _notice(note)

    guarded(action)


# ---- podctl budget check --------------------------------------------------------------

@click.group()
def budget() -> None:
    """Budgets set with `podctl up --max-cost/--max-hours` (labels on the slice).

    A budget is enforced only while a podctl process watches: `podctl run` while it
    follows a run, or `podctl budget check` from cron, e.g. every 5 minutes:

    \b
    */5 * * * *  podctl budget check --zone us-east5-a
    """


@budget.command(name="check")
@click.option("--dry-run", is_flag=True, help="Say what would be stopped and deleted; touch nothing.")
@click.option("--grace", default="5m", show_default=True, metavar="DURATION",
              help="How long the runs get to checkpoint and stop before the slice is deleted.")
@where_options
@bucket_option
@json_option
@pass_context
def budget_check(ctx: Context, dry_run: bool, grace: str, project: str | None, zone: str | None,
                 bucket: str | None, as_json: bool) -> None:
    """Stop the runs on, then delete, every podctl slice whose budget is reached
    (its podctl-deadline label passed, or its cost so far reached podctl-max-cost)."""

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.base.durations import parse_duration
        from podctl.cli.render import emit_json
        from podctl.steps import Session
        from podctl.steps.budget_check import check_budgets

        grace_seconds = parse_duration(grace, "--grace")
        session = Session.open(ctx.settings(project, zone, bucket))
        reaped = run_sync(check_budgets(session, dry_run=dry_run, grace_seconds=grace_seconds,
                                        notice=_notice))
        if as_json:
            emit_json([r.to_json() for r in reaped])
        elif not reaped:
            click.echo(f"no podctl slice over its budget in {session.settings.zone}")
        for r in reaped if not as_json else ():
            if r.deleted:
                click.echo(f"deleted {r.info.name} ({r.reason})")
            else:
                click.echo(f"would stop and delete {r.info.name} ({r.reason})")

    guarded(action)


COMMANDS = (cost_cmd, budget)
