"""One queued run (Entry), the words the queue uses for its states and priorities, and
what an entry costs in chips: the one dataclass every queue store reads and writes.

Env values live in the entry (its store is the user's own: a 0600 file, or a database
only the team reaches); they leave it only towards the hosts' configs. `to_json()` lists
their keys, never values, and `repr()` shows neither.
"""

from __future__ import annotations

import getpass
import json
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from podctl.base.errors import InvalidSliceError, InvalidValueError

STATES = ("pending", "provisioning", "starting", "running", "succeeded", "failed", "cancelled")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
HOLDING = frozenset({"provisioning", "starting", "running"})  # an attempt holds (or asks for) a slice
TIERS = ("on-demand", "spot", "queued")  # a node; a spot queued resource; an on-demand one
# `queue add --priority WORD`: the bands, wide apart so that numbers fit between them
PRIORITIES = {"high": 100, "normal": 0, "low": -100}
# How long the names a user gives the queue may be (each is stored, and shown in `queue ls`
# and the log): an entry's or a team's name as long as a slice's, an account as long as an
# e-mail address may be (RFC 5321's 254).
NAME_MOST = 63
ACCOUNT_MOST = 254
JSON_FIELDS = frozenset({"args", "env", "attempts", "preflight"})


@dataclass
class Entry:
    id: int
    name: str
    accelerator_type: str
    project: str
    zone: str
    bucket: str
    script: str  # the script's path inside the bundle
    bundle_hash: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    priority: int = 0
    tier: str = "on-demand"
    valid_for: int | None = None  # seconds a queued resource may wait for capacity
    max_hours: float | None = None
    max_cost: float | None = None
    max_attempts: int = 3
    state: str = "pending"
    attempt: int = 0  # 0 until the first slice is asked for
    slice_name: str | None = None
    run_id: str | None = None
    operation: str | None = None  # the current node creation's long-running operation
    attempts: list[dict[str, Any]] = field(default_factory=list)  # one record per attempt
    created: float = 0.0
    updated: float = 0.0
    started: float | None = None  # the current attempt's run started
    ended: float | None = None
    next_try_at: float = 0.0
    backoff: int = 0  # stockouts / quota refusals in a row
    last_error: str | None = None
    exit_code: int | None = None
    cost: float | None = None
    preflight: dict[str, Any] | None = None  # `queue add --preflight`'s report (podctl/policy/preflight.py)
    owner: str = ""  # who added it: the gcloud/ADC account, else the OS user
    waiting: str | None = None  # why a due pending entry does not start (its owner's quota)
    # `queue add --via`: how its run reaches the hosts (a channel's name or auto); None:
    # the ticker's settings (PODCTL_VIA), else the registry's default (auto)
    via: str | None = None
    # `queue add --num-slices K`: K slices of the type (multislice, MEGASCALE_*); with
    # --elastic, one queued resource per slice (`up --elastic`): a lost one is asked for
    # again alone while the run goes on on the rest (steps/elastic.py), not above
    # --min-slices (None: 1) and no longer than --grow-deadline (seconds; None: 6 h)
    num_slices: int = 1
    elastic: bool = False
    min_slices: int | None = None
    grow_deadline: float | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def queued(self) -> bool:
        return self.tier in ("spot", "queued")

    def current(self) -> dict[str, Any] | None:
        return self.attempts[-1] if self.attempts and self.attempts[-1]["attempt"] == self.attempt else None

    @property
    def chips(self) -> int:
        return chips_of(self.accelerator_type) * self.num_slices

    def chip_hours(self, since: float, now: float) -> float:
        """Chip-hours its slices held between SINCE and NOW: from each attempt's READY
        (what is billed as the run's) to its end, or NOW while it lasts."""
        seconds = 0.0
        for a in self.attempts:
            if a.get("ready_at"):
                seconds += max(0.0, min(a.get("ended") or now, now) - max(a["ready_at"], since))
        return self.chips * seconds / 3600

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["env_keys"] = sorted(data.pop("env"))  # values never leave through here
        data["run_ids"] = [a["run_id"] for a in self.attempts if a.get("run_id")]
        return data

    def __repr__(self) -> str:  # a stray repr() in a log must not carry env values
        return f"Entry(id={self.id}, name={self.name!r}, state={self.state!r}, attempt={self.attempt})"


COLUMNS = tuple(f.name for f in fields(Entry))


def stamped(changes: dict[str, Any]) -> dict[str, Any]:
    """CHANGES to an entry, checked to be its fields, with its `updated` time: what a
    store's compare-and-set `update` writes (and then sets on the entry in memory)."""
    unknown = set(changes) - set(COLUMNS)
    if unknown:
        raise ValueError(f"unknown entry fields {sorted(unknown)}")
    return {**changes, "updated": time.time()}


def encode(key: str, value: Any) -> Any:
    """A field as a store keeps it: JSON text for the structured ones."""
    return json.dumps(value) if key in JSON_FIELDS and value is not None else value


def decode(row: dict[str, Any]) -> Entry:
    data = {k: row[k] for k in COLUMNS if k in row}
    for key in JSON_FIELDS:
        data[key] = None if data.get(key) is None else json.loads(data[key])
    if "elastic" in data:  # SQLite keeps a flag as 0 or 1
        data["elastic"] = bool(data["elastic"])
    return Entry(**data)


def chips_of(accelerator_type: str) -> int:
    from podctl.base.topology import parse_slice

    try:
        return parse_slice(accelerator_type).chips
    except InvalidSliceError:  # a type this podctl no longer knows: counts as nothing
        return 0


def parse_priority(value: str | int) -> int:
    """`high`, `normal`, `low`, or a whole number (higher starts first)."""
    if isinstance(value, int):
        from podctl.base.numbers import check_number

        return int(check_number(value, "priority", whole=True))
    text = value.strip().lower()
    if text in PRIORITIES:
        return PRIORITIES[text]
    from podctl.base.numbers import parse_number, plain_number

    if plain_number(text, whole=True) is None:
        raise InvalidValueError(f"--priority takes high, normal, low or a whole number "
                                f"(got {value!r}).")
    return int(parse_number(text, "--priority", whole=True))  # within the store's 64-bit column


def check_name(text: str, what: str, most: int = NAME_MOST) -> str:
    """TEXT as a name the queue keeps: not blank, at most MOST characters; else one line."""
    if not text.strip():
        raise InvalidValueError(f"{what} is empty: give 1-{most} characters.")
    if len(text) > most:
        raise InvalidValueError(f"{what} is {len(text):,} characters long: give 1-{most}.")
    return text


def priority_word(priority: int) -> str:
    return next((word for word, number in PRIORITIES.items() if number == priority), str(priority))


def default_owner(account: str | None) -> str:
    """Who adds an entry: the account podctl works as (gcloud's, or the fake's user),
    else the OS user, as `queue ls --mine` looks for it."""
    return account or getpass.getuser()
