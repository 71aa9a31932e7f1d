"""podctl demo."""

from __future__ import annotations

import click

from podctl.cli.common import guarded
from podctl.cli.slice_cmds import json_option


@click.command()
# 20 + 10: the loss falls by half, two checkpoints then a resume from the second (more steps
# showed nothing more and cost 0.27 s of a 2-core machine each: benchmarks/README.md)
@click.option("--steps", default=20, show_default=True, help="Steps of the first run.")
@click.option("--more-steps", default=10, show_default=True, help="Steps the resumed run adds.")
@click.option("--checkpoint-every", default=10, show_default=True, help="Steps between checkpoints.")
@json_option
def demo(steps: int, more_steps: int, checkpoint_every: int, as_json: bool) -> None:
    """The whole lifecycle on the local fake cloud: start the fake cloud, up a v5p-16,
    train the template with checkpoints in GCS, list them, resume from the latest, down,
    and a summary. Nothing is left running. About a minute on an idle 2-core machine, less
    once the hosts' environment is built (the first run builds it); it is CPU-bound (JAX
    on the fake hosts' CPU devices), so longer when the cores are busy."""

    def action() -> None:
        from podctl import demo as demo_mod
        from podctl.cli.render import emit_json

        say = (lambda text: click.echo(text, err=True)) if as_json else click.echo
        summary = demo_mod.run_demo(steps=steps, more_steps=more_steps,
                                    checkpoint_every=checkpoint_every, say=say)
        if as_json:
            emit_json(summary.to_json())
        else:
            demo_mod.render(summary)

    guarded(action)
COMMANDS = (demo,)
