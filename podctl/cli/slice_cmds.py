"""podctl up / ls / status / down."""

from __future__ import annotations

import sys
from typing import Any
from collections.abc import Callable

import click

from podctl.vocabulary import DEFAULT_WAIT
from podctl.cli.common import Context, guarded, runtime_help, slice_help

pass_context = click.make_pass_decorator(Context)


def where_options(fn: Callable) -> Callable:
    fn = click.option("--zone", default=None, help="Zone (default: $CLOUDSDK_COMPUTE_ZONE, "
                      "podctl.toml, gcloud config).")(fn)
    return click.option("--project", default=None, help="Google Cloud project (default: "
                        "$CLOUDSDK_CORE_PROJECT, podctl.toml, gcloud config).")(fn)


def json_option(fn: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (stable; see README).")(fn)


def _open(ctx: Context, project: str | None, zone: str | None, bucket: str | None = None) -> Any:
    """A steps.Session for the command (settings, the API, GCS)."""
    from podctl.steps import Session

    return Session.open(ctx.settings(project, zone, bucket))


@click.command()
@click.option("--slice", "slice_name", required=True, metavar="TYPE", help=slice_help())
@click.option("--name", default=None, help="Slice name (default: USER-TYPE, so a second `up` reuses it).")
@where_options
@click.option("--queued", is_flag=True, help="Ask through a queued resource, which waits for capacity.")
@click.option("--spot", is_flag=True, help="Spot capacity: cheaper, and may be preempted.")
@click.option("--guaranteed", is_flag=True, help="Guaranteed tier of a queued resource.")
@click.option("--num-slices", default=1, show_default=True, type=int,
              help="Multislice: K slices joined over the data-center network (queued).")
@click.option("--valid-for", default=None, metavar="DURATION",
              help="How long a queued resource may wait for capacity (e.g. 6h; default 24h), "
              "then it fails instead of waiting on.")
@click.option("--runtime-version", default=None,
              help=f"TPU VM runtime (default: the generation's: {runtime_help()}).")
@click.option("--no-wait", is_flag=True, help="Return once the slice is asked for.")
@click.option("--timeout", default=DEFAULT_WAIT, show_default=True, metavar="DURATION",
              help="Give up waiting (and delete what this `up` created) after this long.")
@click.option("--max-cost", type=float, default=None, metavar="USD",
              help="Budget: delete the slice once it has cost this much (see below).")
@click.option("--max-hours", default=None, metavar="H",
              help="Budget: delete the slice after H hours (3.5, or 90m, 6h).")
@click.option("--price", type=float, default=None, metavar="USD_PER_CHIP_HOUR",
              help="The chip-hour price for --max-cost (default: podctl.toml [prices], the table).")
@click.option("--reservation", default=None, metavar="NAME",
              help="Use this reservation (a queued resource; NAME or projects/P/locations/Z/reservations/NAME).")
@click.option("--reserved", is_flag=True, help="A node from any matching reservation of the project.")
@click.option("--network", default=None, help="VPC network (default: the project's default).")
@click.option("--subnetwork", default=None, help="Subnetwork (default: the network's own in the region).")
@click.option("--internal-ips", is_flag=True,
              help="No external IPs: podctl connects to the internal addresses (run it inside the VPC).")
@click.option("--service-account", default=None, metavar="EMAIL",
              help="Service account of the TPU VMs (default: the project's compute one).")
@click.option("--scopes", default=None, metavar="S1,S2",
              help="OAuth scopes for it, e.g. cloud-platform (short names get the googleapis prefix).")
@click.option("--tags", default=None, metavar="T1,T2", help="Network tags, for firewall rules.")
@json_option
@pass_context
def up(ctx: Context, slice_name: str, name: str | None, project: str | None, zone: str | None,
       queued: bool, spot: bool, guaranteed: bool, num_slices: int, valid_for: str | None,
       runtime_version: str | None, no_wait: bool, timeout: str, max_cost: float | None,
       max_hours: str | None, price: float | None, reservation: str | None, reserved: bool,
       network: str | None, subnetwork: str | None, internal_ips: bool,
       service_account: str | None, scopes: str | None, tags: str | None, as_json: bool) -> None:
    """Create a slice, or reuse the one of the same name and spec, and wait until it is ready.

    A budget (--max-cost, --max-hours) is written on the slice as labels and is enforced
    only while a podctl process watches: `podctl run` on the slice, or `podctl budget
    check` from cron. Then the run is asked to checkpoint and stop, and the slice is deleted.
    """

    def action() -> None:
        import dataclasses

        from podctl import steps
        from podctl._sync import run_sync
        from podctl.cli.render import ProgressReporter, emit_json, slice_detail

        from podctl.cloud.placement import Placement

        def listed(text: str | None) -> tuple[str, ...]:
            return tuple(t.strip() for t in (text or "").split(",") if t.strip())

        settings = ctx.settings(project, zone)
        placement = Placement(
            reservation=reservation, reserved=reserved, network=network, subnetwork=subnetwork,
            service_account=service_account, scopes=listed(scopes), tags=listed(tags),
            internal_ips=internal_ips)
        request = steps.up_request(settings, steps.SliceOptions(
            slice_type=slice_name, name=name, queued=queued, spot=spot, guaranteed=guaranteed,
            num_slices=num_slices, valid_for=valid_for, runtime_version=runtime_version,
            wait=not no_wait, timeout=timeout, placement=placement))
        from podctl.budget import describe_labels, with_budget

        session = steps.Session.open(settings)
        # A deadline is on the service's clock, as `budget check` reads it: this machine's
        # may be hours off.
        now = (run_sync(session.api.server_clock(settings.parent))
               if max_cost is not None or max_hours is not None else None)
        request = with_budget(request, settings.zone, max_cost=max_cost, max_hours=max_hours,
                              price=price, now=now)
        if not request.spec.slice_type.in_google_table:
            click.echo(f"podctl: note: {request.spec.slice_type.name} ({request.spec.slice_type.topology}) "
                       f"is not in Google's table of {request.spec.slice_type.generation.name} sizes; "
                       "Cloud TPU may refuse it.", err=True)
        with ProgressReporter(f"{request.name} ({request.spec.describe()})") as progress:
            result = run_sync(steps.up(session, request, progress=progress))
        if (max_cost is not None or max_hours is not None) and not result.created:
            # A budget given is a budget kept: written on the slice that already existed.
            from podctl.budget import existing_budget_labels, set_on_existing

            labels = existing_budget_labels(result.info, max_cost=max_cost, max_hours=max_hours,
                                            price=price, now=session.api.server_now())
            info = run_sync(set_on_existing(session.api, settings.parent, result.info, labels))
            result = dataclasses.replace(result, info=info)
            click.echo(f"podctl: budget {describe_labels(labels)} set on {info.name}, which already "
                       "existed: enforced while `podctl run` follows a run on it or `podctl budget "
                       "check` runs", err=True)
        elif result.created and describe_labels(request.labels):
            click.echo(f"podctl: budget {describe_labels(request.labels)}: enforced while `podctl "
                       "run` follows a run on it or `podctl budget check` runs", err=True)
        if as_json:
            emit_json({**result.info.to_json(), "created": result.created})
            return
        verb = "created" if result.created else "reused"
        state = "ready" if result.info.ready else result.info.state
        if result.info.health not in (None, "HEALTHY"):  # maintenance under way, say
            state += f", health {result.info.health}"
        click.echo(f"{verb} {result.info.name}: {state}")
        slice_detail(result.info)

    guarded(action)


@click.command(name="ls")
@where_options
@json_option
@pass_context
def ls(ctx: Context, project: str | None, zone: str | None, as_json: bool) -> None:
    """List the slices (nodes and queued resources) in the zone."""

    def action() -> None:
        from podctl._sync import run_sync
        from podctl.cli.render import emit_json, slice_table
        from podctl.cloud.describe import list_slices
        from podctl.cost import load_price_config, slice_cost

        session = _open(ctx, project, zone)
        settings, api = session.settings, session.api
        slices = run_sync(list_slices(api, settings.parent))
        prices = load_price_config()
        costs = {s.name: slice_cost(s, config=prices) for s in slices}
        if as_json:
            emit_json([{**s.to_json(), "usd_per_hour": costs[s.name].usd_per_hour,
                        "cost_usd": costs[s.name].usd_so_far} for s in slices])
        elif not slices:
            click.echo(f"no slices in {settings.zone} (project {settings.project})")
        else:
            slice_table(slices, costs)

    guarded(action)


@click.command()
@click.argument("name")
@where_options
@json_option
@pass_context
def status(ctx: Context, name: str, project: str | None, zone: str | None, as_json: bool) -> None:
    """Show one slice: state, health, hosts with IPs, topology, age, labels."""

    def action() -> None:
        from podctl._sync import run_sync
        from podctl.cli.render import emit_json, slice_detail
        from podctl.cloud.describe import describe
        from podctl.cloud.maintenance_info import upcoming

        session = _open(ctx, project, zone)
        settings, api = session.settings, session.api
        info = run_sync(describe(api, settings.parent, name))
        maintenance = run_sync(upcoming(api, info))  # v2alpha1 only: cloud/maintenance_info.py
        if as_json:
            emit_json({**info.to_json(), "maintenance": maintenance})
        else:
            slice_detail(info, maintenance)

    guarded(action)


@click.command()
@click.argument("name")
@where_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-wait", is_flag=True, help="Return once the deletion has started.")
@click.option("--timeout", default=DEFAULT_WAIT, show_default=True, metavar="DURATION",
              help="Give up waiting for the deletion after this long.")
@json_option
@pass_context
def down(ctx: Context, name: str, project: str | None, zone: str | None, yes: bool, no_wait: bool,
         timeout: str, as_json: bool) -> None:
    """Delete a slice (a queued resource with its nodes), PREEMPTED and SUSPENDED ones too."""

    def action() -> None:
        from podctl._sync import run_sync
        from podctl.cli.render import ProgressReporter, emit_json
        from podctl.cloud import describe, terminate
        from podctl.cloud.wait import WaitPolicy, wait_deleted
        from podctl.durations import parse_duration
        from podctl.errors import UsageError

        wait_seconds = parse_duration(timeout, "--timeout")
        session = _open(ctx, project, zone)
        settings, api = session.settings, session.api
        info = run_sync(describe.describe(api, settings.parent, name))
        info = run_sync(terminate.owning_slice(api, settings.parent, info))
        if not yes:
            if not sys.stdin.isatty():
                raise UsageError(f"not on a terminal: add --yes to delete {name}.")
            what = f"{info.name} ({info.num_slices} x {info.accelerator_type}, {info.chips} chips, {info.state})"
            if not click.confirm(f"Delete {what}?", default=False):
                raise UsageError("nothing deleted.")

        async def delete_and_wait() -> Any:
            from podctl import tombstones

            deleted = await terminate.delete(api, settings.parent, info)
            # The owner deleted it: a `run --recover` following it must not make it again,
            # and a detached run on it is over.
            tombstones.write(settings.state_dir, info)
            if settings.bucket:
                from podctl.errors import PodctlError
                from podctl.steps import close_runs_of_deleted

                try:
                    storage = session.storage
                except PodctlError:
                    storage = None  # the delete stands; the records stay as they were
                for run_id in await close_runs_of_deleted(settings, storage, info) if storage else []:
                    click.echo(f"podctl: run {run_id} ended with its slice (slice deleted)", err=True)
            if not no_wait:
                with ProgressReporter(f"deleting {name}") as progress:
                    await wait_deleted(api, settings.parent, deleted.name, kind=deleted.kind,
                                       policy=WaitPolicy(timeout=wait_seconds), progress=progress)
            return deleted

        deleted = run_sync(delete_and_wait())
        if as_json:
            emit_json({"name": deleted.name, "kind": deleted.kind, "deleted": not no_wait,
                       "deleting": no_wait, "state_before": deleted.state})
        else:
            click.echo(f"{'deleting' if no_wait else 'deleted'} {deleted.name} "
                       f"({deleted.kind}, was {deleted.state})")

    guarded(action)


COMMANDS = (up, ls, status, down)
