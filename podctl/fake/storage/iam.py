"""Who may use the fake GCS: access tokens, the scopes and account each carries, and the
project's IAM bindings on buckets (podctl/fake/README.md has the sources).

As on Google Cloud:
- every GCS request carries `Authorization: Bearer TOKEN`; none, or one nobody minted,
  is 401;
- a host's token is minted by its metadata server for the node's service account with
  the node's scopes; a scope list without storage (cloud-platform, devstorage.*) is 403
  "Provided scope(s) are not authorized" whatever the roles;
- the account needs a role that holds the call's permission, on the bucket or on the
  project; the default compute account holds roles/editor on its project only where
  the project was set up as older organisations' are (the fake's default: `podctl demo`
  needs it); a secure-by-default project (`podctl fake start --secure`, the admin API's
  `iam {secure: true}`) grants it nothing;
- the user's own token (the laptop's, USER_TOKEN: the fake has no OAuth server to mint
  one) is the project's owner.

The bindings live in the world (they survive the daemon's restart); the tokens do not,
as Google's outlive no restart of ours: clients refresh on 401 (google-auth and podctl's
agent do).
"""

from __future__ import annotations

import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from podctl.base.settings import FAKE_ACCOUNT, FAKE_USER_TOKEN

USER_TOKEN = FAKE_USER_TOKEN
USER = f"user:{FAKE_ACCOUNT}"  # the fake's one user (oslogin.py too), its projects' owner
SCOPE_PREFIX = "https://www.googleapis.com/auth/"
_EMAIL = re.compile(r"^[^@\s:]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")  # NAME@DOMAIN.TLD
_READ_SCOPES = frozenset(SCOPE_PREFIX + s for s in (
    "cloud-platform", "cloud-platform.read-only", "devstorage.read_only",
    "devstorage.read_write", "devstorage.full_control"))
_WRITE_SCOPES = frozenset(SCOPE_PREFIX + s for s in (
    "cloud-platform", "devstorage.read_write", "devstorage.full_control"))
_OBJECT_RW = frozenset({"storage.objects.get", "storage.objects.list", "storage.objects.create",
                        "storage.objects.delete", "storage.objects.update"})
_BUCKET_ALL = frozenset({"storage.buckets.get", "storage.buckets.list", "storage.buckets.create",
                         "storage.buckets.update", "storage.buckets.delete"})
# role -> the storage permissions it holds (IAM's predefined roles, storage's part)
ROLES: dict[str, frozenset[str]] = {
    "roles/owner": _OBJECT_RW | _BUCKET_ALL,
    "roles/editor": _OBJECT_RW | _BUCKET_ALL,
    "roles/storage.admin": _OBJECT_RW | _BUCKET_ALL,
    "roles/storage.objectAdmin": _OBJECT_RW,
    "roles/storage.objectUser": _OBJECT_RW,
    "roles/storage.objectViewer": frozenset({"storage.objects.get", "storage.objects.list"}),
    "roles/storage.objectCreator": frozenset({"storage.objects.create"}),
    # the bucket's metadata (storage.buckets.get), which the object roles lack and which
    # tensorstore reads when orbax saves a checkpoint (keras-team/kinetic#251: objectAdmin
    # alone makes orbax's save fail with 403 on Google)
    "roles/storage.legacyBucketReader": frozenset({"storage.buckets.get", "storage.objects.list"}),
    "roles/storage.legacyBucketWriter": frozenset({"storage.buckets.get", "storage.objects.list",
                                                   "storage.objects.create", "storage.objects.delete"}),
}


@dataclass(frozen=True)
class Identity:
    member: str  # IAM's member: "serviceAccount:EMAIL" or "user:EMAIL"
    scopes: tuple[str, ...]

    @property
    def email(self) -> str:
        return self.member.partition(":")[2]


def default_account(project_number: str) -> str:
    return f"{project_number}-compute@developer.gserviceaccount.com"


def is_default_account(email: str) -> bool:
    return email.endswith("-compute@developer.gserviceaccount.com")


def initial(secure: bool) -> dict[str, Any]:
    """A project's IAM as the fake starts it: {"secure": bool, "buckets": {bucket: {role:
    [member, ...]}}}. Not secure: the default compute accounts hold roles/editor."""
    return {"secure": bool(secure), "buckets": {}}


class Tokens:
    """Access tokens -> the identity each was minted for. The metadata servers mint (the
    fake's event loop), the GCS emulator reads (its own thread): one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_token: dict[str, Identity] = {USER_TOKEN: Identity(USER, (SCOPE_PREFIX + "cloud-platform",))}

    def mint(self, email: str, scopes: list[str] | tuple[str, ...]) -> str:
        token = "ya29.fake-" + secrets.token_urlsafe(24)
        with self._lock:
            self._by_token[token] = Identity(f"serviceAccount:{email}", tuple(scopes))
        return token

    def identity(self, token: str) -> Identity | None:
        with self._lock:
            return self._by_token.get(token)


def grants(policy: dict[str, Any], who: Identity, bucket: str, permission: str) -> bool:
    """Whether WHO holds PERMISSION on BUCKET under POLICY (initial()'s shape)."""
    if who.member == USER:
        return True  # the project's owner
    roles = [role for role, members in (policy.get("buckets", {}).get(bucket) or {}).items()
             if who.member in members]
    if not policy.get("secure") and is_default_account(who.email):
        roles.append("roles/editor")  # older organisations' automatic grant
    return any(permission in ROLES.get(role, ()) for role in roles)


def scoped(who: Identity, write: bool) -> bool:
    """Whether WHO's scopes let it read (or, with WRITE, write) GCS."""
    return bool(set(who.scopes) & (_WRITE_SCOPES if write else _READ_SCOPES))


def bind(policy: dict[str, Any], bucket: str, member: str, role: str, *, remove: bool = False) -> None:
    """Add (or REMOVE) MEMBER's ROLE on BUCKET, as `gcloud storage buckets
    add-iam-policy-binding` (remove-) does."""
    if role not in ROLES:
        raise ValueError(f"the fake knows the roles {sorted(ROLES)}, not {role!r}")
    kind, _, email = member.partition(":")
    if kind not in ("serviceAccount", "user", "group") or not _EMAIL.match(email):
        # IAM's 400 INVALID_ARGUMENT for a member it cannot parse, with what to pass
        raise ValueError(f"Invalid member: {member!r}; a member is user:EMAIL, serviceAccount:EMAIL "
                         "or group:EMAIL (e.g. user:bob@example.com).")
    members = policy.setdefault("buckets", {}).setdefault(bucket, {}).setdefault(role, [])
    if remove and member in members:
        members.remove(member)
    elif not remove and member not in members:
        members.append(member)
