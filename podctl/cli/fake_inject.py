"""podctl fake inject ...: faults for the running fake cloud's daemon, by hand.

Each command is one call to the daemon's admin API (podctl/fake/admin_api.py),
the same switches tests flip through FakeAdmin. Arguments are taken as text and
checked here, so that bad input is one line and exit 2 rather than click's usage
screen; what only the daemon knows (a node's name, its number of hosts) it checks.
"""

from __future__ import annotations

import math
from typing import Any

import click

from podctl.cli.common import guarded

_CODES = ("403", "429", "503", "drop", "lose")
# A negative number ("-1") would read as an unknown option and get click's usage screen;
# as an argument it reaches our own check and its one-line error.
_NUMBERS = {"ignore_unknown_options": True}
_SIGNALS = ("TERM", "KILL")


def _admin() -> Any:
    """The running daemon's admin client; a one-line error when none runs."""
    from podctl import settings
    from podctl.errors import FakeCloudError
    from podctl.fake import daemon
    from podctl.fake.admin_client import FakeAdmin

    info = daemon.status(settings.resolve(backend="fake").fake_dir)
    if not info.get("running"):
        raise FakeCloudError("the fake cloud is not running; `podctl fake start`")
    return FakeAdmin(info["admin"])


def _seconds(text: str, what: str) -> float:
    """Seconds as a number ("2.5") or a duration ("90s", "10m"), never negative."""
    from podctl.durations import parse_duration
    from podctl.errors import InvalidValueError

    try:
        value = float(text)
    except ValueError:
        value = float(parse_duration(text, what))  # raises its own one-line error
    if not math.isfinite(value) or value < 0:
        raise InvalidValueError(f"{what} must be 0 or more seconds, not {text!r}.")
    return value


MAX_COUNT = 10**9  # more calls, chips or workers than any test or slice has


def _count(text: str, what: str) -> int:
    from podctl.errors import InvalidValueError

    # isascii: "²" is a digit to str.isdigit, not to int()
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_COUNT:
        raise InvalidValueError(f"{what} must be a whole number from 0 to {MAX_COUNT:,}, not "
                                f"{text[:40]!r}.")
    return int(text)


@click.group()
def inject() -> None:
    """Faults for the running fake cloud (see `podctl fake start`).

    \b
    podctl fake inject preempt NAME [--after T] [--grace S]   spot preemption, with notice
    podctl fake inject kill-host NAME WORKER [--signal TERM|KILL]   a host's processes die
    podctl fake inject cut-ssh NAME WORKER        a host's SSH connections drop
    podctl fake inject drop-host NAME WORKER      a host vanishes (the node stays READY)
    podctl fake inject gcs-outage SECONDS         GCS answers 503 for a while
    podctl fake inject fail-calls N [--code C] [--call METHOD]   the next Cloud TPU calls fail
    podctl fake inject stockout [--zone Z]        no capacity left in the zone
    podctl fake inject capacity CHIPS|unlimited [--zone Z]
    """


@inject.command()
@click.argument("name")
@click.option("--after", default="0", metavar="T",
              help="Simulated seconds (or 90s, 10m) from now; default now.")
@click.option("--grace", default=None, metavar="S",
              help="Wall-clock seconds between SIGTERM and SIGKILL (default: the fake's, 10 s).")
def preempt(name: str, after: str, grace: str | None) -> None:
    """Preempt a node or queued resource: hosts stop taking SSH, processes get SIGTERM."""

    def action() -> None:
        after_s = _seconds(after, "--after")
        grace_s = _seconds(grace, "--grace") if grace is not None else None
        _admin().preempt(name, after=after_s, grace=grace_s)
        when = f"in {after_s:g} simulated s" if after_s else "now"
        notice = f"{grace_s:g} s" if grace_s is not None else "the default"
        click.echo(f"{name}: preempted {when}; its processes get SIGTERM, then SIGKILL after "
                   f"{notice} grace")

    guarded(action)


