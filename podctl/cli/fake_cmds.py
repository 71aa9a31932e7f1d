"""podctl fake start | stop | status | grant: the local fake cloud as a background daemon."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from podctl.settings import Settings

from podctl.cli.common import POSITIVE, guarded
from podctl.cli.fake_inject import inject

EXIT_NOT_RUNNING = 3


def _settings() -> Settings:
    from podctl import settings

    return settings.resolve(backend="fake")


@click.group()
def fake() -> None:
    """The local fake cloud: Cloud TPU API on 127.0.0.1, shared by every podctl command."""


@fake.command()
@click.option("--time-scale", type=POSITIVE, default=None,
              help="Simulated seconds per real second (default 60: a 90 s creation takes 1.5 s).")
@click.option("--secure/--not-secure", default=None,
              help="Set the fake project up secure-by-default: the nodes' default service "
                   "account holds no role on the bucket (as in organisations made since "
                   "2024-05); --not-secure: an editor, as older organisations grant (what "
                   "`podctl demo` needs; a new fake's default). Neither: as the saved fake "
                   "was. Also PODCTL_FAKE_SECURE=1/0. A running fake is not changed.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's status as JSON.")
def start(time_scale: float | None, secure: bool | None, as_json: bool) -> None:
    """Start the fake cloud's daemon (nothing happens if it runs)."""

    def action() -> None:
        from podctl.cli.render import emit_json
        from podctl.errors import InvalidValueError
        from podctl.fake import daemon

        if time_scale is not None and time_scale <= 0:
            raise InvalidValueError("--time-scale must be positive.")
        settings = _settings()
        info = daemon.start(settings.fake_dir, project=settings.project, zone=settings.zone,
                            time_scale=time_scale, secure=secure)
        if as_json:
            emit_json(info)
        else:
            click.echo(f"fake cloud running: Cloud TPU API {info['tpu_api']} (project "
                       f"{info['project']}, zone {info['zone']}, pid {info['pid']})")
            if info.get("host_python"):
                click.echo(f"hosts' python3: {info['host_python']}")
            if info.get("secure"):
                click.echo("project secure-by-default: `podctl fake grant serviceAccount:EMAIL "
                           "roles/storage.objectAdmin` and `... roles/storage.legacyBucketReader` "
                           "let the nodes' account use the bucket and save checkpoints")
        if secure is not None and bool(info.get("secure")) != secure:
            click.echo(f"the fake cloud was running already, {'not ' if secure else ''}secure-by-"
                       "default: `podctl fake stop` first to change that", err=True)

    guarded(action)


@fake.command()
def stop() -> None:
    """Stop the fake cloud's daemon; its slices are kept for the next start."""

    def action() -> None:
        from podctl.fake import daemon

        stopped = daemon.stop(_settings().fake_dir)
        click.echo("fake cloud stopped" if stopped else "fake cloud was not running")

    guarded(action)


@fake.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON: running, tpu_api, project, zone.")
def status(as_json: bool) -> None:
    """Say whether the fake cloud runs, and where. Exits 0 when it runs, 3 when it does
    not (as `systemctl status` does), so scripts can test it."""

    def action() -> None:
        from podctl.cli.render import emit_json
        from podctl.fake import daemon

        info = daemon.status(_settings().fake_dir)
        if as_json:
            emit_json(info)
        elif info["running"]:
            click.echo(f"fake cloud running: Cloud TPU API {info['tpu_api']} (project "
                       f"{info['project']}, zone {info['zone']}, pid {info['pid']})")
            if info.get("host_python"):
                click.echo(f"hosts' python3: {info['host_python']}")
        else:
            click.echo("fake cloud not running (`podctl fake start`)")
        if not info["running"]:
            sys.exit(EXIT_NOT_RUNNING)

    guarded(action)


@fake.command()
@click.argument("member")
@click.argument("role")
@click.option("--bucket", default=None, help="The bucket (default: the fake's own).")
@click.option("--revoke", is_flag=True, help="Take the role away instead.")
def grant(member: str, role: str, bucket: str | None, revoke: bool) -> None:
    """Bind MEMBER (serviceAccount:EMAIL) to ROLE (roles/storage.objectAdmin) on the fake's
    bucket: the fake's `gcloud storage buckets add-iam-policy-binding`."""

    def action() -> None:
        from podctl.cli.fake_inject import _admin

        _admin().set_iam(member=member, role=role, remove=revoke,
                         **({"bucket": bucket} if bucket else {}))
        click.echo(f"{'took' if revoke else 'granted'} {role} {'from' if revoke else 'to'} {member}")

    guarded(action)


fake.add_command(inject)  # podctl fake inject ...: faults, by hand

COMMANDS = (fake,)
