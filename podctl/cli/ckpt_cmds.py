"""podctl ckpt ls / pull: a run's checkpoints in GCS."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from podctl.cli.common import Context, Number, bucket_option, guarded
from podctl.cli.slice_cmds import json_option, pass_context, where_options
from podctl.cli.text import shown

if TYPE_CHECKING:
    from podctl import steps


def _run_checkpoints(session: steps.Session, run_id: str) -> tuple[Any, str, list[Any]]:
    from podctl import steps
    from podctl.base._sync import run_sync

    return run_sync(steps.run_checkpoints(session, run_id))


@click.group()
def ckpt() -> None:
    """A run's checkpoints (orbax, in GCS): list them, download one."""


@ckpt.command(name="ls")
@click.argument("run_id")
@where_options
@bucket_option
@json_option
@pass_context
def ckpt_ls(ctx: Context, run_id: str, project: str | None, zone: str | None, bucket: str | None,
            as_json: bool) -> None:
    """List RUN_ID's checkpoint steps: size, time, complete or not."""

    def action() -> None:
        import time

        from podctl import steps
        from podctl.cli.render import emit_json

        session = steps.Session(ctx.settings(project, zone, bucket), api=None)
        _, directory, found = _run_checkpoints(session, run_id)
        if as_json:
            emit_json({"run_id": run_id, "directory": directory,
                       "checkpoints": [c.to_json() for c in found]})
            return
        if not found:
            click.echo(f"no checkpoints in {directory}")
            return
        click.echo(f"{directory}")
        click.echo(f"{'STEP':>8}  {'SIZE':>10}  {'FILES':>5}  {'SAVED (UTC)':19}  STATE")
        for c in found:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.updated))
            click.echo(f"{c.step:>8}  {_size(c.size_bytes):>10}  {c.objects:>5}  {when:19}  "
                       f"{shown(c.state)}")

    guarded(action)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class _Bar:
    """A progress bar on a terminal; without one, a line at each quarter."""

    def __init__(self, what: str):
        self.what, self.tty = what, sys.stderr.isatty()
        self._progress: Any = None
        self._task: Any = None
        self._quarter = -1

    def __enter__(self) -> _Bar:
        if self.tty:
            from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

            self._progress = Progress("[progress.description]{task.description}", BarColumn(),
                                      DownloadColumn(), TransferSpeedColumn(), transient=True)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.what, total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)

    def __call__(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)
            return
        quarter = 4 if total == 0 else done * 4 // total
        if quarter != self._quarter:
            self._quarter = quarter
            click.echo(f"podctl: {self.what}: {quarter * 25}% of {_size(total)}", err=True)


@ckpt.command(name="pull")
@click.argument("run_id")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
@click.option("--step", type=Number(whole=True, low=0), default=None,
              help="The step (default: the latest complete one).")
@click.option("--parallel", type=Number(whole=True, low=1, high=128), default=16, show_default=True,
              help="Objects downloaded at once.")
@where_options
@bucket_option
@pass_context
def ckpt_pull(ctx: Context, run_id: str, directory: Path, step: int | None, parallel: int,
              project: str | None, zone: str | None, bucket: str | None) -> None:
    """Download one of RUN_ID's checkpoints to DIRECTORY/STEP/ (orbax can restore from there)."""

    def action() -> None:
        from podctl import steps
        from podctl.base._sync import run_sync

        session = steps.Session(ctx.settings(project, zone, bucket), api=None)
        result = run_sync(steps.pull_checkpoint(session, run_id, directory, step=step,
                                                parallel=parallel,
                                                pulling=lambda chosen: _Bar(f"step {chosen.step}")))
        if result.skipped:
            click.echo(f"podctl: skipped checkpoint {shown(result.skipped)}; pulled step {result.step}, "
                       "the newest whole one", err=True)
        click.echo(f"pulled step {result.step}: {result.files} files, {_size(result.size_bytes)} "
                   f"in {result.seconds:.1f}s -> {result.directory}")

    guarded(action)


COMMANDS = (ckpt,)
