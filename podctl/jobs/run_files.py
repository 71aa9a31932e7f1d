"""A run's files in GCS, read and written in one place (the host agent, which must
stand alone on a bare host, writes its own side: podctl/host/agent*.py). Both sides
name every object with run_layout.py (shipped in the agent's zip):

    podctl/runs/RUN_ID/run.json                    the record (RunRecord), also in the index
    podctl/runs/RUN_ID/logs/host-NNNN/NNNNNN.log   numbered chunks of whole lines
    podctl/runs/RUN_ID/status/host-NNNN.json       a host's end: exit code, when, why
    podctl/runs/RUN_ID/heartbeat/host-NNNN.json    a host's agent is alive (every 10 s)
    podctl/runs/RUN_ID/control/stop.json           the owner's stop
    podctl/index/RUN_ID.json                       the record again, for `podctl runs`

Whoever asks — `podctl run` following, `logs`, `stop`, `cost`, the queue's tick,
`budget check`, recovery — reads them with these functions, so a host is lost after
the same silence everywhere (HOST_LOST_SECONDS) and a record is closed the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from podctl.base.errors import InvalidValueError, JobError
from podctl.base.vocabulary import EXIT_HOST_LOST as EXIT_HOST_LOST  # base/vocabulary.py owns them; re-exported
from podctl.base.vocabulary import HOST_LOST_SECONDS as HOST_LOST_SECONDS
from podctl.base.vocabulary import LIVE_RUN_STATES
from podctl.cloud.storage import Storage, StorageError, StorageNotFound
from podctl.host import run_layout
from podctl.jobs import run_record
from podctl.jobs.run_record import HostStatus
from podctl.jobs.run_record import RunRecord as RunRecord  # run_record.py owns it; re-exported

MAX_LISTED = 100


# ---- the record ----------------------------------------------------------------------

async def save_record(storage: Storage, record: RunRecord) -> None:
    """run.json and its index entry, the same bytes in both."""
    data = json.dumps(record.to_json()).encode()
    await storage.upload_bytes(run_layout.record_object(record.run_id), data,
                               content_type="application/json")
    await storage.upload_bytes(run_layout.index_object(record.run_id), data,
                               content_type="application/json")


async def read_record(storage: Storage, run_id: str) -> RunRecord | None:
    """RUN_ID's record, or None when it has none (yet)."""
    try:
        data = await storage.download_bytes(run_layout.record_object(run_id))
    except StorageNotFound:
        return None
    return RunRecord.from_json(json.loads(data))


async def load_record(storage: Storage, run_id: str) -> RunRecord:
    """RUN_ID's record; a one-line error for a malformed id or a run that is not there."""
    if not run_record.valid_run_id(run_id):
        raise InvalidValueError(f"{run_id!r} is not a run id (e.g. my-slice-20261202-173000-ab12); "
                                "`podctl runs` lists them.")
    record = await read_record(storage, run_id)
    if record is None:
        raise JobError(f"no run {run_id} in gs://{storage.bucket_name}; `podctl runs` lists them.")
    return record


async def close_record(storage: Storage, run_id: str, state: str, *, exit_code: int | None = None,
                       keep_exit_code: bool = False, even_if_ended: bool = False,
                       **extra: Any) -> RunRecord | None:
    """End RUN_ID's record as STATE (stopped, lost, ...) with EXTRA noted, unless it has
    ended already (EVEN_IF_ENDED: a stop that was asked for is what the record says,
    though a follower wrote the exit it caused first) -> the record as written, or None
    when nothing was written."""
    record = await read_record(storage, run_id)
    if record is None or (record.state not in LIVE_RUN_STATES and not even_if_ended):
        return None
    record.state = state  # type: ignore[assignment]
    if not keep_exit_code:
        record.exit_code = exit_code
    record.ended = record.ended or time.time()
    record.extra = {**record.extra, **{k: v for k, v in extra.items() if v is not None}}
    await save_record(storage, record)
    return record


def attempt_ids(record: RunRecord) -> list[str]:
    """The run ids of a run's attempts, first to last (a run without recoveries: its own)."""
    return [a["run_id"] for a in record.extra.get("attempts", [])
            if isinstance(a, dict) and a.get("run_id")] or [record.run_id]


async def live_attempt(storage: Storage, record: RunRecord) -> RunRecord:
    """The record of RECORD's last attempt (RECORD itself for a run never recovered, or
    when the attempt has no record yet)."""
    last = attempt_ids(record)[-1]
    if last == record.run_id:
        return record
    return await read_record(storage, last) or record


