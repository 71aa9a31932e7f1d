"""podctl profile: a JAX profiler trace of a running run, on demand (steps/profiles.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from podctl.cli.common import COUNT, Context, bucket_option, guarded, hosts_checked
from podctl.cli.slice_cmds import json_option, pass_context, where_options

OPEN_HINT = ("open it with TensorBoard's profile plugin: pip install tensorboard "
             "tensorboard-plugin-profile; tensorboard --logdir {where}")


@click.command()
@click.argument("run_id", metavar="RUN_ID")
@click.option("--steps", default=5, show_default=True, metavar="N", type=COUNT,
              help="Steps to trace, from the next step boundary (after the compile step).")
@click.option("--hosts", "hosts_text", default="all", show_default=True, metavar="all|0,3", callback=hosts_checked,
              help="The hosts whose processes trace.")
@click.option("--pull", "pull_dir", default=None, metavar="DIR",
              type=click.Path(path_type=Path, file_okay=False),
              help="Download the run's traces to DIR (a TensorBoard log directory); no new trace.")
@click.option("--timeout", default="10m", show_default=True, metavar="DURATION",
              help="How long to wait for every host's trace.")
@click.option("--no-wait", is_flag=True, help="Ask, and return at once.")
@where_options
@bucket_option
@json_option
@pass_context
def profile(ctx: Context, run_id: str, steps: int, hosts_text: str, pull_dir: Path | None,
            timeout: str, no_wait: bool, project: str | None, zone: str | None,
            bucket: str | None, as_json: bool) -> None:
    """Capture a JAX profiler trace of a running run for N steps on its hosts (the
    template answers; a script of your own can, see docs/guides/observability.md), into the run's folder in
    GCS: gs://BUCKET/podctl/runs/RUN_ID/profiles, a TensorBoard log directory.

    \b
    podctl profile RUN_ID --steps 5            trace 5 steps on every host, wait for it
    podctl profile RUN_ID --pull ./profiles    download; tensorboard --logdir ./profiles
    """

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.base.durations import parse_duration
        from podctl.base.errors import JobError
        from podctl.cli.render import emit_json
        from podctl.steps import Session
        from podctl.steps.profiles import pull_profiles, take_profile

        wait_seconds = parse_duration(timeout, "--timeout")
        session = Session.open(ctx.settings(project, zone, bucket))
        if pull_dir is not None:
            written = run_sync(pull_profiles(session, run_id, pull_dir))
            if as_json:
                emit_json({"run_id": run_id, "files": [str(p) for p in written]})
                return
            if not written:
                raise JobError(f"run {run_id} has no traces yet; `podctl profile {run_id}` takes one "
                               "while it runs.")
            click.echo(f"{len(written)} file(s) in {pull_dir}; " + OPEN_HINT.format(where=pull_dir))
            return

        def asked(request: Any, where: str) -> None:
            if not as_json:
                click.echo(f"asked run {request.run_id} for a trace of {steps} steps on "
                           f"{'every host' if hosts_text == 'all' else 'hosts ' + hosts_text} "
                           f"(profile {request.id})", err=True)

        request, where = run_sync(take_profile(session, run_id, steps, hosts_text, asked=asked,
                                               wait_seconds=None if no_wait else wait_seconds))
        if as_json:
            emit_json({**request.to_json(), "logdir": where})
        else:
            for host, ack in sorted(request.acks.items()):
                what = ack.get("error") or (f"steps {ack.get('first_step')}-{ack.get('last_step')}, "
                                            f"{len(ack.get('files', []))} file(s)")
                click.echo(f"host {host}: {what}")
            if not no_wait or request.acks:
                click.echo(OPEN_HINT.format(where=where))
        if not no_wait and request.missing:
            raise JobError(f"no trace from host {', '.join(map(str, request.missing))} (the run ended, "
                           f"or --timeout {timeout} passed); does the script read PODCTL_CONTROL_DIR "
                           "as the template does?")

    guarded(action)


COMMANDS = (profile,)
