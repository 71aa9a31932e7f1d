"""Google's errors -> podctl's, at the one place they enter (see base/errors.py).

google-api-core raises one exception class per HTTP status; requests raises its
own for a connection that fails. Quota and rate limiting both arrive as 429: a
quota violation carries a QuotaFailure detail (or says "Quota"), and is final;
a bare rate limit passes, so it becomes a TransientError that callers retry.
A stockout is not an HTTP error at all but a failed operation with code 8.

Google's front end says why in a google.rpc.ErrorInfo detail, which api-core
exposes as `reason` and `metadata`: IAM_PERMISSION_DENIED names the permission
and the resource (an unknown project reads the same), SERVICE_DISABLED the
activation link, RATE_LIMIT_EXCEEDED the quota metric of a per-minute limit.
Each becomes one line that says what to run or whom to ask.
"""

from __future__ import annotations

import re
from typing import Any

import requests
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from podctl.base.errors import (
    AlreadyExistsError,
    ApiDisabledError,
    CloudError,
    ConfigError,
    InvalidValueError,
    NotFoundError,
    PermissionDeniedError,
    PodctlError,
    QuotaExceededError,
    SliceLostError,
    StockoutError,
    TransientError,
)

_URL_PREFIX = re.compile(r"^(GET|POST|PATCH|PUT|DELETE) \S+: ")
_RESOURCE_EXHAUSTED = 8
_ABORTED = 10
_QUOTA_HINT = "request more in the console (IAM & Admin > Quotas) or use a smaller slice"
_QUOTA_TEXT = re.compile(r"Quota limit '([^']+)' has been exceeded\. Limit: (\d+) in (region|zone) ([a-z0-9-]+)")
_PROJECT_IN = re.compile(r"projects/([^/\s']+)")


def _message(e: BaseException) -> str:
    return _URL_PREFIX.sub("", getattr(e, "message", None) or str(e)).strip()


def _is_quota(e: gexc.GoogleAPICallError) -> bool:
    """A quota that more waiting will not lift; Google words per-minute rate limits as
    "Quota exceeded for quota metric ... per minute", with reason RATE_LIMIT_EXCEEDED."""
    text = _message(e).lower()
    if getattr(e, "reason", None) == "RATE_LIMIT_EXCEEDED" or "per minute" in text:
        return False
    details = getattr(e, "details", None) or []
    if any(isinstance(d, dict) and d.get("@type", "").endswith("google.rpc.QuotaFailure")
           for d in details):
        return True
    return "quota" in text


def translate(e: BaseException, what: str) -> PodctlError:
    """A library error met while doing WHAT (e.g. "creating node x") -> a PodctlError."""
    if isinstance(e, PodctlError):
        return e
    if isinstance(e, (requests.ConnectionError, requests.Timeout)):
        return TransientError(f"cannot reach the Cloud TPU API while {what}: {e.__class__.__name__}")
    if isinstance(e, auth_exc.DefaultCredentialsError):
        return ConfigError("no Google Cloud credentials: run `gcloud auth application-default "
                           "login` or set GOOGLE_APPLICATION_CREDENTIALS (or use --backend fake).")
    if isinstance(e, auth_exc.GoogleAuthError):
        return ConfigError(f"Google Cloud credentials were refused while {what}: {e}. "
                           "Run `gcloud auth application-default login` again.")
    if not isinstance(e, gexc.GoogleAPICallError):
        return CloudError(f"unexpected error while {what}: {e}")
    text = _message(e)
    if isinstance(e, gexc.NotFound):
        return NotFoundError(f"not found while {what}: {text}")
    if isinstance(e, (gexc.Conflict, gexc.AlreadyExists)):
        return AlreadyExistsError(f"already exists ({what}): {text}")
    if isinstance(e, (gexc.PermissionDenied, gexc.Forbidden)):
        return _denied(e, what, text)
    if isinstance(e, (gexc.Unauthenticated, gexc.Unauthorized)):
        return ConfigError(f"not signed in to Google Cloud ({text}): run "
                           "`gcloud auth application-default login`.")
    if isinstance(e, (gexc.TooManyRequests, gexc.ResourceExhausted)):
        if _is_quota(e):
            return _quota(e, what, text)
        return TransientError(f"rate limited while {what}: {text}")
    if isinstance(e, (gexc.ServiceUnavailable, gexc.InternalServerError, gexc.GatewayTimeout,
                      gexc.DeadlineExceeded, gexc.BadGateway)):
        return TransientError(f"the Cloud TPU API failed for a moment while {what}: {text}")
    return CloudError(f"the Cloud TPU API refused {what}: {text}")


