"""The `podctl` command. Only click is imported at start so that `podctl --help`
stays fast: a command's module is imported when that command is asked for (COMMAND_MODULES),
and every command imports the library it needs when it runs."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from podctl.base.vocabulary import EXIT_INTERRUPTED
from podctl.cli.common import Context

# Where each command lives: the one table of podctl's commands, in the order --help lists them.
# A module's COMMANDS tuple holds its commands; adding a command means a row here.
COMMAND_MODULES: dict[str, str] = {
    "up": "slice_cmds", "ls": "slice_cmds", "status": "slice_cmds", "down": "slice_cmds",
    "run": "job_cmds", "logs": "job_cmds", "runs": "job_cmds", "stop": "job_cmds", "exec": "job_cmds",
    "ckpt": "ckpt_cmds", "plan": "plan_cmd", "cost": "cost_cmds", "budget": "cost_cmds",
    "gc": "gc_cmd", "goodput": "goodput_cmds", "plot": "plot_cmds", "profile": "profile_cmds",
    "preflight": "preflight_cmds", "queue": "queue_cmds", "fake": "fake_cmds", "demo": "demo_cmd",
}


_FAKE_ONLY = ("fake", "demo")


def load_command(name: str) -> click.Command:
    """Import the module that defines command NAME and return the command, with `--backend`
    (not on `fake` and `demo`: they act on the fake cloud whatever the backend)."""
    module = importlib.import_module(f"podctl.cli.{COMMAND_MODULES[name]}")
    command = next(c for c in module.COMMANDS if c.name == name)
    if name not in _FAKE_ONLY and not getattr(command, "_podctl_backend_option", False):
        _backend_option(command)
        command._podctl_backend_option = True
    loaded: click.Command = command  # an imported module's attribute: Any to mypy
    return loaded


class PodctlGroup(click.Group):
    """click's own usage errors as podctl's: one `podctl: error:` line, exit 2; and commands
    loaded only when asked for (the group's docstring carries the overview of them all)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMAND_MODULES else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The names only: their short helps would import every command's module; the
        # docstring's table above says what each does, and `podctl CMD --help` the rest.
        with formatter.section("Commands"):
            formatter.write_text(", ".join(COMMAND_MODULES))

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.UsageError as e:
            where = f"; see `{e.ctx.command_path} --help`" if e.ctx is not None else ""
            _error(e.format_message().rstrip(".") + where, 2)
        except click.ClickException as e:
            _error(e.format_message(), e.exit_code)
        except click.Abort:
            click.echo("podctl: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(code if isinstance(code, int) else 0)


def _error(text: str, code: int) -> None:
    click.echo("podctl: error: " + " ".join(text.split()), err=True)
    sys.exit(code)


def _backend_option(command: click.Command) -> None:
    """`--backend` after the subcommand too (`podctl ls --backend fake`), on every command."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _backend_option(sub)
        return

    def remember(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        context = ctx.find_object(Context)
        if value is not None and context is not None:
            context.backend = value

    def remember_api(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        context = ctx.find_object(Context)
        if value is not None and context is not None:
            context.api = value

    command.params.append(click.Option(
        ["--backend"], type=click.Choice(["gcp", "fake"]), default=None, expose_value=False,
        callback=remember, help="Google Cloud, or the local fake cloud (as `podctl --backend`)."))
    command.params.append(click.Option(
        ["--api"], type=click.Choice(["tpu", "compute"]), default=None, expose_value=False,
        callback=remember_api, help="Which API makes and finds slices (as `podctl --api`; default: both)."))


@click.group(cls=PodctlGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--backend", type=click.Choice(["gcp", "fake"]), default=None,
              help="Google Cloud, or the local fake cloud (default: $PODCTL_BACKEND, podctl.toml, gcp).")
@click.option("--api", type=click.Choice(["tpu", "compute"]), default=None,
              help="Which API makes and finds slices: the Cloud TPU API or Compute Engine (default: "
              "$PODCTL_API, podctl.toml's api, else both: a slice is found and listed on either, and "
              "made by its type's API, Compute Engine for tpu7x).")
@click.version_option(package_name="podctl")
@click.pass_context
def cli(ctx: click.Context, backend: str | None, api: str | None) -> None:
    """Run JAX training jobs on Cloud TPU Pod slices (v5p, v6e, v5e, v4, tpu7x).

    \b
    podctl up --slice v5p-64          create (or reuse) a slice and wait until it is ready
    podctl ls                         the slices in the zone, with their states
    podctl status NAME                one slice: state, health, hosts, topology, age
    podctl down NAME                  delete a slice (queued resources with force)
    podctl run NAME train.py [ARGS]   run a script on every host; stream its logs
    podctl logs RUN_ID [--follow]     replay (and follow) a run's logs from GCS
    podctl runs                       the runs, with their states
    podctl stop RUN_ID                stop a run on every host (a checkpoint first)
    podctl exec NAME -- CMD ...       a plain command on every host
    podctl ckpt ls|pull RUN_ID        a run's checkpoints in GCS
    podctl plan --params 70B --tokens 1T --slice v5p-4096   time and cost before a run
                                      (--compare v5p-4096,h100-1024: TPU against GPU)
    podctl preflight --slice v5p-N train.py   compile the step for a slice here: HBM, FLOPs
    podctl cost [NAME|RUN_ID]         what a slice or a run has cost; a run's goodput
    podctl goodput RUN_ID             where a run's chip-hours went, bucket by bucket
    podctl plot RUN_ID... [-o F.png]  loss, step time, tokens/s, MFU over steps (a picture)
    podctl profile RUN_ID [--steps N] a JAX profiler trace of a running run (--pull DIR)
    podctl budget check               delete slices over their budget (run it from cron)
    podctl gc [--dry-run]             delete podctl's FAILED, SUSPENDED, expired, PREEMPTED leftovers
    podctl queue add|ls|show|cancel|tick   queued runs, moved along by `queue tick` from cron
    podctl queue quota|team|migrate   a team's queue: quotas, teams, SQLite into PostgreSQL
    podctl fake start|stop|status     the local fake cloud (--backend fake starts it too)
    podctl demo                       the whole lifecycle on the fake cloud (CPU-bound: ~45 s idle)
    """
    ctx.obj = Context(backend, api)



def main() -> None:
    from podctl.base.signals import route_stop_signals

    route_stop_signals()  # SIGTERM and SIGHUP undo what Ctrl-C undoes (a slice `up` made)
    cli(prog_name="podctl")


if __name__ == "__main__":
    main()
