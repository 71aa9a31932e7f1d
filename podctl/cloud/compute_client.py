"""ComputeApi: the narrow async face of google-cloud-compute's clients (REST transport) for
TPU VMs: instance templates, workload policies, managed instance groups, their instances
and guest attributes, and the zone, region and global operations of each change.

As TpuApi (tpu_client.py) does for Cloud TPU: every call runs the blocking client in a
worker thread, is counted, is retried with capped backoff when its error can pass (the
library's own retries are off: `retry=None`), and has its errors translated to podctl's.
Only cloud/ names this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import compute_v1

from podctl.base.errors import PodctlError, TransientError
from podctl.base.retry import RetryPolicy
from podctl.cloud.tpu_client import clock_offset
from podctl.cloud.translate import translate

T = TypeVar("T")
CALL_TIMEOUT = 60.0


def _where(scope: str) -> dict[str, str]:
    """'zones/Z' | 'regions/R' | 'global' -> the operations client's keyword."""
    kind, _, value = scope.partition("/")
    return {"zones": {"zone": value}, "regions": {"region": value}}.get(kind, {})


class ComputeApi:
    def __init__(self, endpoint: str, credentials: Credentials | None = None,
                 retry: RetryPolicy = RetryPolicy()):
        self.endpoint = endpoint
        self.retry = retry
        self.calls: Counter[str] = Counter()
        self._clock_offset: float | None = None
        options = ClientOptions(api_endpoint=endpoint)
        creds = credentials or AnonymousCredentials()
        self.templates = compute_v1.InstanceTemplatesClient(transport="rest", credentials=creds,
                                                            client_options=options)
        self.policies = compute_v1.ResourcePoliciesClient(transport="rest", credentials=creds,
                                                          client_options=options)
        self.migs = compute_v1.InstanceGroupManagersClient(transport="rest", credentials=creds,
                                                           client_options=options)
        self.resize_requests = compute_v1.InstanceGroupManagerResizeRequestsClient(
            transport="rest", credentials=creds, client_options=options)
        self.instances = compute_v1.InstancesClient(transport="rest", credentials=creds, client_options=options)
        self.zone_ops = compute_v1.ZoneOperationsClient(transport="rest", credentials=creds,
                                                        client_options=options)
        self.region_ops = compute_v1.RegionOperationsClient(transport="rest", credentials=creds,
                                                            client_options=options)
        self.global_ops = compute_v1.GlobalOperationsClient(transport="rest", credentials=creds,
                                                            client_options=options)
        for client in self._clients():
            session = getattr(client.transport, "_session", None)
            if session is not None and hasattr(session, "hooks"):
                session.hooks.setdefault("response", []).append(self._saw_date)

    def _clients(self) -> tuple[Any, ...]:
        return (self.templates, self.policies, self.migs, self.resize_requests, self.instances, self.zone_ops,
                self.region_ops, self.global_ops)

    def _saw_date(self, response: Any, *args: Any, **kwargs: Any) -> None:
        offset = clock_offset(response.headers.get("Date"), time.time())
        if offset is not None:
            self._clock_offset = offset

    def server_now(self) -> float:
        return time.time() + (self._clock_offset or 0.0)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def close(self) -> None:
        for client in self._clients():
            client.transport.close()

    async def call(self, method: str, what: str, fn: Callable[..., T], /, *, mutates: bool = False,
                   **kwargs: Any) -> T:
        """FN(**KWARGS) in a thread, counted as METHOD, retried while transient, its errors
        translated ("while WHAT"). A create or delete that was sent is seen through when
        the caller is cancelled, so that its undo finds the world as the call left it."""
        async def once() -> T:
            self.calls[method] += 1
            running = asyncio.ensure_future(asyncio.to_thread(fn, retry=None, **kwargs))
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                if mutates:
                    with contextlib.suppress(Exception):
                        await running
                raise
            except Exception as e:  # translated; nothing else escapes
                raise compute_words(translate(e, what), e, what) from e

        return await self.retry.retrying(TransientError, asyncio.sleep)(once)

    async def operation(self, project: str, scope: str, name: str) -> compute_v1.Operation:
        """The operation NAME in SCOPE ('zones/Z', 'regions/R' or 'global')."""
        kind = scope.split("/")[0]
        where = _where(scope)
        fn: Callable[..., compute_v1.Operation] = (
            self.zone_ops.get if kind == "zones" else self.region_ops.get if kind == "regions"
            else self.global_ops.get)
        args: dict[str, Any] = {"project": project, "operation": name, **where}
        result: compute_v1.Operation = await self.call(f"{kind}Operations.get", f"reading operation {name}",
                                                       fn, **args)
        return result

    async def until_done(self, project: str, scope: str, op: compute_v1.Operation, what: str,
                         timeout: float = 300.0) -> compute_v1.Operation:
        """Poll OP until DONE; its error (Compute Engine's errors[] of an operation) raised
        translated, as a failed call's would be."""
        deadline = time.monotonic() + timeout
        delay = 0.2
        while op.status != compute_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise TransientError(f"{what} was still running after {timeout:g} s")
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 5.0)
            op = await self.operation(project, scope, op.name)
        errors = list(op.error.errors) if op.error else []
        if errors:
            raise operation_error(errors, what, _where(scope).get("zone", ""))
        return op


