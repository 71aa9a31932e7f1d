"""podctl fake start | stop | status | grant | networks | firewall-rules | subnets: the local
fake cloud as a background daemon, and what gcloud would change in its project."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from podctl.base.settings import Settings

from podctl.cli.common import POSITIVE, guarded
from podctl.cli.fake_inject import inject

EXIT_NOT_RUNNING = 3


def _settings() -> Settings:
    from podctl.base import settings

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
        from podctl.base.errors import InvalidValueError
        from podctl.cli.render import emit_json
        from podctl.fake.admin import daemon

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
        from podctl.fake.admin import daemon

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
        from podctl.fake.admin import daemon

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


def _compute() -> tuple[Any, str, str]:
    """The running daemon's Compute Engine API, its project and region."""
    from podctl.cli.fake_inject import _admin
    from podctl.fake.admin.admin_client import FakeCompute

    settings = _settings()
    return FakeCompute(_admin().status()["tpu_api"]), settings.project, settings.zone.rsplit("-", 1)[0]


def allowed_of(text: str) -> list[dict[str, Any]]:
    """gcloud's --allow (tcp:22,tcp:8470-8479,icmp) -> Compute Engine's `allowed` list."""
    from podctl.base.errors import InvalidValueError

    by_protocol: dict[str, list[str]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        protocol, _, ports = item.partition(":")
        if protocol not in ("tcp", "udp", "icmp", "all") or (ports and protocol in ("icmp", "all")) or (
                ports and not all(p.isdigit() for p in ports.split("-", 1))):
            raise InvalidValueError(f"--allow {item!r}: give PROTOCOL[:PORT[-PORT]] (tcp:22, tcp:8470-8479, icmp).")
        by_protocol.setdefault(protocol, [])
        if ports:
            by_protocol[protocol].append(ports)
    if not by_protocol:
        raise InvalidValueError("--allow: give at least one PROTOCOL[:PORTS] (tcp:8476).")
    return [{"IPProtocol": proto, **({"ports": ports} if ports else {})} for proto, ports in by_protocol.items()]


def _names(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


@fake.group("networks")
def networks() -> None:
    """The fake project's VPC networks (as `gcloud compute networks`)."""


@networks.command("create")
@click.argument("name")
@click.option("--range", "ip_range", default=None, metavar="CIDR",
              help="Its subnets' range (default 10.0.0.0/20), one subnet per region, named NAME.")
def networks_create(name: str, ip_range: str | None) -> None:
    """A custom VPC: no firewall rule but those you add (deny all ingress)."""

    def action() -> None:
        from podctl.cli.fake_inject import _admin

        _admin().add_network(name, [], project=_settings().project, ip_range=ip_range)
        click.echo(f"created network {name} (no firewall rules: add them with `podctl fake firewall-rules create`)")

    guarded(action)


@fake.group("firewall-rules")
def firewall_rules() -> None:
    """The fake project's firewall rules (as `gcloud compute firewall-rules`)."""


@firewall_rules.command("create")
@click.argument("name")
@click.option("--network", default="default", show_default=True)
@click.option("--allow", "allow", required=True, metavar="PROTO[:PORTS],...", help="e.g. tcp:22,tcp:8476")
@click.option("--direction", default="INGRESS", show_default=True, help="INGRESS only (the fake's hosts enforce it).")
@click.option("--source-ranges", default=None, metavar="CIDR,...")
@click.option("--source-tags", default=None, metavar="TAG,...")
@click.option("--target-tags", default=None, metavar="TAG,...")
@click.option("--priority", type=int, default=1000, show_default=True)
def firewall_rules_create(name: str, network: str, allow: str, direction: str, source_ranges: str | None,
                          source_tags: str | None, target_tags: str | None, priority: int) -> None:
    """Add an INGRESS allow rule to a network of the fake project; its hosts follow it at once."""

    def action() -> None:
        rule: dict[str, Any] = {"name": name, "network": f"global/networks/{network}", "direction": direction,
                                "priority": priority, "allowed": allowed_of(allow)}
        ranges, sources = _names(source_ranges), _names(source_tags)
        rule["sourceRanges"] = ranges or ([] if sources else ["0.0.0.0/0"])  # gcloud's default
        for key, value in (("sourceTags", sources), ("targetTags", _names(target_tags))):
            if value:
                rule[key] = value
        if not rule["sourceRanges"]:
            del rule["sourceRanges"]
        compute, project, _ = _compute()
        compute.create_firewall(project, rule)
        click.echo(f"created firewall rule {name} on network {network}: {direction} allow {allow}")

    guarded(action)


@fake.group("subnets")
def subnets() -> None:
    """The fake project's subnetworks (as `gcloud compute networks subnets`)."""


@subnets.command("update")
@click.argument("name")
@click.option("--region", default=None, help="Default: the zone's region.")
@click.option("--enable-private-ip-google-access/--no-enable-private-ip-google-access", "access",
              default=None, help="Hosts without external IPs reach Google's APIs (GCS) through it.")
def subnets_update(name: str, region: str | None, access: bool | None) -> None:
    """Turn Private Google Access on or off on subnet NAME."""

    def action() -> None:
        from podctl.base.errors import InvalidValueError

        if access is None:
            raise InvalidValueError("say --enable-private-ip-google-access or --no-enable-private-ip-google-access.")
        compute, project, own_region = _compute()
        compute.set_private_google_access(project, region or own_region, name, access)
        click.echo(f"subnet {name} ({region or own_region}): Private Google Access {'on' if access else 'off'}")

    guarded(action)


fake.add_command(inject)  # podctl fake inject ...: faults, by hand

COMMANDS = (fake,)
