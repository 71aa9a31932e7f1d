"""What a run is: its id, its record (run.json, and its index entry), its hosts' ends.

Where its files live in GCS is run_layout.py's (shared with the hosts' agent);
run_files.py reads and writes them.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from podctl.host import run_layout

_RUN_ID = re.compile(r"^[a-z][a-z0-9-]{0,80}-\d{8}-\d{6}-[0-9a-f]{4}$")

RunState = Literal["starting", "running", "succeeded", "failed", "stopped", "lost"]


def new_run_id(slice_name: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{slice_name}-{stamp}-{secrets.token_hex(2)}"


def valid_run_id(run_id: str) -> bool:
    return bool(_RUN_ID.match(run_id))


@dataclass
class RunRecord:
    """run.json and the index entry: what was started. Env values are never stored
    here (only their names), since anyone who can list the bucket reads this."""

    run_id: str
    slice_name: str
    project: str
    zone: str
    num_hosts: int
    kind: Literal["script", "exec"]
    script: str | None
    args: list[str]
    env_keys: list[str]
    bundle_hash: str | None
    created: float
    state: RunState = "starting"
    exit_code: int | None = None
    failed_host: int | None = None
    ended: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __repr__(self) -> str:
        """One line a person reads (a notebook's `cloud.runs()`); to_json() has it all."""
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.created))
        code = "" if self.exit_code is None else f" exit {self.exit_code}"
        reason = f" ({self.extra['reason']})" if self.extra.get("reason") else ""
        return (f"<run {self.run_id} {self.state}{code}{reason} on {self.slice_name} "
                f"({self.num_hosts} hosts), {when}, {self.script or self.kind}>")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def end_words(record: RunRecord) -> str:
    """A run's end as one phrase after "run RUN_ID": the attached client's last line,
    `podctl runs` and the queue say the same. Each end writes its why in the record:
    stopped (extra.stopped_by: who), failed and lost (extra.reason: why)."""
    reason = record.extra.get("reason")
    if record.state == "succeeded":
        return f"succeeded on {record.num_hosts} host{'s' if record.num_hosts != 1 else ''}"
    if record.state == "stopped":
        by = record.extra.get("stopped_by")
        return (f"stopped by {by}" if by else "stopped") + (f" ({reason})" if reason else "")
    if record.state == "failed":
        if reason:
            return f"failed: {reason}"
        if record.failed_host is not None:  # a record written before reasons were
            return f"failed: host {record.failed_host:04d} exited {record.exit_code}"
        return f"failed: exit code {record.exit_code}"
    if record.state == "lost":
        return f"lost: {reason}" if reason else "lost: its hosts went silent"
    return f"is {record.state}"


SLICE_IDENTITY_TOLERANCE = 1.0  # seconds: createTime of one slice read at two times


def on_slice(record: RunRecord, name: str, created: float) -> bool:
    """Was RECORD's run started on this very slice (NAME, made at CREATED)? A record of
    an earlier slice of the same name is not (matched by identity, not by name)."""
    if record.slice_name != name:
        return False
    made = record.extra.get("slice_created")
    if isinstance(made, (int, float)):
        return abs(made - created) <= SLICE_IDENTITY_TOLERANCE
    return record.created >= created - SLICE_IDENTITY_TOLERANCE  # older records: by start time


def record_checkpoint_dir(record: RunRecord) -> str:
    """The gs:// directory a run's script was given as PODCTL_CHECKPOINT_DIR."""
    given: str | None = record.extra.get("checkpoint_dir")
    if given:
        return given
    return run_layout.checkpoint_dir(record.extra.get("bucket", ""), record.run_id)


@dataclass(frozen=True)
class HostStatus:
    host: int
    exit_code: int
    ended: float
    stopped: bool = False
    error: str | None = None
    tail: tuple[str, ...] = ()  # a failed script's last lines
    process: int | None = None  # the script's JAX process index, if it named it
    fatal: tuple[str, ...] = ()  # a native abort's glog FATAL line and those after it
    killed_state: str | None = None  # the script's process state when its agent SIGKILLed it

    def explanation(self) -> str:
        """What the host said of its failure: its error, a native abort's cause, its last
        lines, for classifying."""
        return "\n".join([self.error or "", *self.fatal, *self.tail])


def job_exit_code(statuses: dict[int, HostStatus]) -> tuple[int, HostStatus | None]:
    """0 when every host exited 0; otherwise the first failure's code (by end time),
    preferring a host that failed on its own over one that podctl stopped."""
    failures = [s for s in statuses.values() if s.exit_code != 0]
    if not failures:
        return 0, None
    first = min(failures, key=lambda s: (s.stopped, s.ended, s.host))
    return first.exit_code, first
