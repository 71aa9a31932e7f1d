"""Who goes first and who waits: priorities, fair share and quotas, decided once per
tick pass from the entries themselves (no usage table to drift from them).

  - Order: higher priority first; among equal priorities, the owner with the fewest
    chip-hours in the last 7 days first (fair share); then the order of adding.
  - Quotas, per owner and per team (a team's quota counts all its members): chip-hours
    in a rolling 7 days, and chips held at once. A due entry that would pass one waits,
    and `queue ls` says which and by how much. Chip-hours count from each attempt's
    READY to its end (or now while it runs); an entry with --max-hours would pass the
    weekly quota if its hours at that cap do; without a cap it starts while its owner
    is under the quota.
  - Preemption (`[queue] preempt = true` in the ticking machine's podctl.toml; off by
    default): a due entry held back by a chips-at-once quota may take the chips of
    running entries of lower priority under that same quota, lowest priority first,
    then the most recently started: `victims()` names them only if together they free
    enough (a weekly chip-hour quota is not freed by stopping anything). What happens
    to them (checkpoint, stop, requeue) is the state machine's (machine.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from podctl.queue.entry import HOLDING, Entry
from podctl.queue.interface import Quota

WEEK = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Shares:
    quotas: dict[str, Quota]  # by owner or team
    teams: dict[str, str]  # member -> team

    @classmethod
    def combine(cls, own: Iterable[Quota], own_teams: dict[str, str], toml: Iterable[Quota],
                toml_teams: dict[str, str]) -> Shares:
        """The queue's own quotas and teams win over podctl.toml's for the same name."""
        quotas = {q.name: q for q in toml}
        quotas.update({q.name: q for q in own})
        return cls(quotas, {**toml_teams, **own_teams})

    def groups(self, owner: str) -> list[str]:
        """The names whose quotas bind OWNER's entries: the owner, and their team."""
        team = self.teams.get(owner)
        return [owner] + ([team] if team else [])


class Ledger:
    """Usage at the start of a pass, kept up to date as the pass admits entries."""

    def __init__(self, entries: Iterable[Entry], shares: Shares, now: float):
        self.shares, self.now = shares, now
        self.week: dict[str, float] = defaultdict(float)  # chip-hours in the last 7 days
        self.chips: dict[str, int] = defaultdict(int)  # chips held now
        self.blocked: dict[int, str] = {}  # entry id -> the chips-at-once quota it waits on
        for e in entries:
            used = e.chip_hours(now - WEEK, now)
            for name in shares.groups(e.owner):
                self.week[name] += used
                if e.state in HOLDING:
                    self.chips[name] += e.chips

    def order(self, entries: Iterable[Entry]) -> list[Entry]:
        return sorted(entries, key=lambda e: (-e.priority, self.week[e.owner], e.created, e.id))

    def admit(self, e: Entry) -> str | None:
        """None, and E's chips counted as held, if it may start now; else why it waits."""
        for name in self.shares.groups(e.owner):
            quota = self.shares.quotas.get(name)
            if quota is None:
                continue
            who = name if name == e.owner else f"team {name}"
            if quota.max_chips is not None and self.chips[name] + e.chips > quota.max_chips:
                self.blocked[e.id] = name
                return (f"quota: {who} holds {self.chips[name]} of {quota.max_chips} chips at once; "
                        f"this needs {e.chips}")
            if quota.chip_hours_week is not None:
                used, limit = self.week[name], quota.chip_hours_week
                more = e.chips * e.max_hours if e.max_hours is not None else 0.0
                if used >= limit or used + more > limit:
                    at_cap = f" and {more:.1f} at --max-hours" if more else ""
                    return (f"quota: {who} used {used:.1f} of {limit:g} chip-hours in 7 days"
                            f"{at_cap}")
        for name in self.shares.groups(e.owner):
            self.chips[name] += e.chips
        return None

    def victims(self, e: Entry, entries: Iterable[Entry]) -> list[Entry]:
        """The running entries whose preemption would let E (just refused by `admit`
        for a chips-at-once quota) start; [] when none, or not enough, rank below it."""
        name = self.blocked.get(e.id)
        if name is None:
            return []
        limit = self.shares.quotas[name].max_chips
        assert limit is not None  # blocked only by a chips-at-once quota
        under = [r for r in entries if r.state == "running" and name in self.shares.groups(r.owner)]
        leaving = sum(r.chips for r in under if preempting(r))
        need = self.chips[name] + e.chips - limit - leaving
        if need <= 0:
            return []  # chips on their way back already: E starts once they are
        chosen = []
        for r in sorted((r for r in under if r.priority < e.priority and not preempting(r)),
                        key=lambda r: (r.priority, -(r.started or 0.0))):
            if need <= 0:
                break
            chosen.append(r)
            need -= r.chips
        return chosen if need <= 0 else []


def preempting(e: Entry) -> bool:
    """E's current attempt is being preempted: asked to checkpoint and stop."""
    return bool((e.current() or {}).get("preempting"))