async def run_of(storage: Storage, record: RunRecord) -> RunRecord:
    """The run RECORD belongs to: a later attempt's record names its first (`parent`)."""
    parent = record.extra.get("parent")
    if isinstance(parent, str) and parent != record.run_id and run_record.valid_run_id(parent):
        return await read_record(storage, parent) or record
    return record


# ---- the owner's stop -----------------------------------------------------------------

@dataclass(frozen=True)
class StopRequest:
    """A stop that the run's owner asked for (`podctl stop`, `Run.stop()`, a budget): final.
    The hosts' agents act on it too (the way in when SSH is not: another identity)."""

    by: str
    requested: float
    grace_seconds: float | None = None  # the script's time to checkpoint before SIGKILL


async def request_stop(storage: Storage, run_ids: list[str], *, by: str,
                       grace_seconds: float | None = None) -> StopRequest:
    """Write the stop request of each of RUN_IDS (a run, and its live attempt)."""
    request = StopRequest(by=by, requested=time.time(), grace_seconds=grace_seconds)
    body = json.dumps({"by": by, "requested": request.requested,
                       "grace_seconds": grace_seconds}).encode()
    for run_id in dict.fromkeys(run_ids):
        await storage.upload_bytes(run_layout.stop_request_object(run_id), body,
                                   content_type="application/json")
    return request


async def read_stop_request(storage: Storage, *run_ids: str) -> StopRequest | None:
    """The first stop request written for any of RUN_IDS; None when none was (or it is
    not one podctl wrote: a stop is never guessed from a broken object)."""
    for run_id in dict.fromkeys(run_ids):
        try:
            data = json.loads(await storage.download_bytes(run_layout.stop_request_object(run_id)))
        except StorageNotFound:
            continue
        except ValueError:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("by"), str):
            continue
        grace = data.get("grace_seconds")
        requested = data.get("requested")
        return StopRequest(
            by=data["by"][:100],
            requested=float(requested) if isinstance(requested, (int, float)) else 0.0,
            grace_seconds=float(grace) if isinstance(grace, (int, float)) and math.isfinite(grace)
            and grace >= 0 else None)
    return None


async def _settle(storage: Storage, record: RunRecord) -> RunRecord:
    """A record last written while the run was going: finish it from the hosts' status."""
    if record.state not in LIVE_RUN_STATES:
        return record
    statuses = await read_statuses(storage, record.run_id)
    if len(statuses) >= record.num_hosts:
        code, failed = run_record.job_exit_code(statuses)
        record.state = "failed" if failed else "succeeded"
        record.exit_code = code
    return record


async def list_runs(storage: Storage, *, as_shown: bool = False) -> list[RunRecord]:
    """The newest MAX_LISTED runs' records, newest first, settled from their statuses;
    AS_SHOWN (`podctl runs`, `cloud.runs()`): a recovered run as its live attempt is
    (never written back: what acts on records reads each attempt's own)."""
    entries = sorted(await storage.list(run_layout.index_prefix()), key=lambda o: o.name, reverse=True)
    records = []
    for entry in sorted(entries, key=lambda o: o.updated, reverse=True)[:MAX_LISTED]:
        record = RunRecord.from_json(json.loads(await storage.download_bytes(entry.name)))
        records.append(await _settle(storage, record))
    if as_shown:
        by_id = {r.run_id: r for r in records}
        records = [_as_live_attempt(r, by_id) for r in records]
    return sorted(records, key=lambda r: r.created, reverse=True)


def _as_live_attempt(record: RunRecord, by_id: dict[str, RunRecord]) -> RunRecord:
    """A recovered run whose last attempt is going reads as going (its first attempt's
    end is not the run's)."""
    last = by_id.get(attempt_ids(record)[-1])
    if last is None or last is record or last.state not in LIVE_RUN_STATES:
        return record
    return dataclasses.replace(record, state=last.state, exit_code=None, ended=None,
                               failed_host=None)


# ---- what the hosts write -----------------------------------------------------------

