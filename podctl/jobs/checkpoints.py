"""A run's checkpoints in GCS, as orbax's CheckpointManager writes them.

    gs://BUCKET/podctl/runs/RUN_ID/checkpoints/<step>/...            one step
                                               <step>/commit_success.txt  orbax's, last
                                               <step>/podctl_manifest.json  what it wrote

orbax marks a finished save with `commit_success.txt` on every file system (on GCS,
which has no atomic rename, it is the only mark); a step without it is a save in
progress, or one a preemption cut short, and is shown as incomplete and never pulled
by default. Temporary directories (`<step>.orbax-checkpoint-tmp-*`, on file systems
with atomic rename) count as incomplete saves of their step.

The commit marker says the save finished, not that its objects are still what it wrote:
an object truncated or replaced later leaves the marker in place, and orbax's restore then
fails deep in tensorstore. The template (templates/ckpt_manifest.py) records, once a step
is committed, every object's size and the crc32c GCS computed on upload; a step whose
objects differ from its manifest is damaged: incomplete here, never pulled by default,
and skipped by the template's restore. A step with no manifest (another script's, or a
save cut short between its commit and its manifest) is trusted as orbax marks it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from podctl.base.errors import InvalidValueError, JobError
from podctl.cloud.storage import ObjectInfo, Storage

COMMIT_FILE = "commit_success.txt"
MANIFEST_FILE = "podctl_manifest.json"  # templates/ckpt_manifest.py's MANIFEST
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
    complete: bool  # committed, and (where a manifest says what the save wrote) whole
    verified: bool = False  # its objects were checked against its manifest
    problem: str | None = None  # why it is not complete, in a clause

    @property
    def state(self) -> str:
        """As `ckpt ls` shows it."""
        if self.complete:
            return "complete" if self.verified else "complete (no manifest to check)"
        return f"DAMAGED: {self.problem}" if self.damaged else "INCOMPLETE"

    @property
    def damaged(self) -> bool:
        """Committed, but its objects are no longer what its save wrote."""
        return self.problem is not None and not self.problem.startswith(_UNFINISHED)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state}


@dataclass(frozen=True)
class PullResult:
    step: int
    directory: Path
    files: int
    size_bytes: int
    seconds: float
    skipped: str | None = None  # newer steps passed by as damaged, with why (`skipped`)


def split_gs_url(url: str) -> tuple[str, str]:
    """gs://BUCKET/a/b/ -> ("BUCKET", "a/b")."""
    match = _GS.match(url.rstrip("/"))
    if not match:
        raise InvalidValueError(f"{url!r} is not a gs://BUCKET/PATH address.")
    return match.group(1), (match.group(2) or "").strip("/")


_UNFINISHED = "its save did not finish"


def damage(recorded: Any, now: dict[str, ObjectInfo]) -> str | None:
    """The first object (largest first) that RECORDED (a manifest) holds and NOW (the
    step's objects by name under its directory) lacks or holds otherwise, in a clause;
    None when every one is as the save wrote it. templates/ckpt_manifest.py's `differs`."""
    wrote = recorded.get("objects") if isinstance(recorded, dict) else None
    if not isinstance(wrote, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("size"), int) for v in wrote.values()):
        return f"its {MANIFEST_FILE} is not one the template writes"
    for name, saved in sorted(wrote.items(), key=lambda kv: (-kv[1]["size"], kv[0])):
        have = now.get(name)
        if have is None:
            return f"{name} is missing (the save wrote {len(wrote)} objects)"
        if have.size != saved["size"]:
            return f"{name} is {have.size:,} bytes, the save wrote {saved['size']:,}"
        if saved.get("crc32c") and have.crc32c and saved["crc32c"] != have.crc32c:
            return f"{name} changed since the save (its crc32c differs)"
    return None


async def _checked(storage: Storage, found: Checkpoint, objects: list[Any], base: str) -> Checkpoint:
    """FOUND (committed) checked against its manifest, where it has one."""
    prefix = f"{base}{found.step}/"
    if not any(o.name == prefix + MANIFEST_FILE for o in objects):
        return found
    try:
        recorded = json.loads(await storage.download_bytes(prefix + MANIFEST_FILE))
    except (UnicodeDecodeError, json.JSONDecodeError):
        recorded = None
    why = damage(recorded, {o.name[len(prefix):]: o for o in objects if o.name != prefix + MANIFEST_FILE})
    return replace(found, verified=why is None, complete=why is None, problem=why)


async def list_checkpoints(storage: Storage, directory: str) -> list[Checkpoint]:
    """The steps under DIRECTORY (a gs:// URL in STORAGE's bucket), oldest first; a
    committed step with a manifest is checked against it (one small read per step)."""
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
                           updated=max(o.updated for o in objects), complete=complete,
                           problem=None if complete else f"{_UNFINISHED} (no {COMMIT_FILE})")
        if complete:
            found = await _checked(storage, found, objects, base)
        # A finished save (whole or damaged) wins over a leftover temporary directory of
        # the same step.
        if step not in by_step or (found.complete and not by_step[step].complete) or (
                found.damaged and not by_step[step].complete and not by_step[step].damaged):
            by_step[step] = found
    return [by_step[s] for s in sorted(by_step)]


def skipped(checkpoints: list[Checkpoint], chosen: Checkpoint) -> str | None:
    """The damaged steps newer than CHOSEN (the default passed them by), in a line."""
    damaged = [c for c in checkpoints if c.step > chosen.step and c.damaged]
    return "; ".join(f"step {c.step}: {c.problem}" for c in damaged) or None


def choose(checkpoints: list[Checkpoint], step: int | None, where: str) -> Checkpoint:
    """The step asked for, else the latest complete one (a damaged one passed by: the
    caller says so with `skipped`); a clear error otherwise."""
    if step is None:
        complete = [c for c in checkpoints if c.complete]
        if not complete:
            damaged = [c for c in checkpoints if c.damaged]
            raise JobError(f"no complete checkpoint in {where}"
                           + (f" ({len(checkpoints)} incomplete)" if checkpoints and not damaged else "")
                           + (f" ({'; '.join(f'step {c.step}: {c.problem}' for c in damaged)})"
                              if damaged else "") + ".")
        return complete[-1]
    for c in checkpoints:
        if c.step == step:
            if not c.complete:
                what = (f"is damaged ({c.problem})" if c.damaged else
                        "is incomplete (its save did not finish)")
                raise JobError(f"checkpoint step {step} in {where} {what}; choose another --step.")
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
