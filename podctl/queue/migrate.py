"""`podctl queue migrate --to postgresql://...`: a machine's SQLite queue into the team's
one (PostgreSQL, or any store of queue/stores/), in one transaction: every entry with its id, state, attempts and
history, the quotas, the teams, and the queue's token (its slices are named and
labelled with it, so the new queue's ticks know them as their own)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from podctl.base.errors import QueueError
from podctl.queue.lock import QueueLock
from podctl.queue.store import Store, db_path

LOCK_WAIT = 60.0  # seconds to wait for a tick of this machine's queue to finish


@dataclass(frozen=True)
class Moved:
    entries: int
    quotas: int
    members: int
    where: str  # the PostgreSQL queue, without its password


def migrate_sqlite(state_dir: Path, url: str) -> Moved:
    from podctl.queue import stores

    stores.check_url(url, "--to")
    if stores.scheme_of(url) == stores.LOCAL:
        raise QueueError("--to names the team's queue (a URL); this machine's queue is the one moved.")
    path = db_path(state_dir)
    if not path.exists():
        raise QueueError(f"no queue on this machine ({path}): nothing to migrate.")
    # this machine's tick lock, held until queue.db is aside: no tick here runs an entry
    # that has moved, and none moves one while it is being read
    with QueueLock(state_dir).hold(LOCK_WAIT, "`podctl queue migrate`"):
        with Store(path) as source:
            token, entries, quotas, teams = source.token, source.entries(), source.quotas(), source.teams()
        with stores.open_store(url, state_dir) as target, \
                target.tick_lock().hold(LOCK_WAIT, "`podctl queue migrate`"):
            already = target.entries()
            if already:
                raise QueueError(f"the queue at {target.where} already has {len(already)} entries; "
                                 "migrate into an empty one (one queue, one token for its slices).")
            with target.batch():
                target.set_token(token)
                for entry in sorted(entries, key=lambda e: e.id):
                    target.import_entry(entry)
                for quota in quotas:
                    target.set_quota(quota)
                by_team: dict[str, list[str]] = {}
                for member, team in teams.items():
                    by_team.setdefault(team, []).append(member)
                for team, members in by_team.items():
                    target.set_team(team, members)
            where = target.where
        for suffix in ("", "-wal", "-shm"):  # kept, aside, as it was
            side = path.with_name(path.name + suffix)
            if side.exists():
                side.rename(path.with_name(f"{path.name}.migrated{suffix}"))
    return Moved(len(entries), len(quotas), len(teams), where)