async def read_statuses(storage: Storage, run_id: str,
                        known: dict[int, HostStatus] | None = None) -> dict[int, HostStatus]:
    """Every host's status written so far (those in KNOWN are not downloaded again)."""
    statuses = dict(known or {})
    for obj in await storage.list(run_layout.status_prefix(run_id)):
        host = run_layout.host_of(obj.name)
        if host not in statuses:
            data = json.loads(await storage.download_bytes(obj.name))
            statuses[host] = HostStatus(host=host, exit_code=int(data["exit_code"]),
                                        ended=float(data["ended"]), stopped=bool(data.get("stopped")),
                                        error=data.get("error"),
                                        tail=tuple(str(t) for t in data.get("tail") or ()),
                                        process=_index(data.get("process_index")),
                                        fatal=tuple(str(t) for t in data.get("fatal") or ()),
                                        killed_state=_word(data.get("killed_state")))
    return statuses


def _word(value: object) -> str | None:
    """A one-letter process state (R, S, D, T, Z, ...) the agent wrote, or None."""
    return value if isinstance(value, str) and len(value) == 1 and value.isalpha() else None


def _index(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


async def read_heartbeats(storage: Storage, run_id: str) -> dict[int, float]:
    """host -> when its agent last beat (GCS's clock: the object's update time)."""
    return {run_layout.host_of(o.name): o.updated
            for o in await storage.list(run_layout.heartbeat_prefix(run_id))}


async def read_beats(storage: Storage, run_id: str) -> dict[int, dict[str, Any]]:
    """host -> its agent's last heartbeat as it wrote it (time, the script's progress,
    its process's state, its JAX process index); an unreadable one is left out."""
    beats = {}
    for obj in await storage.list(run_layout.heartbeat_prefix(run_id)):
        with contextlib.suppress(StorageError, ValueError):
            beat = json.loads(await storage.download_bytes(obj.name))
            if isinstance(beat, dict):
                beats[run_layout.host_of(obj.name)] = beat
    return beats


def silent_hosts(num_hosts: int, statuses: dict[int, HostStatus], heartbeats: dict[int, float],
                 since: float, now: float) -> list[int]:
    """Hosts with no status whose agent has not beaten for HOST_LOST_SECONDS (counted
    from SINCE at the earliest: when the reader began, or the run started)."""
    return [h for h in range(num_hosts) if h not in statuses
            and now - max(heartbeats.get(h, since), since) > HOST_LOST_SECONDS]


SILENT = "the host stopped sending heartbeats"


def lost_status(host: int, now: float, why: str = SILENT) -> HostStatus:
    return HostStatus(host=host, exit_code=EXIT_HOST_LOST, ended=now, error=why)


async def gone_reason(storage: Storage, run_id: str) -> str | None:
    """Why RUN_ID's hosts are gone when its record says so (`lost`: its slice was
    deleted, say), else None: a reader then waits for no heartbeat to end it."""
    record = await read_record(storage, run_id)
    if record is None or record.state != "lost":
        return None
    return str(record.extra.get("reason") or "the run's record says its hosts are lost")


async def list_chunks(storage: Storage, run_id: str, host: int | None = None) -> dict[int, list[tuple[int, str]]]:
    """host -> [(chunk number, object name)], sorted, of RUN_ID's log chunks (one host's
    prefix only when HOST is given: a 512-host run has 512 hosts' chunks)."""
    return run_layout.chunks_by_host([obj.name for obj in await storage.list(run_layout.log_prefix(run_id, host))])


def split_lines(data: bytes) -> list[str]:
    """A chunk's lines as the host's agent wrote them: split at "\\n" only (a trailing
    "\\r" dropped), not at the other line breaks str.splitlines knows (\\x0b, \\x0c,
    \\x1c-\\x1e, \\x85, \\u2028, a lone \\r), which a script may print inside a line."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


async def read_host_lines(storage: Storage, run_id: str, host: int) -> list[str]:
    """Every line HOST has shipped so far, in order (chunks read in unbroken number
    order, as the log reader does: a gap ends the read)."""
    lines: list[str] = []
    for _number, name in run_layout.unbroken((await list_chunks(storage, run_id, host)).get(host, [])):
        lines.extend(split_lines(await storage.download_bytes(name)))
    return lines


async def read_host_phases(storage: Storage, run_id: str, host: int) -> dict[str, float]:
    """When each of HOST's agent phases began (starting, environment, setup, running,
    done): from its status once it ended, else from its last heartbeat; {} if neither."""
    for name in (run_layout.status_object(run_id, host), run_layout.heartbeat_object(run_id, host)):
        try:
            data = json.loads(await storage.download_bytes(name))
        except StorageNotFound:
            continue
        phases = data.get("phases")
        if isinstance(phases, dict):
            return {str(k): float(v) for k, v in phases.items() if isinstance(v, (int, float))}
    return {}
