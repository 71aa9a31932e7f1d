"""podctl plot: pictures of runs (podctl/policy/plot.py draws them)."""

from __future__ import annotations

from pathlib import Path

import click

from podctl.cli.common import Context, bucket_option, guarded
from podctl.cli.slice_cmds import pass_context, where_options


@click.command()
@click.argument("run_ids", nargs=-1, required=True, metavar="RUN_ID...")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), default=None,
              metavar="FILE.png|FILE.html", help="Where to write the picture (default: "
              "RUN_ID.png here; .html: one page with the picture inside).")
@where_options
@bucket_option
@pass_context
def plot(ctx: Context, run_ids: tuple[str, ...], output: Path | None, project: str | None,
         zone: str | None, bucket: str | None) -> None:
    """Draw loss, step time, tokens/s and MFU over steps for one or several runs: the
    template's metric lines on host 0, read from GCS. A recovered run's attempts share
    one step axis; the steps a later attempt computed again are shaded as lost.

    \b
    podctl plot my-slice-20261203-101500-ab12
    podctl plot RUN_A RUN_B -o compare.html
    """

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.policy import plot as plot_lib
        from podctl.steps import Session
        from podctl.steps.goodput import goodput_buckets

        path = plot_lib.check_output(output or Path(f"{run_ids[0]}.png"))
        plot_lib._matplotlib()  # say it is missing before reading anything
        session = Session.open(ctx.settings(project, zone, bucket))
        # {run_id: {bucket: seconds}}: a goodput bar per run under the panels
        buckets = run_sync(goodput_buckets(session, list(run_ids)))
        _, series = run_sync(plot_lib.plot_runs(session.storage, list(run_ids), path, buckets=buckets))
        steps = ", ".join(f"{s.run_id}: {s.steps} steps"
                          + (f" in {len(s.segments)} attempts" if len(s.segments) > 1 else "")
                          for s in series)
        click.echo(f"wrote {path} ({steps})")

    guarded(action)


COMMANDS = (plot,)
