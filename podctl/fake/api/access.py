"""Who may call the fake Cloud TPU API: its projects, their permissions, the API switch,
and the error bodies Google's front end sends when it says no.

The fake knows a few projects (those the tests, the demo and the daemon use, and
any the admin API adds). As on Google Cloud:
- an unknown project, or one whose account lacks the call's permission, gets 403
  PERMISSION_DENIED "Permission 'tpu.nodes.create' denied on resource
  '//tpu.googleapis.com/projects/P/locations/Z' (or it may not exist)." with a
  google.rpc.ErrorInfo {reason IAM_PERMISSION_DENIED, domain iam.googleapis.com,
  metadata {permission, resource}} (the shape every Google API sends since 2023);
- a project with the API disabled gets 403 with ErrorInfo {reason SERVICE_DISABLED,
  domain googleapis.com, metadata {activationUrl, consumer, service, serviceTitle}};
- a rate limit is 429 with ErrorInfo {reason RATE_LIMIT_EXCEEDED, metadata
  {quota_metric, quota_limit, quota_limit_value, quota_location, consumer, service}}.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from podctl.fake.api.apierror import ApiError

SERVICE = "tpu.googleapis.com"
KNOWN_PROJECTS = ("fake-project", "test-project", "bench")
_PROJECT = re.compile(r"^projects/([^/:]+)")
# call name (tpu_api.ROUTES) -> the IAM permission Cloud TPU checks for it
_PERMISSION = {
    "locations.list": "tpu.locations.list", "locations.get": "tpu.locations.get",
    "generateServiceIdentity": "tpu.locations.generateServiceIdentity",
    "nodes.patch": "tpu.nodes.update", "nodes.getGuestAttributes": "tpu.nodes.get",
}


def project_number(project: str) -> str:
    """A stable 12-digit number for PROJECT (Google's consumer ids are numbers)."""
    return str(100_000_000_000 + zlib.crc32(project.encode()) % 899_999_999_999)


def permission(call: str) -> str:
    return _PERMISSION.get(call, f"tpu.{call}")


def denied(call: str, resource: str) -> ApiError:
    perm = permission(call)
    return ApiError(403, "PERMISSION_DENIED",
                    f"Permission '{perm}' denied on resource '//{SERVICE}/{resource}' (or it may "
                    "not exist).", [{
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "IAM_PERMISSION_DENIED", "domain": "iam.googleapis.com",
                        "metadata": {"permission": perm, "resource": resource}}])


def service_disabled(project: str) -> ApiError:
    number = project_number(project)
    url = f"https://console.developers.google.com/apis/api/{SERVICE}/overview?project={number}"
    return ApiError(403, "PERMISSION_DENIED", (
        f"Cloud TPU API has not been used in project {number} before or it is disabled. Enable it "
        f"by visiting {url} then retry. If you enabled this API recently, wait a few minutes for "
        "the action to propagate to our systems and retry."), [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED",
         "domain": "googleapis.com",
         "metadata": {"activationUrl": url, "consumer": f"projects/{number}", "service": SERVICE,
                      "serviceTitle": "Cloud TPU API", "containerInfo": number}},
        {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US",
         "message": f"Cloud TPU API has not been used in project {number} before or it is disabled."},
        {"@type": "type.googleapis.com/google.rpc.Help", "links": [
            {"description": "Google developers console API activation", "url": url}]},
    ])


def rate_limited(project: str) -> ApiError:
    number = project_number(project)
    return ApiError(429, "RESOURCE_EXHAUSTED", (
        "Quota exceeded for quota metric 'Default requests' and limit 'Default requests per "
        f"minute' of service '{SERVICE}' for consumer 'project_number:{number}'."), [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
         "domain": "googleapis.com",
         "metadata": {"quota_metric": f"{SERVICE}/default_requests",
                      "quota_limit": "DefaultRequestsPerMinutePerProject",
                      "quota_limit_value": "1200", "quota_location": "global",
                      "quota_unit": "1/min/{project}", "consumer": f"projects/{number}",
                      "service": SERVICE}},
        {"@type": "type.googleapis.com/google.rpc.Help", "links": [{
            "description": "Request a higher quota limit.",
            "url": "https://cloud.google.com/docs/quotas/help/request_increase"}]},
    ])


def exists(projects: dict[str, dict[str, Any]], own_project: str, project: str) -> bool:
    """Whether the fake has PROJECT: a known one, the daemon's own, or one the admin API
    added, unless the admin API made it not exist."""
    switches = projects.get(project, {})
    known = project in KNOWN_PROJECTS or project == own_project or bool(switches)
    return known and switches.get("exists", True)


def require_project(projects: dict[str, dict[str, Any]], own_project: str, project: str, permission: str) -> None:
    """A change to PROJECT's own settings (its metadata: Compute Engine's PERMISSION) refused
    as Google refuses a project that does not exist, with the projects the fake has."""
    if exists(projects, own_project, project):
        return
    have = sorted({*KNOWN_PROJECTS, own_project, *(p for p, s in projects.items() if s.get("exists", True))})
    raise ApiError(403, "PERMISSION_DENIED",
                   f"Permission '{permission}' denied on resource '//compute.googleapis.com/projects/"
                   f"{project}' (or it may not exist); the fake cloud's projects: {', '.join(have)}.")


def project_of(path: str) -> str | None:
    found = _PROJECT.match(path)
    return found.group(1) if found else None


def check(projects: dict[str, dict[str, Any]], own_project: str, call: str, path: str) -> None:
    """Refuse CALL on PATH (e.g. projects/p/locations/z/nodes/x) as Google would.

    PROJECTS holds the admin API's switches per project: {"exists": bool,
    "api_enabled": bool, "denied": [permission, ...]}."""
    project = project_of(path)
    if project is None:
        return
    resource = path.split(":", 1)[0]
    switches = projects.get(project, {})
    if not exists(projects, own_project, project):
        raise denied(call, resource)
    if not switches.get("api_enabled", True):
        raise service_disabled(project)
    if permission(call) in switches.get("denied", ()):
        raise denied(call, resource)
