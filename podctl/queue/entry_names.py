"""Deterministic names, so that a tick that died mid-step and the next one agree.

A slice is `q-TOKEN-ID-ATTEMPT` (TOKEN: six hex digits drawn once per queue
database, so two users' queues in one project, or a queue.db started afresh, never
take each other's slices for their own), labelled like every podctl slice plus the
queue token and entry id. A run id is that name, the entry's creation time and four
hex digits of a hash: the format `podctl runs` and runs.py accept.
"""

from __future__ import annotations

import hashlib
import time

from podctl.steps import ENTRY_LABEL, QUEUE_LABEL, owner, podctl_labels, validate_name


def slice_name(token: str, entry_id: int, attempt: int) -> str:
    return validate_name(f"q-{token}-{entry_id}-{attempt}")


def run_id(token: str, entry_id: int, attempt: int, created: float) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(created))
    digest = hashlib.sha256(f"{token}:{entry_id}:{attempt}".encode()).hexdigest()[:4]
    return f"{slice_name(token, entry_id, attempt)}-{stamp}-{digest}"


def labels(token: str, entry_id: int) -> dict[str, str]:
    return {**podctl_labels(owner()), QUEUE_LABEL: token, ENTRY_LABEL: str(entry_id)}


def is_ours(slice_labels: dict[str, str], token: str, entry_id: int) -> bool:
    return slice_labels.get(QUEUE_LABEL) == token and slice_labels.get(ENTRY_LABEL) == str(entry_id)
