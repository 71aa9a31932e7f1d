"""podctl gc: delete podctl's leftovers that hold quota (podctl/gc.py)."""

from __future__ import annotations

from typing import Any

import click

from podctl.cli.common import Context, guarded
from podctl.cli.slice_cmds import json_option, pass_context, where_options

_VERBS = {"delete": "deleted", "keep": "kept", "leave": "not podctl's"}


def _queue_keeper(state_dir: Any) -> Any:
    """What this machine's run queue still owns (no queue.db: nothing)."""
    from podctl import gc
    from podctl.queue.store import Store, db_path

    if not db_path(state_dir).exists():
        return None
    with Store(db_path(state_dir)) as store:
        return gc.queue_keeper(store.token, store.entries())


def _storage(settings: Any) -> Any:
    from podctl.cloud.connect import storage_endpoint
    from podctl.storage import Storage

    return Storage.connect(settings.bucket, endpoint=storage_endpoint(settings))


def _line(item: Any, dry_run: bool) -> str:
    verb = "would delete" if dry_run and item.action == "delete" else _VERBS[item.action]
    if item.error:
        verb = "NOT deleted"
    why = item.reason + (f"; {item.note}" if item.note else "") + (f"; {item.error}" if item.error else "")
    return f"{verb:13s} {item.info.name:28s} {item.info.kind:15s} {item.info.chips:>5d} chips  {why}"


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
    a queue entry owns; slices podctl did not create are listed, never touched."""

    def action() -> None:
        from podctl import gc as gc_lib
        from podctl._sync import run_sync
        from podctl.cli.render import emit_json
        from podctl.cloud.connect import connect
        from podctl.errors import CloudError

        settings = ctx.settings(project, zone, bucket)
        api = connect(settings)
        queue_keep = _queue_keeper(settings.state_dir)
        storage = _storage(settings) if settings.bucket else None

        async def no_bucket(info: Any) -> str | None:
            if gc_lib.dead_reason(info, api.server_now()) is None:
                return "no bucket (--bucket, PODCTL_BUCKET) to see whether a run goes on it"
            return None

        async def go() -> list[Any]:
            runs_keep = (gc_lib.run_keeper(storage, clock=api.server_now) if storage is not None
                         else no_bucket)

            async def close_runs(deleting: list[Any]) -> None:
                # before the delete: a `--recover` follower then reads why its slice went
                if storage is not None:
                    for run_id in await gc_lib.close_runs(storage, deleting):
                        click.echo(f"podctl: run {run_id} ended with its slice (collected)", err=True)

            return await gc_lib.collect(api, settings.parent, dry_run=dry_run,
                                        keep=gc_lib.all_of(queue_keep, runs_keep),
                                        before_delete=close_runs)

        found = run_sync(go())
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
