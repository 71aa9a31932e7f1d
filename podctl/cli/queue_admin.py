"""podctl queue quota / team / migrate: the shares of a team's queue, and moving a
machine's SQLite queue into the team's PostgreSQL one."""

from __future__ import annotations

from typing import Any

import click

from podctl.cli.common import AMOUNT, Number, guarded
from podctl.cli.slice_cmds import json_option
from podctl.cli.text import shown


def _open() -> Any:
    from podctl.cli.queue_store import open_queue

    return open_queue()


@click.group()
def quota() -> None:
    """Chip-hours per week and chips at once, per user or team (`queue ls` says who waits)."""


@quota.command(name="set")
@click.argument("name")
@click.option("--chip-hours-week", type=AMOUNT, default=None, metavar="N",
              help="Chip-hours in any 7 days (e.g. 2000 = a v5p-128 for 31 hours).")
@click.option("--max-chips", type=Number(whole=True, low=0), default=None, metavar="M", help="Chips held at once.")
@click.option("--clear", is_flag=True, help="Remove NAME's quota.")
def quota_set(name: str, chip_hours_week: float | None, max_chips: int | None, clear: bool) -> None:
    """Set the quota of NAME: a user's account (as `queue ls` shows owners) or a team."""

    def action() -> None:
        from podctl.base.errors import InvalidValueError
        from podctl.queue.interface import Quota

        if clear == (chip_hours_week is not None or max_chips is not None):
            raise InvalidValueError("give --chip-hours-week and/or --max-chips, or --clear alone.")
        quota = Quota(name, chip_hours_week, max_chips).check()  # before the store is opened
        with _open() as store:
            store.set_quota(quota)
        click.echo(f"quota of {shown(name)}: " + ("none" if clear else _limits(chip_hours_week, max_chips)))

    guarded(action)


def _limits(hours: float | None, chips: int | None) -> str:
    parts = ([f"{hours:g} chip-hours a week"] if hours is not None else []) + (
        [f"{chips} chips at once"] if chips is not None else [])
    return ", ".join(parts) or "none"


@quota.command(name="ls")
@json_option
def quota_ls(as_json: bool) -> None:
    """Every quota (the queue's and podctl.toml's), with the last 7 days' use and the chips held now."""

    def action() -> None:
        import time

        from podctl.cli.render import emit_json
        from podctl.queue.place import toml_shares
        from podctl.queue.shares import Ledger, Shares

        toml_quotas, toml_teams = toml_shares()
        with _open() as store:
            shares = Shares.combine(store.quotas(), store.teams(), toml_quotas, toml_teams)
            ledger = Ledger(store.entries(), shares, time.time())
        rows: list[dict[str, Any]] = [{"name": q.name, "chip_hours_week": q.chip_hours_week, "max_chips": q.max_chips,
                 "used_chip_hours_7d": round(ledger.week[q.name], 2), "chips_now": ledger.chips[q.name],
                 "source": q.source} for q in sorted(shares.quotas.values(), key=lambda q: q.name)]
        if as_json:
            emit_json(rows)
            return
        if not rows:
            click.echo("no quotas (`podctl queue quota set USER --chip-hours-week N --max-chips M`)")
            return
        click.echo(f"{'NAME':32s} {'CHIP-H/WEEK':>11s} {'USED 7D':>9s} {'MAX CHIPS':>9s} {'NOW':>5s}  FROM")
        for r in rows:
            week = "-" if r["chip_hours_week"] is None else f"{r['chip_hours_week']:g}"
            chips = "-" if r["max_chips"] is None else str(r["max_chips"])
            click.echo(f"{shown(r['name'])[:32]:32s} {week:>11s} {r['used_chip_hours_7d']:>9.1f} "
                       f"{chips:>9s} {r['chips_now']:>5d}  {r['source']}")

    guarded(action)


@click.group()
def team() -> None:
    """Teams: a team's quota counts all its members' entries."""


@team.command(name="set")
@click.argument("name")
@click.argument("members", nargs=-1)
def team_set(name: str, members: tuple[str, ...]) -> None:
    """NAME is exactly MEMBERS (accounts) from now on; none: the team is no more."""

    def action() -> None:
        from podctl.queue.entry import ACCOUNT_MOST, check_name

        check_name(name, "the team's NAME")
        for member in members:
            check_name(member, "a MEMBER (an account)", ACCOUNT_MOST)
        with _open() as store:
            store.set_team(name, list(dict.fromkeys(members)))
        click.echo(f"team {shown(name)}: " + (", ".join(shown(m) for m in members) or "no members"))

    guarded(action)


@team.command(name="ls")
@json_option
def team_ls(as_json: bool) -> None:
    """Every team and its members (the queue's and podctl.toml's)."""

    def action() -> None:
        from podctl.cli.render import emit_json
        from podctl.queue.place import toml_shares

        _, toml_teams = toml_shares()
        with _open() as store:
            members = {**toml_teams, **store.teams()}
        teams: dict[str, list[str]] = {}
        for member, name in sorted(members.items()):
            teams.setdefault(name, []).append(member)
        if as_json:
            emit_json(teams)
        elif not teams:
            click.echo("no teams (`podctl queue team set TEAM USER...`)")
        for name, people in sorted(teams.items()):
            if not as_json:
                click.echo(f"{shown(name)}: {', '.join(shown(p) for p in people)}")

    guarded(action)


@click.command()
@click.option("--to", "url", required=True, metavar="postgresql://USER@HOST/DB",
              help="The team's queue: every entry of this machine's queue.db moves there.")
def migrate(url: str) -> None:
    """Move this machine's SQLite queue into a PostgreSQL one, entries, history, quotas and all.

    \b
    The PostgreSQL queue must be empty (a queue is one token: its slices' names and
    labels). Stop this machine's cron ticks first; queue.db is left as it was, renamed
    queue.db.migrated, so a tick here can no longer run it twice."""

    def action() -> None:
        from podctl.cli.queue_store import state_dir as _state_dir
        from podctl.queue.migrate import migrate_sqlite
        from podctl.queue.stores import check_url

        check_url(url, "--to")
        moved = migrate_sqlite(_state_dir(), url)
        click.echo(f"moved {moved.entries} entries, {moved.quotas} quotas and {moved.members} team "
                   f"members to {moved.where}; put queue_url = \"{moved.where}\" in podctl.toml "
                   "(password in ~/.pgpass or PGPASSWORD) on every machine that uses the queue.")

    guarded(action)


def register(group: click.Group) -> None:
    group.add_command(quota)
    group.add_command(team)
    group.add_command(migrate)
