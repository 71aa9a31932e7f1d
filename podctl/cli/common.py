"""What every command shares: the global options and the error guard."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click

from podctl.base.vocabulary import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from podctl.base.errors import PodctlError

    # click's own annotations make ParamType generic (value, input); click 8.1 cannot subscript it
    NumberParam = click.ParamType[float, Any]
else:
    NumberParam = click.ParamType


class Context:
    """What the global options say, handed to every command."""

    def __init__(self, backend: str | None, api: str | None = None):
        self.backend = backend
        self.api = api  # --api: which API makes and finds slices (settings.APIS)

    def settings(self, project: str | None = None, zone: str | None = None,
                 bucket: str | None = None) -> Any:
        from podctl.base import settings

        for option, value in (("--project", project), ("--zone", zone), ("--bucket", bucket)):
            refuse_blank(value, option)  # '' is a mistake, not "the default"
        return settings.resolve(backend=self.backend, project=project, zone=zone, bucket=bucket,
                                api=self.api)


def refuse_blank(value: str | None, option: str) -> None:
    """An option given as '' (or spaces) is refused, not read as absent: `--bucket ''`
    falling back to the default bucket, or `--name ''` to the default name, would act on
    something the user did not name."""
    if value is not None and not value.strip():
        from podctl.base.errors import InvalidValueError

        raise InvalidValueError(f"{option} is empty: give a value, or leave {option} out for the default.")


class Number(NumberParam):
    """A number option, read by `numbers.parse_number`: digits 0-9 only (no '１６', 'nan',
    'inf' or '1_0', which Python's int() and float() take), finite, within the option's
    range (a whole one within 64 bits); else one `podctl: error:` line, exit 2."""

    name = "number"

    def __init__(self, whole: bool = False, low: float | None = None, high: float | None = None,
                 above: float | None = None):
        self.whole, self.low, self.high, self.above = whole, low, high, above

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from podctl.base.errors import InvalidValueError
        from podctl.base.numbers import parse_number

        option = (param.opts[0] if param is not None and param.opts else "value") if not (
            isinstance(param, click.Argument)) else param.human_readable_name
        try:
            return parse_number(str(value), option, whole=self.whole, low=self.low, high=self.high,
                                above=self.above)
        except InvalidValueError as e:
            raise click.UsageError(str(e), ctx) from None


def hosts_checked(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A --hosts value ('all', '0,3') checked when it is read, before anything is made
    (''  is refused, not read as every host); the steps take the text and check it
    against the slice's hosts."""
    from podctl.base.errors import InvalidValueError
    from podctl.base.numbers import parse_hosts_text

    try:
        parse_hosts_text(value, param.opts[0] if param.opts else "--hosts")
    except InvalidValueError as e:
        raise click.UsageError(str(e), ctx) from None
    return value


WHOLE = Number(whole=True)  # any whole number within 64 bits
COUNT = Number(whole=True, low=1)  # 1, 2, ...
AMOUNT = Number(low=0)  # 0 or more: people, rates, terabytes
POSITIVE = Number(above=0)  # dollars, hours, a price: above 0


def guarded(action: Callable[[], Any]) -> Any:
    """Run a command body: podctl's errors become one line and an exit code."""
    from podctl.base.errors import PodctlError, disk_full

    try:
        return action()
    except PodctlError as e:
        fail(e)
    except OSError as e:  # a write on this machine: ENOSPC is no bug of podctl's
        full = disk_full(e)
        if full is None:
            raise
        fail(full)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (podctl.base.signals routes them here)
        exit_interrupted()


def fail(e: PodctlError) -> NoReturn:
    """A PodctlError E as one line on stderr and its exit code."""
    click.echo(f"podctl: error: {e}", err=True)
    sys.exit(e.exit_code)


def exit_interrupted(then: str = "") -> NoReturn:
    """Say "interrupted" (with the stop signal that came, and THEN: what podctl did about
    it) in one line and exit 128 + the signal's number (130 Ctrl-C, 143 SIGTERM, 129
    SIGHUP); a further signal can no longer change that."""
    from podctl.base import signals

    signals.ignore_further_stops()
    how = f" ({signals.name_of_stop()})" if signals.received else ""
    click.echo(f"podctl: interrupted{how}{'; ' + then if then else ''}", err=True)
    sys.exit(signals.exit_code(EXIT_INTERRUPTED))


def slice_help() -> str:
    """--slice's help, from the generation records (topology reads one small TOML file)."""
    from podctl.base import topology

    sizes = "; ".join(f"{g.key}-N ({g.key}-{g.valid_sizes()[0]} ... {g.key}-{g.valid_sizes()[-1]}, "
                      f"N {'TensorCores' if g.size_unit == 'cores' else 'chips'})"
                      for g in topology.generations().values())
    return f"Slice type: {sizes}."


def runtime_help() -> str:
    from podctl.base import topology

    return ", ".join(f"{g.key} {g.default_runtime_version}" for g in topology.generations().values())


class ScriptCommand(click.Command):
    """A command that runs a script (`run NAME SCRIPT`, `queue add SCRIPT`): its own
    options go before SCRIPT, and every word after SCRIPT is the script's, in order, as
    with `python SCRIPT ARGS` (a script with its own --json, --env or --resume keeps
    them). The one exception is where there is no other reading: an option the command
    requires that was not given before SCRIPT (e.g. `queue add train.py --slice v5p-8`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, split_at_script(self, list(args)))


def split_at_script(command: click.Command, args: list[str]) -> list[str]:
    """ARGS with a `--` put right after SCRIPT, so that click reads every later word as
    the script's; a required option found only after SCRIPT is moved before it."""
    arguments = [p.name for p in command.params if isinstance(p, click.Argument)]
    position = arguments.index("script")
    takes_value: dict[str, click.Option] = {}
    for p in command.params:
        if isinstance(p, click.Option):
            for opt in (*p.opts, *p.secondary_opts):
                takes_value[opt] = p
    seen, i = 0, 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return args  # the user drew the line himself
        if word.startswith("-") and word != "-":
            option = takes_value.get(word.split("=", 1)[0])
            i += 2 if option is not None and not (option.is_flag or option.count) and "=" not in word else 1
            continue
        if seen < position:
            seen, i = seen + 1, i + 1
            continue
        head, rest = args[:i + 1], args[i + 1:]
        if rest[:1] == ["--"]:  # `SCRIPT -- ARGS`: click takes that `--` itself
            return args
        return [*head, *_required_from(command, head, rest, takes_value), "--", *rest]
    return args


def _required_from(command: click.Command, head: list[str], rest: list[str],
                   options: dict[str, click.Option]) -> list[str]:
    """Take out of REST (in place) each required option HEAD lacks; -> those words."""
    given = {options[w.split("=", 1)[0]].name for w in head if w.split("=", 1)[0] in options}
    moved: list[str] = []
    for p in command.params:
        if not (isinstance(p, click.Option) and p.required and p.name not in given):
            continue
        for j, word in enumerate(rest):
            if word.split("=", 1)[0] in (*p.opts, *p.secondary_opts):
                width = 1 if "=" in word or p.is_flag else 2
                moved += rest[j:j + width]
                del rest[j:j + width]
                break
    return moved


# ---- options and helpers more than one command module shares (so no command module imports another)

def bucket_option(fn: Any) -> Any:
    return click.option("--bucket", default=None, help="GCS bucket for bundles, logs and "
                        "checkpoints (default: $PODCTL_BUCKET, podctl.toml; the fake has its own).")(fn)


def plan_zone(ctx: Context, zone: str | None) -> str | None:
    """The zone a preflight plan is priced in: as `settings` finds it, but no project is needed."""
    from podctl.base import settings

    return settings.resolve_zone(backend=ctx.backend, zone=zone)
