"""docs/reference/cli.md, made from the commands themselves: every command's and
subcommand's `--help`, in COMMAND_MODULES' order. A test (tests/unit/test_cli_reference.py)
keeps the file equal to what this prints, so the reference cannot drift from the CLI.

    python -m podctl.cli.reference > docs/reference/cli.md
"""

from __future__ import annotations

import click

from podctl.cli.main import COMMAND_MODULES, cli, load_command

WIDTH = 100  # fixed, so the page does not depend on the terminal that made it
HEADER = ("# CLI reference\n\n"
          "[README](../../README.md) · [docs](../README.md)\n\n"
          "Made by `python -m podctl.cli.reference > docs/reference/cli.md` from the commands "
          "themselves (a test keeps it equal). Each command's `--help`, as `podctl CMD --help` "
          "prints it.\n")


def _help(command: click.Command, path: list[str], parent: click.Context | None) -> tuple[str, click.Context]:
    # the command's own context_settings, as `podctl CMD --help` makes its context (the
    # group's `-h`): without them the page said `--help` alone, and click caches a
    # command's help option, so the page depended on what ran before it in the process
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    ctx = click.Context(command, info_name=path[-1], parent=parent, **settings)
    return command.get_help(ctx), ctx


def _sections(command: click.Command, path: list[str], parent: click.Context | None) -> list[str]:
    text, ctx = _help(command, path, parent)
    out = [f"\n## `{' '.join(path)}`\n\n```text\n{text.rstrip()}\n```\n"]
    if isinstance(command, click.Group) and path != ["podctl"]:
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                out += _sections(sub, [*path, name], ctx)
    return out


def render() -> str:
    """The whole page."""
    top, ctx = _help(cli, ["podctl"], None)
    parts = [HEADER, f"\n## `podctl`\n\n```text\n{top.rstrip()}\n```\n"]
    for name in COMMAND_MODULES:
        parts += _sections(load_command(name), ["podctl", name], ctx)
    return "".join(parts)


if __name__ == "__main__":
    print(render(), end="")
