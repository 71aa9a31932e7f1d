"""podctl gc: delete podctl's leftovers that hold quota (steps/collect.py, podctl/policy/gc.py)."""

from __future__ import annotations

from typing import Any

import click

from podctl.cli.common import Context, guarded
from podctl.cli.slice_cmds import json_option, pass_context, where_options

_VERBS = {"delete": "deleted", "keep": "kept", "leave": "not podctl's"}


def _queue_owners(state_dir: Any) -> Any:
    """The run queue (the team's PostgreSQL one, else this machine's queue.db), whose
    entries' slices gc leaves; None when there is no queue."""
    from podctl.queue.place import open_store, queue_url
    from podctl.queue.store import db_path
    from podctl.steps.collect import QueueOwners

    url = queue_url()
    if not url and not db_path(state_dir).exists():
        return None
    with open_store(state_dir, url) as store:
        return QueueOwners(store.token, store.entries())


def _line(item: Any, dry_run: bool) -> str:
    verb = "would delete" if dry_run and item.action == "delete" else _VERBS[item.action]
    if item.error:
        verb = "NOT deleted"
    why = item.reason + (f"; {item.note}" if item.note else "") + (f"; {item.error}" if item.error else "")
    from podctl.cli.render import kind_words

    return f"{verb:13s} {item.info.name:28s} {kind_words(item.info):20s} {item.info.chips:>5d} chips  {why}"


@click.command()
@click.option("--dry-run", is_flag=True, help="List what would be deleted; touch nothing.")
@where_options
@click.option("--bucket", default=None, help="GCS bucket of podctl's runs, to see which still go "
              "(default: $PODCTL_BUCKET, podctl.toml; the fake has its own).")
@json_option
@pass_context
def gc(ctx: Context, dry_run: bool, project: str | None, zone: str | None, bucket: str | None,
       as_json: bool) -> None:
    """Delete podctl's slices that serve no one but hold quota: FAILED, SUSPENDED and
    expired queued resources, PREEMPTED and TERMINATED nodes, and slices over their
    budget (--max-cost, --max-hours) with no run going. Never one with a live run or one
    a queue entry owns; slices podctl did not create are listed, never touched. Without
    --api, both APIs' leftovers (Cloud TPU's and Compute Engine's) in the zone."""

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.base.errors import CloudError
        from podctl.cli.render import emit_json
        from podctl.steps import Session
        from podctl.steps.collect import collect

        session = Session.open(ctx.settings(project, zone, bucket))
        settings = session.settings
        queue = _queue_owners(settings.state_dir)

        def notice(text: str) -> None:
            click.echo(f"podctl: {text}", err=True)

        found = run_sync(collect(session, dry_run=dry_run, queue=queue, notice=notice))
        if as_json:
            emit_json([item.to_json() for item in found])
        elif not found:
            click.echo(f"no leftovers in {settings.zone}")
        for item in found if not as_json else ():
            click.echo(_line(item, dry_run))
        refused = [item for item in found if item.error]
        if refused:
            raise CloudError(f"could not delete {', '.join(i.info.name for i in refused)}: "
                             f"{refused[0].error}")

    guarded(action)


COMMANDS = (gc,)
