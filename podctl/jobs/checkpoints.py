"""A run's checkpoints in GCS, as orbax's CheckpointManager writes them.

    gs://BUCKET/podctl/runs/RUN_ID/checkpoints/<step>/...            one step
                                               <step>/commit_success.txt  written last

orbax marks a finished save with `commit_success.txt` on every file system (on GCS,
which has no atomic rename, it is the only mark); a step without it is a save in
progress, or one a preemption cut short, and is shown as incomplete and never pulled
by default. Temporary directories (`<step>.orbax-checkpoint-tmp-*`, on file systems
with atomic rename) count as incomplete saves of their step.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from collections.abc import Callable

from podctl.errors import InvalidValueError, JobError
from podctl.storage import Storage

COMMIT_FILE = "commit_success.txt"
_STEP_DIR = re.compile(r"^(\d+)(\.orbax-checkpoint-tmp-.*)?$")
_GS = re.compile(r"^gs://([a-z0-9][a-z0-9._-]{1,221}[a-z0-9])(?:/(.*))?$")
PULL_PARALLEL = 16


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: str  # gs://BUCKET/.../<step>
    objects: int
    size_bytes: int
    updated: float  # the newest object's time, seconds since the epoch
    complete: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PullResult:
    step: int
    directory: Path
    files: int
    size_bytes: int
    seconds: float


def split_gs_url(url: str) -> tuple[str, str]:
    """gs://BUCKET/a/b/ -> ("BUCKET", "a/b")."""
    match = _GS.match(url.rstrip("/"))
    if not match:
        raise InvalidValueError(f"{url!r} is not a gs://BUCKET/PATH address.")
    return match.group(1), (match.group(2) or "").strip("/")


async def list_checkpoints(storage: Storage, directory: str) -> list[Checkpoint]:
    """The steps under DIRECTORY (a gs:// URL in STORAGE's bucket), oldest first."""
    bucket, prefix = split_gs_url(directory)
    base = f"{prefix}/" if prefix else ""
    groups: dict[str, list[Any]] = {}
    for obj in await storage.list(base):
        top, _, rest = obj.name[len(base):].partition("/")
        if rest and _STEP_DIR.match(top):
            groups.setdefault(top, []).append(obj)
    by_step: dict[int, Checkpoint] = {}
    for top, objects in groups.items():
        match = _STEP_DIR.match(top)
        assert match is not None
        step, temporary = int(match.group(1)), match.group(2) is not None
        complete = not temporary and any(o.name == f"{base}{top}/{COMMIT_FILE}" for o in objects)
        found = Checkpoint(step=step, path=f"gs://{bucket}/{base}{top}", objects=len(objects),
                           size_bytes=sum(o.size for o in objects),
                           updated=max(o.updated for o in objects), complete=complete)
        # A finished save wins over a leftover temporary directory of the same step.
        if step not in by_step or (found.complete and not by_step[step].complete):
            by_step[step] = found
    return [by_step[s] for s in sorted(by_step)]


def choose(checkpoints: list[Checkpoint], step: int | None, where: str) -> Checkpoint:
    """The step asked for, else the latest complete one; a clear error otherwise."""
    if step is None:
        complete = [c for c in checkpoints if c.complete]
        if not complete:
            raise JobError(f"no complete checkpoint in {where}"
                           + (f" ({len(checkpoints)} incomplete)" if checkpoints else "") + ".")
        return complete[-1]
    for c in checkpoints:
        if c.step == step:
            if not c.complete:
                raise JobError(f"checkpoint step {step} in {where} is incomplete (its save did not "
                               "finish); choose another --step.")
            return c
    steps = ", ".join(str(c.step) for c in checkpoints if c.complete) or "none"
    raise InvalidValueError(f"no checkpoint step {step} in {where}; complete steps: {steps}.")


def _local_path(root: Path, relative: str) -> Path:
    """Where an object lands under ROOT; refuses names that would escape it."""
    parts = PurePosixPath(relative).parts
    if not parts or any(p in ("..", "") for p in parts) or PurePosixPath(relative).is_absolute():
        raise JobError(f"refusing to write checkpoint object {relative!r} outside {root}.")
    return root.joinpath(*parts)


async def pull(storage: Storage, checkpoint: Checkpoint, dest: Path, *, parallel: int = PULL_PARALLEL,
               progress: Callable[[int, int], None] | None = None) -> PullResult:
    """Download one step to DEST/<step>/, PARALLEL objects at a time; PROGRESS(done, total)
    is called with bytes. Each file appears under its name only once complete."""
    _, prefix = split_gs_url(checkpoint.path)
    objects = [o for o in await storage.list(prefix + "/") if not o.name.endswith("/")]
    root = dest / str(checkpoint.step)
    total, done = sum(o.size for o in objects), 0
    started = time.monotonic()
    gate = asyncio.Semaphore(parallel)

    async def one(obj: Any) -> None:
        nonlocal done
        target = _local_path(root, obj.name[len(prefix) + 1:])
        target.parent.mkdir(parents=True, exist_ok=True)
        async with gate:
            await storage.download_file(obj.name, target)
        done += obj.size
        if progress:
            progress(done, total)

    if progress:
        progress(0, total)
    tasks = [asyncio.ensure_future(one(o)) for o in objects]
    try:
        await asyncio.gather(*tasks)
    except BaseException:  # one failed or Ctrl-C: the others stop too, before the error shows
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return PullResult(step=checkpoint.step, directory=root, files=len(objects), size_bytes=total,
                      seconds=time.monotonic() - started)
