"""Slice names, owners and the labels podctl puts on every slice it creates."""

from __future__ import annotations

import getpass
import re
import time

from podctl.cloud.types import SliceSpec
from podctl.errors import InvalidValueError

# Cloud TPU node ids: a lowercase letter, then letters, digits and hyphens, at most 63,
# not ending with a hyphen. A multislice NAME also names its nodes NAME-0, NAME-1, ...
_NODE_ID = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 63
# Set by `up` to a value unique to the call, so that it can tell its own slice from another's.
REQUEST_LABEL = "podctl-request"
# A queued run's slice: its queue's token and entry id (queue/names.py; gc reads them too).
QUEUE_LABEL = "podctl-queue"
ENTRY_LABEL = "podctl-queue-entry"


def validate_name(name: str, num_slices: int = 1) -> str:
    longest = MAX_NAME - (len(str(num_slices - 1)) + 1 if num_slices > 1 else 0)
    if not _NODE_ID.match(name) or len(name) > longest:
        raise InvalidValueError(
            f"{name!r} is not a valid slice name: use 1-{longest} lowercase letters, digits and "
            "hyphens, starting with a letter and not ending with a hyphen (e.g. my-run-v5p-64).")
    return name


def owner() -> str:
    """The local user, as a label value (lowercase letters, digits, _ and -)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        user = "unknown"
    cleaned = re.sub(r"[^a-z0-9_-]+", "-", user.lower()).strip("-")[:40]
    return cleaned or "unknown"


def default_name(spec: SliceSpec, user: str | None = None) -> str:
    """A stable name, so that `podctl up --slice v5p-16` twice reuses one slice."""
    base = re.sub(r"[^a-z0-9-]+", "-", (user or owner())).strip("-") or "user"
    if not base[0].isalpha():
        base = "u" + base
    name = f"{base}-{spec.slice_type.name}" + (f"-x{spec.num_slices}" if spec.num_slices > 1 else "")
    return name[:50].rstrip("-")


def podctl_labels(user: str | None = None, now: float | None = None) -> dict[str, str]:
    return {
        "podctl-managed": "true",
        "podctl-owner": user or owner(),
        "podctl-created": str(int(now if now is not None else time.time())),
    }
