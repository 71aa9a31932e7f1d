"""podctl plan / cost / budget check."""

from __future__ import annotations

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

    return settings.resolve_zone(backend=ctx.backend, zone=zone)


def _measured_mfu(ctx: Context, run_id: str, project: str | None, zone: str | None,
                  bucket: str | None) -> tuple[float, str]:
    from podctl._sync import run_sync
    from podctl.errors import InvalidValueError
    from podctl.jobs.run_files import load_record
    from podctl.jobs.metrics import read_metrics
    from podctl.steps import Session

    storage = Session.open(ctx.settings(project, zone, bucket)).storage
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


def _chips_label(e: Any) -> str:
    if e.kind == "gpu":
        return f"{e.chips} GPUs ({e.slice_type}: {e.detail})"
    return f"{e.chips} ({e.slice_type})"


def _print_estimate(e: Any, mfu_from: str) -> None:
    from podctl.cost import fmt_usd

    peak = e.peak_flops_per_chip
    unit = "GPU" if e.kind == "gpu" else "chip"
    rows = [
        ("FLOPs", f"6 x {_big(e.params)} params x {_big(e.tokens)} tokens = {e.flops:.3e}"),
        ("chips", f"{_chips_label(e)} x {peak / 1e12:g} TFLOP/s peak "
                  f"(bf16) = {e.chips * peak:.3e} FLOP/s"),
        ("MFU", f"{e.mfu:g} ({mfu_from})"),
        ("time", f"{e.flops:.3e} / ({e.chips * peak:.3e} x {e.mfu:g}) = "
                 f"{e.hours:,.1f} h ({e.hours / 24:,.1f} days)"),
    ]
    if e.price:
        p = e.price
        dated = f", as of {p.as_of}" if p.as_of else ""
        rows += [
            ("price", f"${p.usd_per_chip_hour:.2f} per {unit}-hour, {p.tier}, {p.region} "
                      f"({_short_source(p.source)}{dated})"),
            ("$/hour", f"{e.chips} {unit}s x ${p.usd_per_chip_hour:.2f} = {fmt_usd(e.usd_per_hour)}"),
            ("total", f"{fmt_usd(e.usd_per_hour)} x {e.hours:,.1f} h = {fmt_usd(e.total_usd)}"),
            ("$/M tokens", f"{fmt_usd(e.usd_per_million_tokens)}"),
        ]
    if e.kind == "gpu":
        rows.append(("note", "podctl provisions only TPUs; this GPU system is for comparison"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")


def _print_compare(estimates: list[Any], sources: list[str]) -> None:
    from podctl.cost import fmt_usd

    first = estimates[0]
    click.echo(f"{_big(first.params)} params, {_big(first.tokens)} tokens: 6ND = {first.flops:.3e} "
               "FLOPs on every system; hours = 6ND / (chips x peak x MFU) / 3600")
    head = ("SYSTEM", "CHIPS", "PEAK/CHIP", "MFU", "CHIPS x PEAK x MFU", "HOURS", "DAYS",
            "$/CHIP-H", "$/HOUR", "TOTAL", "$/M TOKENS", "")
    rows = [(e.slice_type, str(e.chips), f"{e.peak_flops_per_chip / 1e12:g} TF", f"{e.mfu:g}",
             f"{e.chips * e.peak_flops_per_chip * e.mfu:.3e}", f"{e.hours:,.1f}",
             f"{e.hours / 24:,.1f}", fmt_usd(e.price.usd_per_chip_hour if e.price else None),
             fmt_usd(e.usd_per_hour), fmt_usd(e.total_usd), fmt_usd(e.usd_per_million_tokens),
             "GPU: comparison only" if e.kind == "gpu" else "")
            for e in estimates]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        click.echo("  ".join(c.ljust(w) if i in (0, len(head) - 1) else c.rjust(w)
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    mfus = dict.fromkeys(f"{e.slice_type} {e.mfu:g} ({src})" for e, src in zip(estimates, sources))
    click.echo("MFU: " + "; ".join(mfus))
    for e in estimates:
        if e.price:
            p = e.price
            dated = f", as of {p.as_of}" if p.as_of else ""
            unit = "GPU" if e.kind == "gpu" else "chip"
            click.echo(f"price {e.slice_type}: ${p.usd_per_chip_hour:.2f} per {unit}-hour, {p.tier}, "
                       f"{p.region} ({_short_source(p.source)}{dated})")
    if any(e.kind == "gpu" for e in estimates):
        click.echo("podctl provisions only TPUs; GPU rows are Google Cloud machines, for comparison.")


@click.command()
@click.option("--params", "params_text", default=None, metavar="N",
              help="Model parameters: 70B, 7b, 500M, 1.5e12.")
@click.option("--from-preflight", "from_preflight", default=None, metavar="FILE",
              type=click.Path(path_type=Path),
              help="Price with the compiled FLOPs per step of `podctl preflight --json > FILE`.")
@click.option("--tokens", "tokens_text", required=True, metavar="D", help="Training tokens: 1T, 2e12.")
@click.option("--slice", "slice_name", default=None, metavar="TYPE",
              help="Slice type to price: v5p-N, v6e-N, v5litepod-N, v4-N.")
@click.option("--compare", default=None, metavar="A,B,...",
              help="Systems side by side: TPU slices of any generation and GPU reference "
                   "systems h100-N, b200-N (N GPUs; Google Cloud A3 / A4 machines).")
@click.option("--mfu", "mfu_text", default=None, metavar="MFU|SYS=MFU,...",
              help="Model FLOPs utilization in (0, 1], for all or per system: 0.5, or "
                   "v5p=0.5,h100=0.4 (default 0.45, assumed).")
@click.option("--mfu-from", default=None, metavar="RUN_ID", help="Use the MFU a run measured.")
@click.option("--spot", is_flag=True, help="Price at the spot tier.")
@click.option("--price", "price_text", default=None, metavar="USD|SYS=USD,...",
              help="Price per chip (GPU) hour, for all or per system: 4.20, or v6e=2.7,b200=6 "
                   "(default: podctl.toml [prices], else the shipped tables).")
@where_options
@bucket_option
@json_option
@pass_context
def plan(ctx: Context, params_text: str | None, from_preflight: Path | None, tokens_text: str,
         slice_name: str | None, compare: str | None, mfu_text: str | None, mfu_from: str | None,
         spot: bool, price_text: str | None, project: str | None, zone: str | None, bucket: str | None,
         as_json: bool) -> None:
    """Estimate time and cost of training: 6·N·D FLOPs at MFU of the chips' peak, on a
    TPU slice, or several systems side by side (TPU against GPU).

    \b
    podctl plan --params 70B --tokens 1T --slice v5p-4096 --mfu 0.5 --zone us-east5-a
    podctl plan --params 70B --tokens 1T --compare v5p-4096,v6e-256,h100-1024 \\
        --mfu v5p=0.5,h100=0.4 --zone us-central1-a
    """

    def action() -> None:
        from podctl import compare as cmp
        from podctl import cost
        from podctl.cli.render import emit_json
        from podctl.errors import InvalidValueError

        if from_preflight is not None:
            from podctl.cli.preflight_cmds import plan_from_preflight

            if params_text or compare or mfu_from:
                raise InvalidValueError("--from-preflight has the FLOPs per step: drop --params, "
                                        "--compare and --mfu-from.")
            return plan_from_preflight(ctx, from_preflight, tokens_text, slice_name,
                                       _one_number(mfu_text, "--mfu", cost.check_mfu), spot,
                                       _one_number(price_text, "--price", cost.check_price),
                                       zone, as_json)
        if params_text is None:
            raise InvalidValueError("how large a model? pass --params N (or --from-preflight FILE).")
        params = cost.parse_count(params_text, "--params")
        tokens = cost.parse_count(tokens_text, "--tokens")
        names = [n.strip() for n in compare.split(",") if n.strip()] if compare else []
        if slice_name:
            names = [slice_name] + [n for n in names if n != slice_name]
        if not names:
            raise InvalidValueError("which slice? pass --slice v5p-N (or --compare v5p-A,h100-B).")
        if mfu_text is not None and mfu_from:
            raise InvalidValueError("--mfu and --mfu-from both give the MFU: choose one.")
        mfus = cmp.parse_per_system(mfu_text, "--mfu", cost.check_mfu)
        prices = cmp.parse_per_system(price_text, "--price", cost.check_price)
        mfus.check_names("--mfu", names)
        prices.check_names("--price", names)
        measured = _measured_mfu(ctx, mfu_from, project, zone, bucket) if mfu_from else None
        where = _plan_zone(ctx, zone)
        config = cost.load_price_config()
        estimates, sources = [], []
        for name in names:
            chosen = mfus.for_system(name.lower())
            if chosen is not None:
                source = "--mfu"
            elif measured:
                chosen, source = measured
            else:
                chosen, source = cost.DEFAULT_MFU, "assumed; pass --mfu or --mfu-from RUN_ID"
            estimates.append(cmp.estimate_system(
                name, params=params, tokens=tokens, mfu=chosen, zone=where, spot=spot,
                price_override=prices.for_system(name.lower()), config=config))
            sources.append(source)
        notes = [n for n in (cmp.price_note(e, where) for e in estimates) if n]
        if len(estimates) == 1 and estimates[0].kind == "tpu" and notes:
            notes = [cost.unknown_price_message(where, cost.generation_of(estimates[0].slice_type))]
        if as_json:
            emit_json({"estimates": [{**e.to_json(), "mfu_source": src}
                                     for e, src in zip(estimates, sources)],
                       "mfu_source": sources[0], "zone": where,
                       "price_note": "; ".join(notes) or None})
        elif len(estimates) == 1:
            _print_estimate(estimates[0], sources[0])
        else:
            _print_compare(estimates, sources)
        for note in notes if not as_json else ():
            _notice(note)

    guarded(action)


def _one_number(text: str | None, flag: str, check: Any) -> float | None:
    """A single --mfu / --price value (a preflight prices one slice, not several systems)."""
    from podctl.errors import InvalidValueError

    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidValueError(f"{flag} with --from-preflight is one number, not {text!r}.") from None
    check(value)
    return value


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
    from podctl._sync import run_sync
    from podctl.steps import Session
    from podctl.steps.run_cost import run_cost

    session = Session.open(ctx.settings(project, zone, bucket))
    try:
        return run_sync(run_cost(session, run_id, price=price)).to_json()
    finally:
        session.close()


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
        from podctl.cloud.describe import describe, list_slices
        from podctl.steps import Session
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
        api = Session.open(settings).api
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
        from podctl.steps import Session

        grace_seconds = parse_duration(grace, "--grace")
        session = Session.open(ctx.settings(project, zone, bucket))

        async def stop_runs(info: Any) -> list[str]:
            if not session.settings.bucket:
                _notice(f"no bucket (--bucket, PODCTL_BUCKET): runs on {info.name} not signalled")
                return []
            return await budget_lib.stop_runs_on(session.storage, info, session.host_access(info),
                                                 grace_seconds=grace_seconds)

        from podctl.gc import run_keeper
        keep = (run_keeper(session.storage, clock=session.api.server_now)  # podctl/gc.py
                if session.settings.bucket else None)
        reaped = run_sync(budget_lib.reap(session.api, session.settings.parent, dry_run=dry_run,
                                          stop_runs=stop_runs, notice=_notice, keep=keep))
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
