"""podctl queue add / ls / show / cancel / tick: queued runs for cron."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from podctl.cli.common import COUNT, POSITIVE, Context, Number, ScriptCommand, guarded, refuse_blank, slice_help
from podctl.cli.queue_store import open_queue as _store
from podctl.cli.queue_store import opener as _opener
from podctl.cli.slice_cmds import json_option, pass_context, where_options
from podctl.cli.text import shown

TICK_HELP = """One reconcile pass over the queue (for cron): each entry takes its next step.

\b
Never waits on a slice or a run. Locks the queue itself: a second tick at the same
moment logs "another tick is running" and exits 0 (no flock(1) needed). Without a
terminal it logs one JSON object per line (timestamp, level, event, entry, run_id,
from/to); env values are never logged.

\b
Exit codes:
  0  the pass ran (also when entries failed: see `podctl queue ls`), or another
     tick was running
  1  podctl itself could not work: queue database unreadable or from a newer
     podctl, Cloud TPU API or GCS unreachable or refusing
  2  usage or configuration: a bad option, no project, no credentials
"""


@click.group()
def queue() -> None:
    """Queued runs: add them now, let `podctl queue tick` (cron) run them.

    \b
    Who: a SQLite queue (the default, queue.db in the state dir) is one user's, and
    its owners are labels. A PostgreSQL queue (queue_url) is a team's: an entry's owner
    is the database login that added it, a user sees and cancels only their own, quotas
    and teams need podctl_admin, --env values are sealed to the tickers' keys
    (docs/guides/queue.md, "Who may do what")."""


def _me(ctx: Context) -> str:
    from podctl.base.settings import resolve_account
    from podctl.queue.entry import default_owner

    return default_owner(resolve_account(backend=ctx.backend))


@queue.command(cls=ScriptCommand)
@click.option("--slice", "slice_type", required=True, metavar="TYPE", help=slice_help())
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--priority", default="normal", show_default=True, metavar="high|normal|low|N",
              help="Higher starts first (high=100, normal=0, low=-100, or any whole number).")
@click.option("--spot", is_flag=True, help="A spot queued resource (cheaper; may be preempted).")
@click.option("--queued", is_flag=True, help="An on-demand queued resource, which waits for capacity.")
@click.option("--valid-for", default=None, metavar="DURATION",
              help="How long the queued resource may wait for capacity (e.g. 2h; default 24h).")
@click.option("--num-slices", default=1, show_default=True, type=COUNT,
              help="Multislice: K slices joined over the data-center network (queued).")
@click.option("--elastic", is_flag=True,
              help="With --num-slices K: one queued resource per slice; when one is lost the run "
              "goes on on the others, the lost one is asked for again, and the run grows back.")
@click.option("--min-slices", default=None, type=Number(whole=True, low=1, high=4096), metavar="N",
              help="With --elastic: below N slices the run waits (no step) for lost ones (default 1).")
@click.option("--grow-deadline", default=None, metavar="DURATION",
              help="With --elastic: stop asking for lost slices after this long (default 6h).")
@click.option("--max-hours", type=POSITIVE, default=None, help="Stop the run after this many hours.")
@click.option("--max-cost", type=POSITIVE, default=None, metavar="USD",
              help="Stop the run once its slice has cost this much (needs a known price).")
@click.option("--max-attempts", type=COUNT, default=3, show_default=True,
              help="Attempts after infrastructure failures (preemption, a failed slice).")
@click.option("--name", default=None, help="A name for the entry (default: the script's).")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V|K",
              help="Environment for the script (never printed; in SQLite: the 0600 queue db; in "
              "PostgreSQL: sealed to the tickers' keys); K alone: its value from podctl's own "
              "environment, out of argv.")
@click.option("--env-file", "env_files", multiple=True, type=click.Path(path_type=Path),
              metavar="FILE", help="KEY=VALUE lines (# comments) for the script's environment; --env wins.")
@click.option("--workdir", type=click.Path(path_type=Path), default=None,
              help="Directory to ship, bundled now (default: the script's directory).")
@click.option("--via", default=None, metavar="CHANNEL",
              help="How its run reaches the hosts, as `podctl run --via`: boot, ssh or auto. "
                   "Default: the ticker's PODCTL_VIA, else auto.")
@click.option("--preflight", "preflight", is_flag=True,
              help="Compile the step for the slice now (podctl preflight): refuse an entry that "
              "does not fit in HBM; the report is stored with the entry.")
@where_options
@click.option("--bucket", default=None, help="GCS bucket for the bundle and the run's files.")
@json_option
@pass_context
def add(ctx: Context, slice_type: str, script: Path, args: tuple[str, ...], priority: str,
        spot: bool, queued: bool, valid_for: str | None, num_slices: int, elastic: bool,
        min_slices: int | None, grow_deadline: str | None, max_hours: float | None,
        max_cost: float | None, max_attempts: int, name: str | None, env_pairs: tuple[str, ...],
        env_files: tuple[Path, ...],
        workdir: Path | None, via: str | None, preflight: bool, project: str | None, zone: str | None,
        bucket: str | None, as_json: bool) -> None:
    """Queue SCRIPT [ARGS...] to run on a slice; the workdir is bundled now."""

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.base.durations import parse_duration
        from podctl.base.errors import InvalidValueError
        from podctl.cli.render import emit_json
        from podctl.queue import add as adding
        from podctl.queue.entry import check_name, default_owner, parse_priority
        from podctl.steps import RunSpec, Session, parse_env

        if spot and queued:
            raise InvalidValueError("--spot and --queued are two tiers: choose one.")
        refuse_blank(grow_deadline, "--grow-deadline")  # '' is a mistake, not the default 6h
        if name is not None:
            check_name(name, "--name")
        spec = RunSpec(script=script, args=tuple(args), workdir=workdir,
                       env=parse_env(list(env_pairs), env_files))
        request = adding.AddRequest(
            slice_type=slice_type, spec=spec, name=name, priority=parse_priority(priority),
            tier="spot" if spot else "queued" if queued else "on-demand",
            valid_for=parse_duration(valid_for, "--valid-for") if valid_for else None,
            max_hours=max_hours, max_cost=max_cost, max_attempts=max_attempts, via=via,
            num_slices=num_slices, elastic=elastic, min_slices=min_slices,
            grow_deadline=parse_duration(grow_deadline, "--grow-deadline") if grow_deadline else None)
        adding.validate(request)
        settings = ctx.settings(project, zone, bucket)
        adding.check_api(settings.api)
        adding.check_priced(request, settings.zone)  # a budget the tick could not price: refused
        if preflight:  # before anything is bundled or stored
            from podctl.cli.preflight_cmds import compile_checked

            request.preflight = compile_checked(slice_type, spec, num_slices=num_slices).to_json()
        bucket_name = settings.require_bucket()
        with _store() as store:  # first: a bad db is refused before anything is uploaded
            digest, inside = run_sync(adding.bundle_now(
                Session(settings), request, lambda text: click.echo(f"podctl: {text}", err=True)))
            entry = adding.add(store, request, project=settings.project, zone=settings.zone,
                               bucket=bucket_name, bundle_hash=digest, script=inside,
                               owner=default_owner(settings.account))
        if as_json:
            emit_json(entry.to_json())
        else:
            count = f"{entry.num_slices} x " if entry.num_slices > 1 else ""
            elastic_word = " elastic" if entry.elastic else ""
            click.echo(f"queued {entry.id} ({shown(entry.name)}: {count}{entry.accelerator_type} {entry.tier}"
                       f"{elastic_word}, "
                       f"bundle {digest[:12]})")

    guarded(action)


def _row(e: Any) -> str:
    from podctl.queue.entry import priority_word

    code = "-" if e.exit_code is None else str(e.exit_code)
    slice_state = ((e.current() or {}).get("slice_state") or "") if e.state == "provisioning" else ""
    state = e.state + (f" ({slice_state})" if slice_state else "") + (
        " (waits: quota)" if e.state == "pending" and e.waiting else "") + (
        " (preempting)" if e.state == "running" and (e.current() or {}).get("preempting") else "")
    kind = (f"{e.num_slices}x" if e.num_slices > 1 else "") + e.accelerator_type  # 3xv5p-8: a multislice
    line = (f"{e.id:>5}  {shown(e.name)[:24]:24s} {shown(e.owner)[:24]:24s} {kind:10s} "
            f"{e.tier:9s} {priority_word(e.priority):>6}  {shown(state):36s} {e.attempt}/{e.max_attempts}"
            f"  exit {code:>3s}  {e.run_id or ''}")
    if e.state == "pending" and e.waiting:
        line += "\n       " + shown(e.waiting)
    return line


@queue.command(name="ls")
@click.option("--mine", is_flag=True, help="Only the entries you added (SQLite: your gcloud account, "
              "else OS user; PostgreSQL: your database role).")
@json_option
@pass_context
def ls(ctx: Context, mine: bool, as_json: bool) -> None:
    """The entries, highest priority first (--json: all fields, env keys only).

    \b
    SQLite (one machine's queue): one user, everyone's entries. PostgreSQL: the
    database's roles say: a user sees its own, a ticker or podctl_admin all."""

    def action() -> None:
        from podctl.cli.render import emit_json

        with _store() as store:
            entries = store.entries()
            me = store.me(_me(ctx)) if mine else ""
        if mine:
            entries = [e for e in entries if e.owner == me]
        if as_json:
            emit_json([e.to_json() for e in entries])
        elif not entries:
            click.echo("no entries of yours (`podctl queue ls` shows everyone's)" if mine else
                       "the queue is empty (`podctl queue add --slice v5p-8 train.py`)")
        else:
            click.echo(f"{'ID':>5}  {'NAME':24s} {'OWNER':24s} {'SLICE':10s} {'TIER':9s} {'PRIO':>6}  "
                       f"{'STATE':36s} TRY  EXIT      RUN")
            for e in entries:
                click.echo(_row(e))

    guarded(action)


@queue.command()
@click.argument("entry_id", type=COUNT)
@json_option
def show(entry_id: int, as_json: bool) -> None:
    """One entry: its request, state, attempts (slices, run ids), error, cost, and (a
    PostgreSQL queue) each state change with the database role that made it."""

    def action() -> None:
        import time

        from podctl.cli.render import emit_json

        with _store() as store:
            entry = store.get(entry_id)
            history = store.history(entry_id)
        data = entry.to_json()
        # the spend so far: chip-hours its slices held (READY to end), and their price
        data["chip_hours"] = round(entry.chip_hours(0.0, time.time()), 2)
        data["history"] = history
        if as_json:
            emit_json(data)
            return
        attempts = data.pop("attempts")
        history_rows = data.pop("history")
        for key, value in data.items():
            if key in ("created", "updated", "started", "ended", "next_try_at"):
                if not value:  # 0.0: never set (no backoff pending), not the epoch
                    value = None
                elif isinstance(value, (int, float)):
                    value = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
            if key == "preflight" and isinstance(value, dict):  # the whole report: --json
                value = (f"fits {value.get('slice')}: "
                         f"{value['hbm']['needed_bytes'] / 2**30:.2f} GiB of HBM per chip, "
                         f"{value['flops']['per_step'] or 0:.3e} FLOPs per step")
            click.echo(f"{key:16s} {shown(str(value)) if value is not None and value != [] else '-'}")
        for a in attempts:
            click.echo(shown(f"attempt {a['attempt']}: slice {a['slice']}, run {a.get('run_id') or '-'}, "
                             f"{a.get('outcome') or 'in progress'}"
                             + (f" ({a['error']})" if a.get("error") else "")))
        for h in history_rows:  # PostgreSQL: who made each state change (the database's record)
            at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(h["at"]))
            click.echo(shown(f"{at}  {h['from_state'] or 'added'} -> "
                             f"{h['to_state']} by {h['actor']}" + (f" ({h['reason']})" if h["reason"] else "")))

    guarded(action)


