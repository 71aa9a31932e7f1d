"""Slice names, owners and the labels podctl puts on every slice it creates."""

from __future__ import annotations

import getpass
import hashlib
import re
import time

from podctl.base.errors import InvalidValueError
from podctl.cloud.types import SliceSpec

# Cloud TPU node ids: a lowercase letter, then letters, digits and hyphens, at most 63,
# not ending with a hyphen. A multislice NAME also names its nodes NAME-0, NAME-1, ...
_NODE_ID = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 63
MAX_DEFAULT = 50  # a default name: room left for a multislice's node suffix and more
HASH_CHARS = 6  # of a user name's sha256, where the name had to change to fit
# Set by `up` to a value unique to the call, so that it can tell its own slice from another's.
REQUEST_LABEL = "podctl-request"
# A queued run's slice: its queue's token and entry id (queue/entry_names.py; gc reads them too).
QUEUE_LABEL = "podctl-queue"
ENTRY_LABEL = "podctl-queue-entry"
OWNER_LABEL = "podctl-owner"
# On each queued resource of an elastic slice (`up --elastic`: NAME-0 ... NAME-(K-1), one
# slice each): the slice's NAME, and K (cloud/describe.py puts them together again)
ELASTIC_OF_LABEL = "podctl-elastic-of"
ELASTIC_SLICES_LABEL = "podctl-elastic-slices"


def validate_name(name: str, num_slices: int = 1) -> str:
    longest = MAX_NAME - (len(str(num_slices - 1)) + 1 if num_slices > 1 else 0)
    if not _NODE_ID.match(name) or len(name) > longest:
        raise InvalidValueError(
            f"{name!r} is not a valid slice name: use 1-{longest} lowercase letters, digits and "
            "hyphens, starting with a letter and not ending with a hyphen (e.g. my-run-v5p-64).")
    return name


def login() -> str:
    """The local user's name, as the system has it."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return "unknown"


def _slug(user: str, unwanted: str, most: int, hashed: bool = False) -> str:
    """USER in the characters a name allows (UNWANTED: a class of the others), at most
    MOST long, unique to USER: a name that does not fit as it is ("John.Doe", "ünï")
    keeps a short stable hash of itself, so that no two users' names become one."""
    cleaned = re.sub(unwanted, "-", user.lower()).strip("-")
    if not hashed and cleaned == user and 0 < len(cleaned) <= most:
        return cleaned
    digest = hashlib.sha256(user.encode("utf-8", "surrogateescape")).hexdigest()[:HASH_CHARS]
    readable = cleaned[:most - HASH_CHARS - 1].strip("-")
    return f"{readable}-{digest}" if readable else digest


def owner(user: str | None = None) -> str:
    """The local user (or USER), as a label value unique to them (lowercase letters,
    digits, _ and -; John.Doe is john-doe-HASH, while john-doe stays john-doe)."""
    return _slug(login() if user is None else user, r"[^a-z0-9_-]+", 40)


def default_name(spec: SliceSpec, user: str | None = None) -> str:
    """A stable name unique to the user, so that `podctl up --slice v5p-16` twice
    reuses one slice and two users' never meet: NAME-TYPE, NAME the user's as it is
    when it fits a node id, else with a short hash of it (john-doe-v5p-8, and
    john-doe-1a2b3c-v5p-8 for John.Doe)."""
    suffix = f"-{spec.slice_type.name}" + (f"-x{spec.num_slices}" if spec.num_slices > 1 else "")
    raw = login() if user is None else user
    base = _slug(raw, r"[^a-z0-9-]+", MAX_DEFAULT - len(suffix) - 1)
    if not base[0].isalpha():  # a node id starts with a letter: "u", and the hash that
        # keeps "123" from becoming user u123's
        base = "u" + _slug(raw, r"[^a-z0-9-]+", MAX_DEFAULT - len(suffix) - 2, hashed=True)
    return base + suffix


def podctl_labels(user: str | None = None, now: float | None = None) -> dict[str, str]:
    return {
        "podctl-managed": "true",
        OWNER_LABEL: user or owner(),
        "podctl-created": str(int(now if now is not None else time.time())),
    }
