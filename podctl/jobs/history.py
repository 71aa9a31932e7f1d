"""Runs after the fact: their records, and their state read back from GCS."""

from __future__ import annotations

import json
from typing import Any

from podctl.errors import InvalidValueError, JobError
from podctl.jobs import runs
from podctl.jobs.runs import RunRecord

MAX_LISTED = 100


async def save_record(storage: Any, record: RunRecord) -> None:
    """run.json and its index entry, the same bytes in both."""
    data = json.dumps(record.to_json()).encode()
    await storage.upload_bytes(f"{runs.run_prefix(record.run_id)}/run.json", data,
                               content_type="application/json")
    await storage.upload_bytes(f"{runs.INDEX}/{record.run_id}.json", data,
                               content_type="application/json")


async def load_record(storage: Any, run_id: str) -> RunRecord:
    from podctl.storage import StorageNotFound

    if not runs.valid_run_id(run_id):
        raise InvalidValueError(f"{run_id!r} is not a run id (e.g. my-slice-20261202-173000-ab12); "
                                "`podctl runs` lists them.")
    try:
        data = await storage.download_bytes(f"{runs.run_prefix(run_id)}/run.json")
    except StorageNotFound as e:
        raise JobError(f"no run {run_id} in gs://{storage.bucket_name}; `podctl runs` lists them.") from e
    return RunRecord.from_json(json.loads(data))


async def _settle(storage: Any, record: RunRecord) -> RunRecord:
    """A record last written while the run was going: finish it from the hosts' status."""
    if record.state not in ("starting", "running"):
        return record
    statuses = await storage.list(runs.status_prefix(record.run_id))
    if len(statuses) >= record.num_hosts:
        codes = [json.loads(await storage.download_bytes(s.name))["exit_code"] for s in statuses]
        failures = [c for c in codes if c != 0]
        record.state = "failed" if failures else "succeeded"
        record.exit_code = failures[0] if failures else 0
    return record


async def list_runs(storage: Any) -> list[RunRecord]:
    entries = sorted(await storage.list(f"{runs.INDEX}/"), key=lambda o: o.name, reverse=True)
    records = []
    for entry in sorted(entries, key=lambda o: o.updated, reverse=True)[:MAX_LISTED]:
        record = RunRecord.from_json(json.loads(await storage.download_bytes(entry.name)))
        records.append(await _settle(storage, record))
    return sorted(records, key=lambda r: r.created, reverse=True)
