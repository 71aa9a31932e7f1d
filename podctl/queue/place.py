"""Where the queue lives, and what podctl.toml says of its shares.

    PODCTL_QUEUE_URL, else queue_url in podctl.toml   -> the store of its scheme
                                                         (queue/stores/: PostgreSQL)
    neither                                           -> SQLite in the state dir

podctl.toml may also carry the queue's quotas and teams (the queue's own, set with
`podctl queue quota set` / `team set`, win for the same name):

    queue_url = "postgresql://podctl@10.1.2.3/podctl"

    [queue]
    preempt = true      # a higher priority held back by a chips quota preempts lower ones

    [queue.quotas."alice@example.com"]
    chip_hours_week = 2000
    max_chips = 64

    [queue.teams]
    research = ["alice@example.com", "bob@example.com"]
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from podctl.base.errors import ConfigError
from podctl.base.numbers import WHOLE_HIGHEST
from podctl.queue.interface import QueueStore, Quota


def queue_url(env: Mapping[str, str] = os.environ, cwd: Path | None = None) -> str | None:
    from podctl.base.settings import read_podctl_toml

    url = env.get("PODCTL_QUEUE_URL") or read_podctl_toml(cwd or Path.cwd()).get("queue_url")
    if url is not None and not isinstance(url, str):
        raise ConfigError("queue_url in podctl.toml must be a string: \"postgresql://USER@HOST/DB\".")
    return url or None


def open_store(state_dir: Path, url: str | None) -> QueueStore:
    """The queue at URL, else this machine's (the stores' registry, queue/stores/)."""
    from podctl.queue import stores

    return stores.open_store(url, state_dir)


def _number(value: Any, what: str, whole: bool) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf or (
            whole and not isinstance(value, int)) or value > WHOLE_HIGHEST:  # TOML has nan and inf
        kind = "a whole number" if whole else "a finite number"
        raise ConfigError(f"{what} in podctl.toml must be {kind}, 0 or more (got {value!r}).")
    return value


def _queue_table(cwd: Path | None) -> dict[str, Any]:
    from podctl.base.settings import load_podctl_toml

    table = load_podctl_toml(cwd or Path.cwd()).get("queue", {})
    if not isinstance(table, dict):
        raise ConfigError("[queue] in podctl.toml must be a table.")
    unknown = set(table) - {"preempt", "quotas", "teams"}
    if unknown:
        raise ConfigError(f"[queue] in podctl.toml takes preempt, quotas and teams (not "
                          f"{', '.join(sorted(unknown))}).")
    return table


def toml_preempt(cwd: Path | None = None) -> bool:
    from podctl.base.settings import switch

    return bool(switch(_queue_table(cwd).get("preempt"), "[queue] preempt"))


def toml_shares(cwd: Path | None = None) -> tuple[list[Quota], dict[str, str]]:
    """The quotas and the team members ([queue.quotas], [queue.teams]) of podctl.toml."""
    table = _queue_table(cwd)
    quotas = []
    for name, q in (table.get("quotas") or {}).items():
        if not isinstance(q, dict) or set(q) - {"chip_hours_week", "max_chips"}:
            raise ConfigError(f"[queue.quotas.\"{name}\"] in podctl.toml takes chip_hours_week and "
                              "max_chips only.")
        hours = _number(q.get("chip_hours_week"), f"chip_hours_week of {name}", whole=False)
        chips = _number(q.get("max_chips"), f"max_chips of {name}", whole=True)
        quotas.append(Quota(name, None if hours is None else float(hours),
                            None if chips is None else int(chips), source="podctl.toml"))
    members: dict[str, str] = {}
    for team, people in (table.get("teams") or {}).items():
        if not isinstance(people, list) or not all(isinstance(p, str) for p in people):
            raise ConfigError(f"[queue.teams] {team} in podctl.toml must be a list of accounts.")
        members.update({person: team for person in people})
    return quotas, members
