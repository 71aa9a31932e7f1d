"""podctl up / ls / status / down."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from podctl.base.vocabulary import DEFAULT_WAIT
from podctl.cli.common import COUNT, POSITIVE, Context, guarded, runtime_help, slice_help

pass_context = click.make_pass_decorator(Context)
Command = TypeVar("Command", bound=Callable[..., Any])  # what an option decorator takes and gives back


def where_options(fn: Command) -> Command:
    fn = click.option("--zone", default=None, help="Zone (default: $CLOUDSDK_COMPUTE_ZONE, "
                      "podctl.toml, gcloud config).")(fn)
    return click.option("--project", default=None, help="Google Cloud project (default: "
                        "$CLOUDSDK_CORE_PROJECT, podctl.toml, gcloud config).")(fn)


def json_option(fn: Command) -> Command:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (stable; see docs/reference/json.md).")(fn)


def _open(ctx: Context, project: str | None, zone: str | None, bucket: str | None = None) -> Any:
    """A steps.Session for the command (settings, the API, GCS)."""
    from podctl.steps import Session

    return Session.open(ctx.settings(project, zone, bucket))


@click.command()
@click.option("--slice", "slice_type", required=True, metavar="TYPE", help=slice_help())
@click.option("--name", default=None, help="Slice name (default: USER-TYPE, so a second `up` reuses it).")
@where_options
@click.option("--queued", is_flag=True, help="Ask through a queued resource, which waits for capacity.")
@click.option("--spot", is_flag=True, help="Spot capacity: cheaper, and may be preempted.")
@click.option("--guaranteed", is_flag=True, help="Guaranteed tier of a queued resource.")
@click.option("--num-slices", default=1, show_default=True, type=COUNT,
              help="Multislice: K slices joined over the data-center network (queued).")
@click.option("--elastic", is_flag=True,
              help="With --num-slices K: one queued resource per slice, so that `run --elastic` "
              "asks for a preempted slice again on its own while the others train on.")
@click.option("--valid-for", default=None, metavar="DURATION",
              help="How long a queued resource may wait for capacity (e.g. 6h; default 24h), "
              "then it fails instead of waiting on.")
@click.option("--runtime-version", default=None,
              help=f"TPU VM runtime (default: the generation's: {runtime_help()}).")
@click.option("--no-wait", is_flag=True, help="Return once the slice is asked for.")
@click.option("--timeout", default=DEFAULT_WAIT, show_default=True, metavar="DURATION",
              help="Give up waiting (and delete what this `up` created) after this long.")
@click.option("--max-cost", type=POSITIVE, default=None, metavar="USD",
              help="Budget: delete the slice once it has cost this much (see below).")
@click.option("--max-hours", default=None, metavar="H",
              help="Budget: delete the slice after H hours (3.5, or 90m, 6h).")
@click.option("--price", type=POSITIVE, default=None, metavar="USD_PER_CHIP_HOUR",
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
@click.option("--trust-key", "trust_keys", multiple=True, metavar="PATH",
              help="Also accept runs through the watchers signed by this RSA public key (a colleague's "
              "or a queue ticker's keys/pointer_rsa3072.pub.pem); repeatable. Pinned at creation.")
@json_option
@pass_context
def up(ctx: Context, slice_type: str, name: str | None, project: str | None, zone: str | None,
       queued: bool, spot: bool, guaranteed: bool, num_slices: int, elastic: bool, valid_for: str | None,
       runtime_version: str | None, no_wait: bool, timeout: str, max_cost: float | None,
       max_hours: str | None, price: float | None, reservation: str | None, reserved: bool,
       network: str | None, subnetwork: str | None, internal_ips: bool,
       service_account: str | None, scopes: str | None, tags: str | None, trust_keys: tuple[str, ...],
       as_json: bool) -> None:
    """Create a slice, or reuse the one of the same name and spec, and wait until it is ready.

    A budget (--max-cost, --max-hours) is written on the slice as labels and is enforced
    only while a podctl process watches: `podctl run` on the slice, or `podctl budget
    check` from cron. Then the run is asked to checkpoint and stop, and the slice is deleted.
    """

    def action() -> None:
        from podctl import steps
        from podctl.base._sync import run_sync
        from podctl.cli.render import ProgressReporter, emit_json, slice_detail

        def listed(text: str | None) -> tuple[str, ...]:
            return tuple(t.strip() for t in (text or "").split(",") if t.strip())

        settings = steps.settings_for_slice(ctx.settings(project, zone), slice_type)
        placement = steps.Placement(
            reservation=reservation, reserved=reserved, network=network, subnetwork=subnetwork,
            service_account=service_account, scopes=listed(scopes), tags=listed(tags),
            internal_ips=internal_ips)
        request = steps.up_request(settings, steps.SliceOptions(
            slice_type=slice_type, name=name, queued=queued, spot=spot, guaranteed=guaranteed,
            num_slices=num_slices, valid_for=valid_for, runtime_version=runtime_version,
            elastic=elastic, wait=not no_wait, timeout=timeout, placement=placement, trusted_keys=trust_keys))
        budget = steps.Budget(max_cost=max_cost, max_hours=max_hours, price=price)
        session = steps.Session.open(settings)
        request = run_sync(steps.budget_request(session, request, budget))
        if not request.spec.slice_type.in_google_table:
            click.echo(f"podctl: note: {request.spec.slice_type.name} ({request.spec.slice_type.topology}) "
                       f"is not in Google's table of {request.spec.slice_type.generation.name} sizes; "
                       "Cloud TPU may refuse it.", err=True)
        with ProgressReporter(f"{request.name} ({request.spec.describe()})") as progress:
            result = run_sync(steps.up(session, request, progress=progress))
        result, budget_set = run_sync(steps.keep_budget(session, request, result, budget))
        if budget_set is not None and budget_set.on_existing:
            click.echo(f"podctl: budget {budget_set.said} set on {result.info.name}, which already "
                       "existed: enforced while `podctl run` follows a run on it or `podctl budget "
                       "check` runs", err=True)
        elif budget_set is not None:
            click.echo(f"podctl: budget {budget_set.said}: enforced while `podctl "
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
        from podctl.base._sync import run_sync
        from podctl.cli.render import emit_json, slice_table
        from podctl.steps.slice_cost import slice_costs

        session = _open(ctx, project, zone)
        settings = session.settings
        priced = run_sync(slice_costs(session)).slices
        if as_json:
            emit_json([{**p.info.to_json(), "usd_per_hour": p.cost.usd_per_hour,
                        "cost_usd": p.cost.usd_so_far} for p in priced])
        elif not priced:
            other = ("" if settings.api != "tpu" else  # --api tpu: Compute Engine's were not asked
                     "; Compute Engine's (tpu7x-N, or made with --api compute): `podctl ls --api compute`")
            click.echo(f"no slices in {settings.zone} (project {settings.project}){other}")
        else:
            slice_table([p.info for p in priced], {p.info.name: p.cost for p in priced})

    guarded(action)


@click.command()
@click.argument("name")
@where_options
@json_option
@pass_context
def status(ctx: Context, name: str, project: str | None, zone: str | None, as_json: bool) -> None:
    """Show one slice: state, health, hosts with IPs, topology, age, labels."""

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.cli.render import emit_json, slice_detail
        from podctl.steps import slice_status

        found = run_sync(slice_status(_open(ctx, project, zone), name))
        if as_json:
            emit_json({**found.info.to_json(), "maintenance": found.maintenance, "watchers": found.watchers})
        else:
            slice_detail(found.info, found.maintenance_said(), found.watchers_said())

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
        from podctl import steps
        from podctl.base._sync import run_sync
        from podctl.base.durations import parse_duration
        from podctl.base.errors import UsageError
        from podctl.cli.render import ProgressReporter, emit_json, kind_words

        parse_duration(timeout, "--timeout")  # refused before anything connects
        session = _open(ctx, project, zone)
        info = run_sync(steps.to_delete(session, name))
        if not yes:
            if not sys.stdin.isatty():
                raise UsageError(f"not on a terminal: add --yes to delete {name}.")
            what = f"{info.name} ({info.num_slices} x {info.accelerator_type}, {info.chips} chips, {info.state})"
            if not click.confirm(f"Delete {what}?", default=False):
                raise UsageError("nothing deleted.")

        def notice(text: str) -> None:
            click.echo(f"podctl: {text}", err=True)

        deleted = run_sync(steps.down(session, name, wait=not no_wait, timeout=timeout, found=info,
                                      notice=notice,
                                      waiting=lambda _: ProgressReporter(f"deleting {name}")))
        if as_json:
            emit_json({"name": deleted.name, "kind": deleted.kind, "deleted": not no_wait,
                       "deleting": no_wait, "state_before": deleted.state})
        else:
            click.echo(f"{'deleting' if no_wait else 'deleted'} {deleted.name} "
                       f"({kind_words(deleted)}, was {deleted.state})")

    guarded(action)


COMMANDS = (up, ls, status, down)
