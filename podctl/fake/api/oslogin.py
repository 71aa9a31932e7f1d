"""The fake's OS Login: the project switch, the OS Login API, and who a host lets in.

On Google Cloud, project metadata `enable-oslogin=TRUE` (overridden by a VM's own
`enable-oslogin` metadata) makes the guest ignore `ssh-keys` metadata: a user logs in
as the POSIX username of their OS Login profile, with a key they imported into that
profile (`users/{email}:importSshPublicKey`). The fake keeps the project's metadata and
the profiles in the World (`project_metadata`, `login_profiles`) and serves:

    POST /v1/users/EMAIL:importSshPublicKey?projectId=P   {key, expirationTimeUsec?}
    GET  /v1/users/EMAIL/loginProfile?projectId=P

Every caller of the fake is its one user, FAKE_ACCOUNT (the fake takes no tokens): a
profile of anyone else is 403, as Google answers a caller who asks for another's.
Shapes: oslogin.v1's discovery document (google-api-python-client) and gcloud's
`os-login describe-profile` output as users have posted it; see fake/README.md.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import urllib.parse
import zlib
from typing import Any

from aiohttp import web

from podctl.fake.api import wire
from podctl.fake.world import World

FAKE_ACCOUNT = "fake-user@example.com"  # who calls the fake (podctl.base.settings.FAKE_ACCOUNT too)
_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521))\s+([A-Za-z0-9+/=]+)(\s.*)?$")


def posix_username(email: str) -> str:
    """The profile's default POSIX username: a service account is `sa_` and its unique id;
    anyone else their email with every character but letters and digits made `_`,
    lowercased (gcloud's `describe-profile` shows `jane_doe_example_com`)."""
    if email.endswith(".gserviceaccount.com"):
        return f"sa_{_number(email, 10**20)}"  # the fake's guess of a unique id: stable, 21 digits
    return re.sub(r"[^a-z0-9]", "_", email.lower())


def home_directory(user: str) -> str:
    """The profile's `homeDirectory` for POSIX USER, which the hosts give USER too
    (hosts.Host.home_of): /home/USER, as on a TPU VM's Ubuntu."""
    return f"/home/{user}"


def _number(text: str, base: int) -> int:
    return base + zlib.crc32(text.encode()) % base


def enabled(world: World, project: str, node_metadata: dict[str, Any] | None) -> bool:
    """OS Login for a VM of PROJECT: its own `enable-oslogin` if it has one, else the
    project's (values are read case-insensitively, as the guest agent reads them)."""
    value = (node_metadata or {}).get("enable-oslogin")
    if value is None:
        value = world.project_metadata.get(project, {}).get("enable-oslogin")
    return str(value or "").strip().upper() == "TRUE"


def set_enabled(world: World, project: str, on: bool) -> dict[str, Any]:
    """The os-login fault: project metadata enable-oslogin=TRUE, or the key removed."""
    items = world.project_metadata.setdefault(project, {})
    if on:
        items["enable-oslogin"] = "TRUE"
    else:
        items.pop("enable-oslogin", None)
    return {"project": project, "enable-oslogin": items.get("enable-oslogin", "")}


def login_keys(world: World) -> list[tuple[str, str]]:
    """(POSIX username, "TYPE BASE64") of every unexpired key of every profile."""
    now_usec = int(world.now() * 1e6)
    out = []
    for email, profile in world.login_profiles.items():
        for entry in profile.get("keys", {}).values():
            expires = int(entry.get("expirationTimeUsec") or 0)
            if not expires or expires > now_usec:
                out.append((posix_username(email), entry["key"]))
    return out


def _error(code: int, status: str, message: str) -> web.Response:
    return web.json_response(wire.error_body(code, status, message), status=code)


def _fingerprint(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()  # 64 hex digits, as Google's; over what is the fake's guess


def _profile(world: World, email: str, project: str | None) -> dict[str, Any]:
    user = posix_username(email)
    number = str(_number(email, 10**9))  # the fake's guess of how uid/gid are chosen
    keys = {fp: {"key": e["key"] + (f" {e['comment']}" if e.get("comment") else ""), "fingerprint": fp,
                 "name": f"users/{email}/sshPublicKeys/{fp}",
                 **({"expirationTimeUsec": e["expirationTimeUsec"]} if e.get("expirationTimeUsec") else {})}
            for fp, e in world.login_profiles.get(email, {}).get("keys", {}).items()}
    profile: dict[str, Any] = {"name": email, "sshPublicKeys": keys}
    if project:
        profile["posixAccounts"] = [{
            "primary": True, "username": user, "uid": number, "gid": number,
            "homeDirectory": home_directory(user), "operatingSystemType": "LINUX", "accountId": project,
            "name": f"users/{email}/projects/{project}"}]
    return profile


def answer(world: World, method: str, tail: str, query: Any, body: dict[str, Any]) -> web.Response:
    """One OS Login API call at /v1/TAIL."""
    found = re.fullmatch(r"users/([^/:]+)(:importSshPublicKey|/loginProfile)", tail)
    if not found:
        return _error(404, "NOT_FOUND", f"Method not found: v1/{tail}")
    email, call = urllib.parse.unquote(found.group(1)), found.group(2)
    if (method, call) not in {("POST", ":importSshPublicKey"), ("GET", "/loginProfile")}:
        return _error(405, "METHOD_NOT_ALLOWED", f"{method} is not allowed on v1/{tail}")
    if email != FAKE_ACCOUNT:
        return _error(403, "PERMISSION_DENIED", "The caller does not have permission")
    project = query.get("projectId") or None
    if call == "/loginProfile":
        return web.json_response(_profile(world, email, project))
    key = _KEY.match(str(body.get("key") or "").strip())
    try:
        blob = base64.b64decode(key.group(3), validate=True) if key else b""
    except binascii.Error:
        blob = b""
    if not blob:
        return _error(400, "INVALID_ARGUMENT", "Invalid key format.")
    expires = str(body.get("expirationTimeUsec") or "")
    if expires and not expires.isdigit():
        return _error(400, "INVALID_ARGUMENT", f"Invalid value at 'ssh_public_key.expiration_time_usec' "
                      f"(TYPE_INT64), \"{expires}\"")
    assert key is not None
    keys = world.login_profiles.setdefault(email, {}).setdefault("keys", {})
    keys[_fingerprint(blob)] = {"key": f"{key.group(1)} {key.group(3)}",
                                "comment": (key.group(4) or "").strip(), "expirationTimeUsec": expires}
    return web.json_response({"loginProfile": _profile(world, email, project)})