def _tick_context(ctx: Context, log: Any, project: str | None, zone: str | None) -> Any:
    """Entries carry their own project and zone; these settings pick the backend and
    the credentials (and, for Google Cloud, must resolve as for any command)."""
    from podctl.queue.context import TickContext

    return TickContext.connect(ctx.settings(project, zone), log)


@queue.command()
@click.argument("entry_id", type=COUNT)
@where_options
@pass_context
def cancel(ctx: Context, entry_id: int, project: str | None, zone: str | None) -> None:
    """Cancel an entry: stop its run if it runs, delete its slice or queued resource."""

    def action() -> None:
        from podctl.base.errors import QueueError
        from podctl.queue import log as queue_log
        from podctl.queue import tick

        with _store() as store:
            before = store.get(entry_id)  # NoSuchEntryError before anything connects
        log = queue_log.configure(sys.stderr)
        entry = tick.cancel(_tick_context(ctx, log, project, zone), _opener(), entry_id)
        if before.terminal:  # its slices were cleaned up all the same
            raise QueueError(f"entry {entry.id} had already ended ({entry.state}); nothing to cancel.")
        click.echo(f"entry {entry.id} is {entry.state}")

    guarded(action)


@queue.command(name="tick", help=TICK_HELP)
@click.option("--loop", "interval", default=None, metavar="INTERVAL",
              help="Pass after pass, INTERVAL apart (e.g. 60s), until SIGINT or SIGTERM.")
@where_options
@pass_context
def tick_cmd(ctx: Context, interval: str | None, project: str | None, zone: str | None) -> None:
    def action() -> None:
        from podctl.base.durations import parse_duration
        from podctl.queue import log as queue_log
        from podctl.queue import tick
        seconds = parse_duration(interval, "--loop") if interval else None
        opener = _opener()
        # a bad or unreachable queue: exit 1 before the cloud is touched (once it has
        # started, a loop rides out a database that goes away for a while)
        with opener() as store:
            # this machine's key joins those new entries' --env values are sealed to
            store.register_ticker()
        log = queue_log.configure()
        context = _tick_context(ctx, log, project, zone)
        if seconds is None:
            tick.tick(context, opener)
        else:
            tick.loop(context, opener, seconds)

    guarded(action)


from podctl.cli import queue_admin  # noqa: E402 (the quota, team and migrate commands join the group)

queue_admin.register(queue)

COMMANDS = (queue,)