@inject.command("kill-host", context_settings=_NUMBERS)
@click.argument("name")
@click.argument("worker")
@click.option("--signal", "sig", default="KILL", metavar="TERM|KILL",
              help="KILL (a crash, an OOM kill; default) or TERM.")
def kill_host(name: str, worker: str, sig: str) -> None:
    """Signal every process host WORKER of NAME started; the host stays up."""

    def action() -> None:
        from podctl.errors import InvalidValueError

        signame = sig.upper().removeprefix("SIG")
        if signame not in _SIGNALS:
            raise InvalidValueError(f"--signal must be TERM or KILL, not {sig!r}.")
        index = _count(worker, "WORKER")
        count = _admin().kill_processes(name, index, signame)
        click.echo(f"{name} worker {worker}: SIG{signame} to {count} process(es); the host stays up")

    guarded(action)


@inject.command("cut-ssh", context_settings=_NUMBERS)
@click.argument("name")
@click.argument("worker")
def cut_ssh(name: str, worker: str) -> None:
    """Drop host WORKER's SSH connections mid-command; new connections work."""

    def action() -> None:
        index = _count(worker, "WORKER")
        cut = _admin().cut_ssh(name, index)
        click.echo(f"{name} worker {worker}: {cut} SSH connection(s) cut")

    guarded(action)


@inject.command("drop-host", context_settings=_NUMBERS)
@click.argument("name")
@click.argument("worker")
def drop_host(name: str, worker: str) -> None:
    """Host WORKER of NAME vanishes, its processes killed; the node stays READY."""

    def action() -> None:
        index = _count(worker, "WORKER")
        _admin().drop_host(name, index)
        click.echo(f"{name} worker {worker}: dropped (its processes killed, no SSH)")

    guarded(action)


@inject.command("gcs-outage", context_settings=_NUMBERS)
@click.argument("seconds")
def gcs_outage(seconds: str) -> None:
    """GCS answers every request with 503 for SECONDS (wall clock); 0 ends an outage."""

    def action() -> None:
        value = _seconds(seconds, "SECONDS")
        _admin().gcs_outage(value)
        click.echo(f"GCS: 503 to every request for {value:g} s" if value else "GCS: outage ended")

    guarded(action)


@inject.command("fail-calls", context_settings=_NUMBERS)
@click.argument("count")
@click.option("--code", default="503", metavar="429|503|drop",
              help="The answer: 429, 503, 403, drop (reset, not done) or lose (done, answer lost).")
@click.option("--call", default=None, metavar="METHOD",
              help="Only calls of this method, e.g. nodes.create (default: any call).")
def fail_calls(count: str, code: str, call: str | None) -> None:
    """The next COUNT Cloud TPU API calls fail with CODE (0 clears pending failures)."""

    def action() -> None:
        from podctl.errors import InvalidValueError

        if code not in _CODES:
            raise InvalidValueError(f"--code must be one of {', '.join(_CODES)}, not {code!r}.")
        n = _count(count, "COUNT")
        _admin().fail_next(n, code, call=call)
        click.echo(f"the next {n} Cloud TPU call(s){f' of {call}' if call else ''} fail with {code}")

    guarded(action)


@inject.command()
@click.option("--zone", default=None, help="Default: the fake cloud's zone.")
def stockout(zone: str | None) -> None:
    """No capacity in the zone: new slices fail (error 8), queued ones wait."""

    def action() -> None:
        result = _admin().set_capacity(0, zone)
        click.echo(f"{result['zone']}: stocked out (capacity 0 chips)")

    guarded(action)


@inject.command(context_settings=_NUMBERS)
@click.argument("chips")
@click.option("--zone", default=None, help="Default: the fake cloud's zone.")
def capacity(chips: str, zone: str | None) -> None:
    """Chips free for TPUs in the zone; `unlimited` restores the default (a whole v5p pod)."""

    def action() -> None:
        value = None if chips == "unlimited" else _count(chips, "CHIPS (or `unlimited`)")
        result = _admin().set_capacity(value, zone)
        click.echo(f"{result['zone']}: capacity {result['capacity']} chips, {result['free']} free")

    guarded(action)
