"""OS Login: who podctl logs in as on a slice's hosts, as gcloud decides it.

With OS Login on (project metadata `enable-oslogin=TRUE`, which a node's own
`enable-oslogin` metadata overrides), a TPU VM ignores the `ssh-keys` metadata podctl
puts on every node: a user logs in as the POSIX username of their OS Login profile with
a key imported into it (`users/{email}:importSshPublicKey`). So before opening SSH,
podctl reads the project's metadata (Compute Engine `projects.get`) and, when OS Login
is on, imports its key for a day (re-imported at every connection, so a key never
outlives its use by long) and connects as the username the profile names; when it is
off, as podctl with the metadata key, as before. A project whose metadata cannot be
read counts as off unless the node says on: the refusal that follows names OS Login.

Not judged: the org policy `compute.requireOsLogin` (it shows in no metadata: a host
that refuses podctl's metadata key gets the same one-line hint), 2-step verification
(`enable-oslogin-2fa`), and OS Login's per-VM IAM check (roles/compute.osLogin), which
only the host applies.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from podctl.base.errors import CloudError, ConfigError, PermissionDeniedError, TransientError
from podctl.cloud.types import SliceInfo

GOOGLE_OSLOGIN = "https://oslogin.googleapis.com"
GOOGLE_COMPUTE = "https://compute.googleapis.com"
KEY_TTL_SECONDS = 24 * 3600
_TIMEOUT = 30.0


def switched_on(value: str | None) -> bool:
    return str(value or "").strip().upper() == "TRUE"


def enabled(project_items: dict[str, str], node_values: Iterable[str | None]) -> bool:
    """On for a slice: on for any of its nodes, each by its own `enable-oslogin` where it
    sets one, else by the project's (a node that sets none follows the project, whatever
    its sibling slices set). Case-insensitive, as the guest agent reads it."""
    project = project_items.get("enable-oslogin")
    values = list(node_values) or [None]
    return any(switched_on(project if v is None else v) for v in values)


@dataclass(frozen=True)
class OsLogin:
    """The two APIs OS Login needs, for ACCOUNT (None: unknown until it is needed):
    Compute Engine at COMPUTE (project metadata) and OS Login at OSLOGIN, with
    CREDENTIALS (None: anonymous, the fake's)."""

    compute: str
    oslogin: str
    account: str | None
    credentials: Any = None

    def _session(self) -> Any:
        import requests
        from google.auth.transport.requests import AuthorizedSession

        return AuthorizedSession(self.credentials) if self.credentials is not None else requests.Session()

    def _call(self, method: str, url: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
        import requests

        session = self._session()
        try:
            response = session.request(method, url, timeout=_TIMEOUT, **kwargs)
        except requests.RequestException as e:
            raise TransientError(f"cannot reach {url.split('/v1')[0]} ({e.__class__.__name__}); "
                                 "try again") from e
        finally:
            session.close()
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body if isinstance(body, dict) else {}

    def project_metadata(self, project: str) -> dict[str, str]:
        """The project's commonInstanceMetadata items; {} when they cannot be read (no
        compute.projects.get, the API off or out of reach): podctl goes on as before."""
        try:
            status, body = self._call("GET", f"{self.compute}/compute/v1/projects/{project}")
        except TransientError:
            return {}
        if status != 200:
            return {}
        items = (body.get("commonInstanceMetadata") or {}).get("items") or []
        return {str(i.get("key")): str(i.get("value", "")) for i in items if isinstance(i, dict)}

    def import_key(self, project: str, public_key: str, ttl: float = KEY_TTL_SECONDS) -> str:
        """PUBLIC_KEY into the account's profile until TTL seconds from now -> the POSIX
        username to log in as on PROJECT's VMs."""
        if not self.account:
            raise ConfigError(f"project {project} uses OS Login and podctl cannot tell which "
                              "account you are: run `gcloud config set account EMAIL` or set "
                              "CLOUDSDK_CORE_ACCOUNT.")
        user = urllib.parse.quote(self.account, safe="@")
        status, body = self._call(
            "POST", f"{self.oslogin}/v1/users/{user}:importSshPublicKey", params={"projectId": project},
            json={"key": public_key, "expirationTimeUsec": str(int((time.time() + ttl) * 1e6))})
        message = str((body.get("error") or {}).get("message") or f"HTTP {status}")
        if status == 403:
            raise PermissionDeniedError(
                f"project {project} uses OS Login (enable-oslogin=TRUE) and the OS Login API refused "
                f"to import podctl's SSH key for {self.account} ({message}); grant it OS Login: "
                f"gcloud projects add-iam-policy-binding {project} --member={_member(self.account)} "
                "--role=roles/compute.osAdminLogin")
        if status in (429, 500, 502, 503, 504):
            raise TransientError(f"the OS Login API is unavailable ({message}); try again")
        if status != 200:
            raise CloudError(f"the OS Login API would not import podctl's SSH key for "
                             f"{self.account} ({message})")
        return _username(body, project, self.account)


def _member(account: str) -> str:
    kind = "serviceAccount" if account.endswith(".gserviceaccount.com") else "user"
    return f"{kind}:{account}"


def _username(body: dict[str, Any], project: str, account: str) -> str:
    accounts = (body.get("loginProfile") or {}).get("posixAccounts") or []
    chosen = ([a for a in accounts if a.get("accountId") == project]
              or [a for a in accounts if a.get("primary")] or accounts)
    name = str((chosen[0] if chosen else {}).get("username") or "")
    if not name:
        raise CloudError(f"OS Login gave {account} no POSIX account for project {project}; "
                         "`gcloud compute os-login describe-profile` shows the profile")
    return name


async def login_user(client: OsLogin, info: SliceInfo, public_key: str) -> str | None:
    """The POSIX username to log in to INFO's hosts with PUBLIC_KEY (imported now), or
    None when OS Login is off for them (podctl's own user and metadata key then)."""
    items = await asyncio.to_thread(client.project_metadata, info.project)
    if not enabled(items, (n.os_login for n in info.nodes)):
        return None
    off = [n.name for n in info.nodes if not enabled(items, [n.os_login])]
    if off:  # one login for the fleet: hosts of these nodes would take only the ssh-keys one
        on = [n.name for n in info.nodes if n.name not in off]
        raise ConfigError(
            f"slice {info.name} mixes OS Login on ({', '.join(on)}) and off ({', '.join(off)}: "
            "their own enable-oslogin metadata) and podctl logs in to all its hosts as one user: "
            "make the nodes' enable-oslogin agree (or remove it, so that the project's holds).")
    return await asyncio.to_thread(client.import_key, info.project, public_key)
