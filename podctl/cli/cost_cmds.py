"""podctl plan / cost / budget check."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import click

from podctl.cli.common import Context, guarded
from podctl.cli.job_cmds import bucket_option
from podctl.cli.slice_cmds import json_option, pass_context, where_options

price_option = click.option("--price", type=float, default=None, metavar="USD_PER_CHIP_HOUR",
                            help="Price per chip-hour (default: podctl.toml [prices], else the "
                            "shipped table).")


def _notice(text: str) -> None:
    click.echo(f"podctl: {text}", err=True)


def _plan_zone(ctx: Context, zone: str | None) -> str | None:
    """The zone a plan is priced in: as `settings` finds it, but no project is needed."""
    from podctl import settings

    if zone:
        return zone
    toml = settings.read_podctl_toml(Path.cwd())
    backend = ctx.backend or os.environ.get("PODCTL_BACKEND") or toml.get("backend") or "gcp"
    return (os.environ.get("CLOUDSDK_COMPUTE_ZONE") or toml.get("zone")
            or (settings.FAKE_ZONE if backend == "fake"
                else settings.read_gcloud_config(os.environ).get("zone")))


def _measured_mfu(ctx: Context, run_id: str, project: str | None, zone: str | None,
                  bucket: str | None) -> tuple[float, str]:
    from podctl._sync import run_sync
    from podctl.cli.job_cmds import _storage
    from podctl.errors import InvalidValueError
    from podctl.jobs.history import load_record
    from podctl.jobs.metrics import read_metrics

    storage = _storage(ctx.settings(project, zone, bucket))
    run_sync(load_record(storage, run_id))  # a clear error for a run that is not there
    metrics = run_sync(read_metrics(storage, run_id))
    if metrics.median_mfu is None:
        if not metrics.steps:
            raise InvalidValueError(f"run {run_id} logged no training steps (no JSON step lines "
                                    "on host 0); pass --mfu.")
        raise InvalidValueError(f"run {run_id} measured no MFU (it ran on "
                                f"{metrics.platform or 'an unknown platform'}); pass --mfu.")
    timed = metrics.steps - 1 if metrics.steps > 1 else metrics.steps
    return metrics.median_mfu, f"measured by run {run_id} (median of {timed} steps, compile excluded)"


def _big(x: float) -> str:
    from podctl.cost import fmt_count

    return fmt_count(x)


def _short_source(source: str) -> str:
    """'URL via https://github.com/OWNER/REPO/blob/...' -> 'URL via OWNER/REPO' (--json has it all)."""
    first, _, via = source.partition(" via ")
    if "github.com/" in via:
        via = "/".join(via.split("github.com/", 1)[1].split("/")[:2])
    return f"{first} via {via}" if via else first


def _print_estimate(e: Any, mfu_from: str) -> None:
    from podctl.cost import PEAK_FLOPS_PER_CHIP, fmt_usd

    rows = [
        ("FLOPs", f"6 x {_big(e.params)} params x {_big(e.tokens)} tokens = {e.flops:.3e}"),
        ("chips", f"{e.chips} ({e.slice_type}) x {PEAK_FLOPS_PER_CHIP / 1e12:g} TFLOP/s peak "
                  f"(bf16) = {e.chips * PEAK_FLOPS_PER_CHIP:.3e} FLOP/s"),
        ("MFU", f"{e.mfu:g} ({mfu_from})"),
        ("time", f"{e.flops:.3e} / ({e.chips * PEAK_FLOPS_PER_CHIP:.3e} x {e.mfu:g}) = "
                 f"{e.hours:,.1f} h ({e.hours / 24:,.1f} days)"),
    ]
    if e.price:
        p = e.price
        dated = f", as of {p.as_of}" if p.as_of else ""
        rows += [
            ("price", f"${p.usd_per_chip_hour:.2f} per chip-hour, {p.tier}, {p.region} "
                      f"({_short_source(p.source)}{dated})"),
            ("$/hour", f"{e.chips} chips x ${p.usd_per_chip_hour:.2f} = {fmt_usd(e.usd_per_hour)}"),
            ("total", f"{fmt_usd(e.usd_per_hour)} x {e.hours:,.1f} h = {fmt_usd(e.total_usd)}"),
            ("$/M tokens", f"{fmt_usd(e.usd_per_million_tokens)}"),
        ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")


def _print_compare(estimates: list[Any], mfu_from: str) -> None:
    from podctl.cost import fmt_usd

    first = estimates[0]
    click.echo(f"{_big(first.params)} params, {_big(first.tokens)} tokens, 6ND = {first.flops:.3e} "
               f"FLOPs, MFU {first.mfu:g} ({mfu_from})")
    head = ("SLICE", "CHIPS", "HOURS", "DAYS", "$/HOUR", "TOTAL", "$/M TOKENS")
    rows = [(e.slice_type, str(e.chips), f"{e.hours:,.1f}", f"{e.hours / 24:,.1f}",
             fmt_usd(e.usd_per_hour), fmt_usd(e.total_usd), fmt_usd(e.usd_per_million_tokens))
            for e in estimates]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        click.echo("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip())


@click.command()
@click.option("--params", "params_text", required=True, metavar="N",
              help="Model parameters: 70B, 7b, 500M, 1.5e12.")
@click.option("--tokens", "tokens_text", required=True, metavar="D", help="Training tokens: 1T, 2e12.")
@click.option("--slice", "slice_name", default=None, metavar="v5p-N", help="Slice type to price.")
@click.option("--compare", default=None, metavar="v5p-A,v5p-B", help="Several slice types, side by side.")
@click.option("--mfu", type=float, default=None, help="Model FLOPs utilization in (0, 1] (default 0.45, assumed).")
@click.option("--mfu-from", default=None, metavar="RUN_ID", help="Use the MFU a run measured.")
@click.option("--spot", is_flag=True, help="Price at the spot tier.")
@price_option
@where_options
@bucket_option
@json_option
@pass_context
def plan(ctx: Context, params_text: str, tokens_text: str, slice_name: str | None,
         compare: str | None, mfu: float | None, mfu_from: str | None, spot: bool,
         price: float | None, project: str | None, zone: str | None, bucket: str | None,
         as_json: bool) -> None:
    """Estimate time and cost of training: 6·N·D FLOPs at MFU of the chips' peak.

    \b
    podctl plan --params 70B --tokens 1T --slice v5p-4096 --mfu 0.5 --zone us-east5-a
    """

    def action() -> None:
        from podctl import cost
        from podctl.cli.render import emit_json
        from podctl.errors import InvalidValueError

        params = cost.parse_count(params_text, "--params")
        tokens = cost.parse_count(tokens_text, "--tokens")
        names = [n.strip() for n in compare.split(",") if n.strip()] if compare else []
        if slice_name:
            names = [slice_name] + [n for n in names if n != slice_name]
        if not names:
            raise InvalidValueError("which slice? pass --slice v5p-N (or --compare v5p-A,v5p-B).")
        if mfu is not None and mfu_from:
            raise InvalidValueError("--mfu and --mfu-from both give the MFU: choose one.")
        cost.check_price(price)
        if mfu is not None:
            chosen, source = cost.check_mfu(mfu), "--mfu"
        elif mfu_from:
            chosen, source = _measured_mfu(ctx, mfu_from, project, zone, bucket)
        else:
            chosen, source = cost.DEFAULT_MFU, "assumed; pass --mfu or --mfu-from RUN_ID"
        where = _plan_zone(ctx, zone)
        chip_price = (cost.chip_hour_price(where, spot=spot, override=price) if where
                      else cost.chip_hour_price("-", spot=spot, override=price) if price else None)
        estimates = [cost.estimate(n, params=params, tokens=tokens, mfu=chosen, price=chip_price)
                     for n in names]
        unknown = None if chip_price else cost.unknown_price_message(where)
        if as_json:
            emit_json({"estimates": [e.to_json() for e in estimates], "mfu_source": source,
                       "zone": where, "price_note": unknown})
        elif len(estimates) == 1:
            _print_estimate(estimates[0], source)
        else:
            _print_compare(estimates, source)
        if unknown and not as_json:
            _notice(unknown)

    guarded(action)


# ---- podctl cost ----------------------------------------------------------------------

def _slice_json(info: Any, c: Any) -> dict[str, Any]:
    from podctl.budget import slice_budget

    budget = slice_budget(info)
    return {"name": info.name, "accelerator_type": info.accelerator_type,
            "num_slices": info.num_slices, "chips": info.chips, "tier": info.tier,
            "zone": info.zone, "state": info.state, "created": info.created,
            "age_seconds": round(info.age_seconds, 1), **c.to_json(),
            "budget": {"max_cost": budget.max_cost, "deadline": budget.deadline} if budget else None}


def _run_cost(ctx: Context, run_id: str, price: float | None, project: str | None,
              zone: str | None, bucket: str | None) -> dict[str, Any]:
    from podctl import cost
    from podctl._sync import run_sync
    from podctl.cli.job_cmds import _storage
    from podctl.cloud.connect import connect
    from podctl.cloud.describe import find
    from podctl.jobs.history import load_record
    from podctl.jobs.logs import LogReader
    from podctl.jobs.metrics import read_metrics
    from podctl.topology import CHIPS_PER_HOST

    settings = ctx.settings(project, zone, bucket)
    storage = _storage(settings)
    record = run_sync(load_record(storage, run_id))
    ended = record.ended
    if ended is None and record.state not in ("starting", "running"):  # settled from statuses
        statuses = run_sync(LogReader(storage, run_id, record.num_hosts, lambda h, l: None)
                            .read_statuses())
        ended = max((s.ended for s in statuses.values()), default=None)
    # The slice, if it is still there, says its tier; a slice made after the run is another.
    info = run_sync(find(connect(settings), f"projects/{record.project}/locations/{record.zone}",
                         record.slice_name))
    same = info is not None and info.created <= record.created
    spot = bool(same and info.tier == "spot")
    chips = info.chips if same else record.num_hosts * CHIPS_PER_HOST
    chip_price = cost.chip_hour_price(record.zone, spot=spot, override=price)
    metrics = run_sync(read_metrics(storage, run_id))
    billed = max(0.0, (ended or time.time()) - record.created)
    bill = cost.RunCost(billed_seconds=billed, chips=chips, price=chip_price,
                        productive_seconds=metrics.productive_seconds, tokens=metrics.tokens)
    return {
        "run_id": run_id, "slice": record.slice_name, "zone": record.zone, "state": record.state,
        "chips": chips, "tier": "spot" if spot else "on-demand",
        "tier_known": same, "created": record.created, "ended": ended,
        "billed_seconds": round(billed, 1), "usd_per_hour": None if chip_price is None
        else chips * chip_price.usd_per_chip_hour, "cost_usd": bill.usd,
        "productive_seconds": round(metrics.productive_seconds, 3), "goodput": bill.goodput,
        "tokens": metrics.tokens, "usd_per_million_tokens": bill.usd_per_million_tokens,
        "median_mfu": metrics.median_mfu, "steps": metrics.steps, "final_step": metrics.final_step,
        "final_loss": metrics.final_loss, "price": chip_price.to_json() if chip_price else None,
        "price_note": None if chip_price else cost.unknown_price_message(record.zone),
    }


def _print_run(r: dict[str, Any]) -> None:
    from podctl.cost import fmt_usd

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
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")


@click.command(name="cost")
@click.argument("target", required=False, metavar="[NAME|RUN_ID]")
@price_option
@where_options
@bucket_option
@json_option
@pass_context
def cost_cmd(ctx: Context, target: str | None, price: float | None, project: str | None,
             zone: str | None, bucket: str | None, as_json: bool) -> None:
    """What a slice has cost so far (chips x age x price), or a run: its billed slice
    time, goodput (training time / billed time) and cost per million tokens trained.
    Without NAME: every podctl slice in the zone."""

    def action() -> None:
        from podctl import cost
        from podctl._sync import run_sync
        from podctl.cli.render import emit_json
        from podctl.cloud.connect import connect
        from podctl.cloud.describe import describe, list_slices
        from podctl.jobs.runs import valid_run_id

        cost.check_price(price)
        if target and valid_run_id(target):
            report = _run_cost(ctx, target, price, project, zone, bucket)
            if as_json:
                emit_json(report)
            else:
                _print_run(report)
                if report["price_note"]:
                    _notice(report["price_note"])
            return
        settings = ctx.settings(project, zone)
        api = connect(settings)
        slices = ([run_sync(describe(api, settings.parent, target))] if target else
                  [s for s in run_sync(list_slices(api, settings.parent)) if s.managed])
        config = cost.load_price_config()
        report = [_slice_json(s, cost.slice_cost(s, override=price, config=config)) for s in slices]
        if as_json:
            emit_json(report if not target else report[0])
            return
        if not slices:
            click.echo(f"no podctl slices in {settings.zone}")
            return
        click.echo(f"{'SLICE':30s} {'CHIPS':>11s}  {'TIER':9s} {'AGE':>10s}  {'USD/HOUR':>14s}  "
                   f"{'COST':>14s}")
        for r in report:
            click.echo(f"{r['name']:30s} {r['chips']:>5d} chips  {r['tier']:9s} "
                       f"{r['age_seconds'] / 3600:8.2f} h  {cost.fmt_usd(r['usd_per_hour']):>12s}/h  "
                       f"{cost.fmt_usd(r['cost_usd']):>14s}")
        known = [r["cost_usd"] for r in report if r["cost_usd"] is not None]
        if len(report) > 1:
            click.echo(f"{'total':30s} {cost.fmt_usd(sum(known)) if known else '?':>60s}")
        if len(known) < len(report):
            _notice(cost.unknown_price_message(settings.zone))

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
        from podctl import budget as budget_lib
        from podctl._sync import run_sync
        from podctl.cli.render import emit_json
        from podctl.durations import parse_duration
        from podctl.lifecycle import Session

        grace_seconds = parse_duration(grace, "--grace")
        session = Session.open(ctx.settings(project, zone, bucket))

        async def stop_runs(info: Any) -> list[str]:
            from podctl.cloud.connect import job_ports

            if not session.settings.bucket:
                _notice(f"no bucket (--bucket, PODCTL_BUCKET): runs on {info.name} not signalled")
                return []
            return await budget_lib.stop_runs_on(
                session.storage, info, private_key=session.ssh_key().private_path,
                pins=session.pins(info), ssh_port=job_ports(session.settings)[0],
                grace_seconds=grace_seconds)

        reaped = run_sync(budget_lib.reap(session.api, session.settings.parent, dry_run=dry_run,
                                          stop_runs=stop_runs, notice=_notice))
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


COMMANDS = (plan, cost_cmd, budget)
