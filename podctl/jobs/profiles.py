"""Profiles on demand: ask a running run for a JAX profiler trace, wait for it, pull it.

The channel is GCS, as for everything else a run says (no SSH needed):

    podctl/runs/RUN/control/profile.json                    the request (podctl writes it)
    podctl/runs/RUN/control/acks/ID/host-NNNN.json          each host's answer
    podctl/runs/RUN/profiles/plugins/profile/ID/host-NNNN.xplane.pb   the traces

Each host's agent reads the request (agent_control.py) and hands it to the script; the
template traces the next N steps and the agent uploads the trace. The profiles folder
is a TensorBoard log directory: `tensorboard --logdir gs://BUCKET/podctl/runs/RUN/profiles`
with the profile plugin (pip install tensorboard-plugin-profile), or `xprof --logdir`
on a pulled copy. A recovered run's request goes to its live attempt.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from podctl.base.errors import InvalidValueError, JobError
from podctl.cloud.storage import Storage
from podctl.host import run_layout
from podctl.jobs import run_files, run_record
from podctl.jobs.run_files import load_record

MAX_STEPS = 1000  # a trace of many steps is large; a few show a step's shape
ENDED = ("succeeded", "failed", "stopped", "lost")


@dataclass
class ProfileRequest:
    id: str
    run_id: str  # the attempt that traces (the live one of a recovered run)
    steps: int
    hosts: list[int] | None  # None: every host
    requested: float
    num_hosts: int = 0
    acks: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def logdir(self) -> str:
        return run_layout.profiles_logdir(self.run_id)

    @property
    def wanted(self) -> list[int]:
        return sorted(self.hosts) if self.hosts is not None else list(range(self.num_hosts))

    @property
    def missing(self) -> list[int]:
        return [h for h in self.wanted if h not in self.acks]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "acks": {str(h): a for h, a in sorted(self.acks.items())},
                "missing": self.missing}


def attempt_ids(record: run_record.RunRecord) -> list[str]:
    """The run ids of RECORD's attempts, first to last (just its own, if not recovered)."""
    ids = [a["run_id"] for a in record.extra.get("attempts", [])
           if isinstance(a, dict) and a.get("run_id")]
    return ids or [record.run_id]


def check_steps(steps: int) -> int:
    if not 1 <= steps <= MAX_STEPS:
        raise InvalidValueError(f"--steps {steps}: trace between 1 and {MAX_STEPS} steps "
                                "(a few show a step's shape; a trace of many is large).")
    return steps


async def request_profile(storage: Storage, run_id: str, steps: int,
                          hosts: set[int] | None) -> ProfileRequest:
    """Write RUN_ID's profile request (one at a time: a new one replaces the last)."""
    check_steps(steps)
    record = await load_record(storage, run_id)
    live_id = attempt_ids(record)[-1]
    live = record if live_id == run_id else await load_record(storage, live_id)
    if live.state in ENDED:
        raise JobError(f"run {run_id} has ended ({live.state}): only a running run can be "
                       f"profiled; `podctl profile {run_id} --pull DIR` gets the traces it took.")
    bad = sorted(h for h in hosts or () if not 0 <= h < live.num_hosts)
    if bad:
        raise InvalidValueError(f"--hosts: run {run_id} has hosts 0-{live.num_hosts - 1}, not "
                                f"{', '.join(map(str, bad))}.")
    request = ProfileRequest(id=time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2),
                             run_id=live_id, steps=steps, hosts=sorted(hosts) if hosts else None,
                             requested=time.time(), num_hosts=live.num_hosts)
    body = {"id": request.id, "steps": steps, "hosts": request.hosts, "requested": request.requested}
    await storage.upload_bytes(run_layout.profile_request_object(live_id),
                               json.dumps(body).encode(), content_type="application/json")
    return request


async def read_acks(storage: Storage, request: ProfileRequest) -> dict[int, dict[str, Any]]:
    for obj in await storage.list(run_layout.profile_acks_prefix(request.run_id, request.id)):
        host = run_layout.host_of(obj.name)
        if host not in request.acks:
            request.acks[host] = json.loads(await storage.download_bytes(obj.name))
    return request.acks


async def wait_for_profile(storage: Storage, request: ProfileRequest, timeout: float,
                           poll_seconds: float = 2.0) -> ProfileRequest:
    """Until every chosen host has answered, the run has ended, or TIMEOUT passed."""
    deadline = time.monotonic() + timeout
    ended: dict[int, run_record.HostStatus] = {}
    while True:
        await read_acks(storage, request)
        if not request.missing:
            return request
        ended = await run_files.read_statuses(storage, request.run_id, ended)
        if all(h in ended for h in request.missing) or time.monotonic() > deadline:
            await read_acks(storage, request)  # an answer written just before the end
            return request
        await asyncio.sleep(poll_seconds)


def _safe_relative(name: str, prefix: str) -> PurePosixPath:
    rel = PurePosixPath(name[len(prefix):])
    if rel.is_absolute() or any(part in ("", ".", "..") for part in rel.parts):
        raise JobError(f"refusing to download {name!r}: its name leaves the target folder")
    return rel


async def pull_profiles(storage: Storage, run_id: str, dest: Path) -> list[Path]:
    """Every trace of RUN_ID (all its attempts) into DEST, as a TensorBoard log
    directory: DEST/plugins/profile/ID/host-NNNN.xplane.pb."""
    record = await load_record(storage, run_id)
    written: list[Path] = []
    for attempt in attempt_ids(record):
        prefix = f"{run_layout.profiles_logdir(attempt)}/"
        for obj in await storage.list(prefix):
            target = dest.joinpath(*_safe_relative(obj.name, prefix).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            await storage.download_file(obj.name, target)
            written.append(target)
    return written