def translate_operation_error(e: BaseException, what: str, zone: str) -> PodctlError:
    """The error of a finished long-running operation (stockout is code 8)."""
    code = getattr(e, "grpc_status_code", None)
    number = getattr(code, "value", (None,))[0] if code is not None else None
    if isinstance(e, gexc.ResourceExhausted) or number == _RESOURCE_EXHAUSTED:
        if _is_quota(e):  # type: ignore[arg-type]
            return translate(e, what)
        return StockoutError(
            f"no TPU capacity in {zone} right now (stockout) while {what}. Try another zone "
            "(--zone), a queued resource that waits for capacity (--queued), or later.")
    if isinstance(e, gexc.Aborted) or number == _ABORTED:
        # e.g. a spot node preempted while it was being created. Aborted is a Conflict
        # to api_core, but nothing "already exists": the slice was lost on the way.
        return SliceLostError(f"the slice was lost while {what} ({_message(e)}); try again, "
                              "or ask through a queued resource (--queued).")
    return translate(e, what)


UPDATE_PERMISSION = "tpu.nodes.update"
METADATA_LIMITS = ("a key is 1 to 127 bytes of letters, digits, '-' and '_', a value at most "
                   "256 KiB, all keys and values together under 512 KB")


def translate_metadata_update(e: BaseException, what: str, node: str) -> PodctlError:
    """An error of a nodes.patch of NODE's metadata (the call's, or its finished operation's),
    met while doing WHAT -> a PodctlError in one line: 409 or ABORTED (another update of
    the node is in flight) stays an AlreadyExistsError, which node_metadata retries; 403 names
    tpu.nodes.update; 400 names the metadata limits, or says the node is not READY."""
    if not isinstance(e, gexc.GoogleAPICallError) or isinstance(e, (gexc.Conflict, gexc.AlreadyExists)):
        return translate(e, what)
    text = _message(e).rstrip(".")
    short = node.rsplit("/", 1)[-1]
    if isinstance(e, (gexc.PermissionDenied, gexc.Forbidden)):
        reason, _ = _error_info(e)
        if reason == "SERVICE_DISABLED":
            return translate(e, what)
        found = _PROJECT_IN.search(node)
        project = found.group(1) if found else "PROJECT"
        return PermissionDeniedError(
            f"permission {UPDATE_PERMISSION} denied on node {short} (project {project}), which "
            f"podctl needs to write the node's metadata: ask for a role that has it, e.g. `gcloud "
            f"projects add-iam-policy-binding {project} --member=user:YOU --role=roles/tpu.admin`.")
    if _status(e) == "FAILED_PRECONDITION":
        return CloudError(f"node {short} cannot be updated now ({text}): its metadata changes only "
                          "while it is READY.")
    if isinstance(e, gexc.BadRequest):
        return InvalidValueError(f"Cloud TPU refused the metadata of node {short} ({text}); the "
                                 f"limits: {METADATA_LIMITS}.")
    return translate(e, what)


def _status(e: gexc.GoogleAPICallError) -> str | None:
    """The google.rpc status name of E: from the HTTP answer's body when there is one (a 400
    is BadRequest to api-core whatever its status), else from the exception's class."""
    response = getattr(e, "response", None)
    if response is not None and hasattr(response, "json"):
        try:
            status = response.json().get("error", {}).get("status")
        except (ValueError, AttributeError):
            status = None
        if isinstance(status, str):
            return status
    code = getattr(e, "grpc_status_code", None)
    return getattr(code, "name", None) if code is not None else None


def _error_info(e: gexc.GoogleAPICallError) -> tuple[str | None, dict[str, Any]]:
    metadata = getattr(e, "metadata", None)
    return getattr(e, "reason", None), dict(metadata) if isinstance(metadata, dict) else {}


def _denied(e: gexc.GoogleAPICallError, what: str, text: str) -> PodctlError:
    reason, meta = _error_info(e)
    if reason == "SERVICE_DISABLED":
        # The consumer is the project's number; the id, when the request named it, reads better.
        named = _PROJECT_IN.search(what)
        project = named.group(1) if named else meta.get("consumer", "PROJECT").removeprefix("projects/")
        service = meta.get("service", "tpu.googleapis.com")
        url = meta.get("activationUrl") or f"https://console.cloud.google.com/apis/library/{service}"
        return ApiDisabledError(
            f"the Cloud TPU API ({service}) is not enabled in project {project}: run `gcloud "
            f"services enable {service} --project {project}` or enable it at {url}, wait a "
            "minute, and retry.")
    permission = meta.get("permission")
    resource = meta.get("resource") or ""
    found = _PROJECT_IN.search(resource or text)
    project = found.group(1) if found else "PROJECT"
    lacking = f"permission {permission}" if permission else "permission"
    return PermissionDeniedError(
        f"{lacking} denied on {resource or 'the resource'} while {what} (or project {project} "
        f"does not exist): ask for the TPU Admin role, `gcloud projects add-iam-policy-binding "
        f"{project} --member=user:YOU --role=roles/tpu.admin`, or check --project.")


def _quota(e: gexc.GoogleAPICallError, what: str, text: str) -> PodctlError:
    found = _QUOTA_TEXT.search(text)
    if found:
        name, limit, scope, where = found.groups()
        return QuotaExceededError(
            f"quota {name} exceeded while {what} (limit {limit} in {scope} {where}): request more "
            "at https://console.cloud.google.com/iam-admin/quotas (filter by that name) or use a "
            "smaller slice.")
    return QuotaExceededError(f"quota exceeded while {what}: {text.rstrip('.')}; {_QUOTA_HINT}.")
