"""The GCS emulator's front door: a bearer token on every request, its scopes and its
account's rights on the bucket checked as GCS checks them (iam.py holds who is who;
podctl/fake/README.md the sources of the answers' shapes).

- no token, or one nobody minted: 401, reason `required` (none) or `authError`
  ("Invalid Credentials");
- a token whose scopes do not cover the call: 403 "Provided scope(s) are not
  authorized" (reason `forbidden`);
- an account without the call's permission on the bucket: 403 "EMAIL does not have
  storage.objects.create access to the Google Cloud Storage object. Permission
  'storage.objects.create' denied on resource (or it may not exist)." (reason
  `forbidden`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from podctl.fake.storage import iam
from podctl.fake.storage.gcs_strict import error_body

_API = r"(?:/storage/v1)?"
_B = r"(?P<bucket>[-.\w]+)"
# (method, path pattern) -> the permission GCS checks; first match wins
_RULES: list[tuple[str, re.Pattern[str], str]] = [
    (m, re.compile(p), perm) for m, p, perm in [
        ("POST", rf"^{_API}/b/[-.\w]+/o/.+/(?:copyTo|rewriteTo)/b/{_B}/o/.+$", "storage.objects.create"),
        ("POST", rf"^{_API}/b/{_B}/o/.+/compose$", "storage.objects.create"),
        ("POST", rf"^/upload/storage/v1/b/{_B}/o$", "storage.objects.create"),
        ("PUT", rf"^/upload/storage/v1/b/{_B}/o$", "storage.objects.create"),
        ("GET", rf"^/download/storage/v1/b/{_B}/o/.+$", "storage.objects.get"),
        ("GET", rf"^{_API}/b/{_B}/o$", "storage.objects.list"),
        ("GET", rf"^{_API}/b/{_B}/o/.+$", "storage.objects.get"),
        ("DELETE", rf"^{_API}/b/{_B}/o/.+$", "storage.objects.delete"),
        ("PATCH", rf"^{_API}/b/{_B}/o/.+$", "storage.objects.update"),
        ("GET", rf"^{_API}/b/{_B}(?:/iam(?:/testPermissions)?)?$", "storage.buckets.get"),
        ("PATCH", rf"^{_API}/b/{_B}$", "storage.buckets.update"),
        ("PUT", rf"^{_API}/b/{_B}/iam$", "storage.buckets.update"),
        ("DELETE", rf"^{_API}/b/{_B}$", "storage.buckets.delete"),
        ("GET", rf"^{_API}/b$", "storage.buckets.list"),
        ("POST", rf"^{_API}/b$", "storage.buckets.create"),
        ("GET", rf"^/{_B}/.+$", "storage.objects.get"),  # the XML API's public path
        ("PUT", rf"^/{_B}/.+$", "storage.objects.create"),
    ]
]
_READS = {"storage.objects.get", "storage.objects.list", "storage.buckets.get", "storage.buckets.list"}
_NO_SCOPE = "Provided scope(s) are not authorized"


def permission_for(method: str, path: str) -> tuple[str | None, str]:
    """(bucket or None, the permission) for a request; an unknown one (a batch) needs
    write rights on no bucket in particular: the fake's guess."""
    for rule_method, pattern, perm in _RULES:
        found = pattern.match(path) if rule_method == method else None
        if found:
            bucket = found.groupdict().get("bucket")
            return (unquote(bucket) if bucket else None), perm
    return None, "storage.objects.create"


def _what(permission: str) -> str:
    return "bucket" if permission.startswith("storage.buckets.") else "object"


def refusal(headers: Any, method: str, raw_path: str, tokens: iam.Tokens,
            policy: dict[str, Any]) -> tuple[int, bytes] | None:
    """The 401 or 403 GCS would answer this request with, or None to let it through."""
    bucket, perm = permission_for(method, urlsplit(raw_path).path)
    denied = (f"does not have {perm} access to the Google Cloud Storage {_what(perm)}. "
              f"Permission '{perm}' denied on resource (or it may not exist).")
    auth = str(headers.get("Authorization") or "")
    if not auth.lower().startswith("bearer ") or not auth[7:].strip():
        return 401, error_body(401, f"Anonymous caller {denied}", "required")
    who = tokens.identity(auth[7:].strip())
    if who is None:
        return 401, error_body(401, "Invalid Credentials", "authError")
    if not iam.scoped(who, write=perm not in _READS):
        return 403, error_body(403, _NO_SCOPE, "forbidden")
    if bucket is not None and not iam.grants(policy, who, bucket, perm):
        return 403, error_body(403, f"{who.email} {denied}", "forbidden")
    return None


def auth_handler(base: type, tokens: iam.Tokens, policy: Callable[[], dict[str, Any]]) -> type:
    """The emulator's handler behind GCS's front door. POLICY gives the project's IAM
    now (the world's, which the admin API may change)."""

    class AuthHandler(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        def _refused(self, method: str) -> bool:
            answer = refusal(self.headers, method, self.path, tokens, policy())
            if answer is None:
                return False
            # Read the body first: closing a socket with unread bytes resets it, and the
            # client would see a dropped connection rather than the answer.
            length = int(self.headers.get("Content-Length") or 0)
            if length > 0:
                self.rfile.read(length)
            status, body = answer
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(body)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="https://accounts.google.com/"')
            self.end_headers()
            self.wfile.write(body)
            return True

    def guarded(method: str) -> Callable[[Any], None]:
        def handle(self: Any) -> None:
            if not self._refused(method):
                getattr(base, f"do_{method}")(self)
        return handle

    for verb in ("GET", "POST", "PUT", "DELETE", "PATCH"):
        setattr(AuthHandler, f"do_{verb}", guarded(verb))
    return AuthHandler
