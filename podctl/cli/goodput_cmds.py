"""podctl goodput RUN_ID: where a run's chip-hours went."""

from __future__ import annotations

import click

from podctl.cli.common import Context, bucket_option, guarded
from podctl.cli.cost_cmds import price_option
from podctl.cli.slice_cmds import json_option, pass_context, where_options

LABELS = {
    "setup": "host set-up (bundle, environment)",
    "startup": "start-up and compile",
    "checkpoint_restore": "checkpoint restore",
    "productive": "productive steps",
    "checkpoint_save": "checkpoint save (blocking)",
    "wasted": "wasted (steps redone)",
    "recovery": "recovery (preemption to training again)",
    "slice_lost": "elastic: slice lost to training on fewer",
    "growing_back": "elastic: growing back to more slices",
    "reinitialization": "elastic: reinitialisation (restore, compile)",
    "fewer_slices": "elastic: chips missing while on fewer",
    "idle": "idle / unreported",
}


@click.command()
@click.argument("run_id")
@price_option
@where_options
@bucket_option
@json_option
@pass_context
def goodput(ctx: Context, run_id: str, price: float | None, project: str | None,
            zone: str | None, bucket: str | None, as_json: bool) -> None:
    """Where RUN_ID's chip-hours went: set-up, start-up and compile, productive steps,
    checkpoints, steps redone, recovery, idle; each in hours, chip-hours and dollars.
    The buckets add up to the run's billed slice time (`podctl cost RUN_ID`)."""

    def action() -> None:
        from podctl.base import numbers
        from podctl.base._sync import run_sync
        from podctl.cli.render import emit_json
        from podctl.steps import Session
        from podctl.steps.goodput import run_goodput

        numbers.check_price(price)
        session = Session.open(ctx.settings(project, zone, bucket))
        try:
            report = run_sync(run_goodput(session, run_id, price=price))
        finally:
            session.close()
        if as_json:
            emit_json(report.to_json())
            return
        share = "?" if report.goodput is None else f"{report.goodput:.1%}"
        click.echo(f"run {run_id}: {report.total_seconds / 3600:,.3f} h on {report.chips} chips, "
                   f"{report.attempts} attempt{'s' if report.attempts != 1 else ''}; goodput {share}")
        total = report.total_seconds or 1.0
        for b in report.buckets:
            click.echo(f"  {LABELS[b.name]:42s} {b.seconds:10.1f} s {b.seconds / total:6.1%} "
                       f"{b.chip_hours:10.3f} chip-h  {numbers.fmt_usd(b.usd):>12s}")
        for attempt, slow in report.slow_hosts:
            where = "" if attempt == run_id else f" (attempt {attempt})"
            click.echo(f"  {slow.describe()}{where}")

    guarded(action)


COMMANDS = (goodput,)
