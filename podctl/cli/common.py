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
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (podctl.signals routes them here)
        from podctl import signals

        how = f" ({signals.name_of_stop()})" if signals.received else ""
        click.echo(f"podctl: interrupted{how}", err=True)
        sys.exit(signals.exit_code(EXIT_INTERRUPTED))
