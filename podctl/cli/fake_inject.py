"""podctl fake inject ...: faults for the running fake cloud's daemon, by hand.

One subcommand per fault of podctl/fake/admin/faults.py's table, made from it: the same
name, arguments and checks as the admin API and FakeAdmin. Arguments are taken as text
and checked here with the table's checks, so that bad input is one line and exit 2
rather than click's usage screen; what only the daemon knows (a node's name, its number
of hosts) it checks (one line, exit 1).
"""

from __future__ import annotations

from typing import Any

import click

from podctl.cli.common import guarded
from podctl.fake.admin import faults

# A negative number ("-1") would read as an unknown option and get click's usage screen;
# as an argument it reaches the table's check and its one-line error.
_NUMBERS = {"ignore_unknown_options": True}


def _admin() -> Any:
    """The running daemon's admin client; a one-line error when none runs."""
    from podctl.base import settings
    from podctl.base.errors import FakeCloudError
    from podctl.fake.admin import daemon
    from podctl.fake.admin.admin_client import FakeAdmin

    info = daemon.status(settings.resolve(backend="fake").fake_dir)
    if not info.get("running"):
        raise FakeCloudError("the fake cloud is not running; `podctl fake start`")
    return FakeAdmin(info["admin"])


def _command(fault: faults.Fault) -> click.Command:
    def callback(**given: str | None) -> None:
        def action() -> None:
            from podctl.base.errors import InvalidValueError

            try:
                args = {a.name: a.parse(given[a.name]) for a in fault.args}
            except ValueError as e:
                raise InvalidValueError(str(e)) from None
            result = _admin().inject(fault.name, **args)
            click.echo(fault.said(args, result))

        guarded(action)

    params: list[click.Parameter] = [
        click.Argument([a.name], metavar=a.label) if a.positional else
        click.Option([a.flag, a.name], is_flag=True, default=False, help=a.help) if a.kind == "flag" else
        click.Option([a.flag, a.name], default=None, metavar=a.metavar or a.name.upper(), help=a.help)
        for a in fault.args]
    return click.Command(fault.name, callback=callback, params=params, context_settings=_NUMBERS,
                         help=fault.summary[0].upper() + fault.summary[1:] + ".",
                         short_help=fault.summary)


def _help() -> str:
    lines = "\n".join(f"podctl fake inject {f.usage()}" for f in faults.FAULTS)
    return f"Faults for the running fake cloud (see `podctl fake start`).\n\n\b\n{lines}"


inject = click.Group("inject", help=_help(), commands=[_command(f) for f in faults.FAULTS])
