"""What every command shares: the global options and the error guard."""

from __future__ import annotations

import sys
from typing import Any, Callable

import click

EXIT_INTERRUPTED = 130


class Context:
    """What the global options say, handed to every command."""

    def __init__(self, backend: str | None):
        self.backend = backend

    def settings(self, project: str | None = None, zone: str | None = None,
                 bucket: str | None = None) -> Any:
        from podctl import settings

        return settings.resolve(backend=self.backend, project=project, zone=zone, bucket=bucket)


def guarded(action: Callable[[], Any]) -> Any:
    """Run a command body: podctl's errors become one line and an exit code."""
    from podctl.errors import PodctlError

    try:
        return action()
    except PodctlError as e:
        click.echo(f"podctl: error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("podctl: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)


def slice_help() -> str:
    """--slice's help, from the generation records (topology reads one small TOML file)."""
    from podctl import topology

    sizes = "; ".join(f"{g.key}-N ({g.key}-{g.valid_sizes()[0]} ... {g.key}-{g.valid_sizes()[-1]}, "
                      f"N {'TensorCores' if g.size_unit == 'cores' else 'chips'})"
                      for g in topology.generations().values())
    return f"Slice type: {sizes}."


def runtime_help() -> str:
    from podctl import topology

    return ", ".join(f"{g.key} {g.default_runtime_version}" for g in topology.generations().values())
