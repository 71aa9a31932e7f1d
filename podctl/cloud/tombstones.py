"""A slice deleted by its owner stays deleted: `podctl down` (and the Python API's
`down`) leaves a small local record, a tombstone, that `run --recover` reads before it
makes a slice again. A preemption leaves none, so the two are told apart even when
the watcher never saw the slice's last state.

    STATE_DIR/deleted/PROJECT/ZONE/NAME.json   {"name", "created", "deleted"}

`created` is the slice's createTime, its identity: a later slice of the same name
(made by a later `up`) is a different slice, and its tombstone a different one.
Files are 0600, like every state file podctl writes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from podctl.cloud.types import SliceInfo

TOLERANCE = 1.0  # seconds: createTime read through two paths (node vs queued resource)


def _path(state_dir: Path, project: str, zone: str, name: str) -> Path:
    return Path(state_dir) / "deleted" / project / zone / f"{name}.json"


def write(state_dir: Path, info: SliceInfo) -> None:
    """Record that the owner deleted INFO (best effort: a delete never fails for it)."""
    path = _path(state_dir, info.project, info.zone, info.name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"name": info.name, "created": info.created, "deleted": time.time()}, f)
    except OSError:
        pass


def deleted_by_owner(state_dir: Path, info: SliceInfo) -> bool:
    """Did the owner delete this very slice (same name, same createTime)?"""
    try:
        data = json.loads(_path(state_dir, info.project, info.zone, info.name).read_text())
        return abs(float(data["created"]) - info.created) <= TOLERANCE
    except (OSError, ValueError, KeyError, TypeError):
        return False


def deleted_since(state_dir: Path, project: str, zone: str, name: str, since: float) -> bool:
    """Did the owner delete a slice named NAME at or after SINCE (one being made again,
    whose createTime this process never learnt)?"""
    try:
        data = json.loads(_path(state_dir, project, zone, name).read_text())
        return float(data["deleted"]) >= since
    except (OSError, ValueError, KeyError, TypeError):
        return False