# Compute Engine's 403 names what is missing: "Required 'compute.instanceGroupManagers.create'
# permission for 'projects/P/zones/Z/instanceGroupManagers/M'" (its usual wording).
_REQUIRED = re.compile(r"Required '([a-zA-Z.]+)' permission for '(?:projects/)?([^/']+)")
COMPUTE_ROLE = "roles/compute.instanceAdmin.v1"


def compute_words(error: PodctlError, cause: BaseException, what: str) -> PodctlError:
    """translate()'s error, worded for Compute Engine where translate() speaks of Cloud TPU:
    a denied call names the permission and the Compute Instance Admin role, a disabled
    service compute.googleapis.com."""
    from podctl.base.errors import ApiDisabledError, PermissionDeniedError

    text = str(getattr(cause, "message", "") or cause)
    if isinstance(error, ApiDisabledError):
        return ApiDisabledError("the Compute Engine API (compute.googleapis.com) is not enabled in the "
                                "project: run `gcloud services enable compute.googleapis.com`, wait a "
                                "minute, and retry.")
    if isinstance(error, PermissionDeniedError):
        found = _REQUIRED.search(text)
        permission, project = (found.group(1), found.group(2)) if found else ("permission", "PROJECT")
        return PermissionDeniedError(
            f"{permission} denied while {what} (or project {project} does not exist): ask for the "
            f"Compute Instance Admin role, `gcloud projects add-iam-policy-binding {project} "
            f"--member=user:YOU --role={COMPUTE_ROLE}`, or check --project.")
    return error


STOCKOUT_CODES = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
# Compute Engine's quota words, in an operation's or a managed instance's error: "Quota
# 'N2_CPUS' exceeded.  Limit: 8.0 in region northamerica-northeast1." (quoted whole in
# GoogleCloudPlatform/pubsec-declarative-toolkit#625; mesosphere-backup/terraform-dcos#61)
_QUOTA_WORDS = re.compile(r"Quota '([^']+)' exceeded\.\s+Limit: ([0-9.]+) (?:in (region|zone) ([a-z0-9-]+)|globally)")


def operation_error(errors: list[Any], what: str, zone: str = "") -> PodctlError:
    """Compute Engine's errors[] ({code, message}: a finished operation's, or what a MIG's
    last attempt at its VMs met) -> podctl's error in one line, with what to do: a stockout
    the same StockoutError as the Cloud TPU API's, a quota the same QuotaExceededError."""
    from podctl.base.errors import CloudError, QuotaExceededError, StockoutError

    text = "; ".join(dict.fromkeys(f"{e.code}: {e.message}" for e in errors))
    codes = {e.code for e in errors}
    if codes & set(STOCKOUT_CODES):
        where = f" in {zone}" if zone else ""
        return StockoutError(f"no TPU capacity{where} right now (stockout) while {what} ({text}). Try "
                             "another zone (--zone), flex-start that waits for capacity (--queued), "
                             "or later.")
    if any(c.startswith("QUOTA") for c in codes):
        found = next((m for m in (_QUOTA_WORDS.search(str(e.message)) for e in errors) if m), None)
        if found:
            name, limit, scope, where = found.groups()
            at = f"in {scope} {where}" if scope else "globally"
            return QuotaExceededError(
                f"quota {name} exceeded while {what} (limit {limit} {at}): request more at "
                "https://console.cloud.google.com/iam-admin/quotas (filter by that name) or use a "
                "smaller slice.")
        return QuotaExceededError(f"quota exceeded while {what} ({text}): request more in the console "
                                  "(IAM & Admin > Quotas) or use a smaller slice.")
    return CloudError(f"{what} failed: {text}")
