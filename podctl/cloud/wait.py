"""Waiting for a slice: capped exponential backoff with jitter and an overall deadline.

A v5p slice takes minutes to come up and a queued resource may wait hours for
capacity; a poll every second would be hundreds of GETs. The waits grow 1, 2, 4,
8, 16 s and then stay at 30 s (plus up to 1 s of jitter, so many podctl processes
do not poll in step): a 10-minute provisioning costs about 25 polls. The clock
and the sleep are parameters, so tests and benchmarks can run simulated time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, retry_if_result, wait_exponential_jitter

from podctl.base.errors import (
    NotFoundError,
    SliceDeletedError,
    SliceLostError,
    TransientError,
    WaitTimeoutError,
)
from podctl.base.vocabulary import DEFAULT_WAIT_SECONDS
from podctl.cloud import describe
from podctl.cloud.convert import slice_from_node
from podctl.cloud.describe import Kind
from podctl.cloud.operations import Operation
from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.translate import translate_operation_error
from podctl.cloud.types import SliceInfo

T = TypeVar("T")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class WaitPolicy:
    initial: float = 1.0
    maximum: float = 30.0
    jitter: float = 1.0
    timeout: float = DEFAULT_WAIT_SECONDS


@dataclass(frozen=True)
class Clock:
    """Where waiting gets its time: real by default, simulated in benchmarks."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


async def wait_until(probe: Callable[[], Awaitable[T | None]], *, what: str,
                     policy: WaitPolicy = WaitPolicy(), clock: Clock = Clock()) -> T:
    """Call PROBE until it returns something other than None, backing off between calls.

    A TransientError from the probe (an API outage longer than one call's retries)
    counts as "not yet"; any other error ends the wait. At the deadline: WaitTimeoutError.
    """
    deadline = clock.now() + policy.timeout
    await clock.sleep(min(policy.initial, policy.timeout))  # nothing is ready the moment it is asked for
    backoff = wait_exponential_jitter(multiplier=policy.initial, max=policy.maximum, jitter=policy.jitter)

    def wait(state: RetryCallState) -> float:
        return max(0.0, min(backoff(state), deadline - clock.now()))

    def give_up(state: RetryCallState) -> T:
        outcome = state.outcome
        if outcome is not None and outcome.failed:
            raise outcome.exception()  # type: ignore[misc]
        raise WaitTimeoutError(f"gave up {what} after {policy.timeout:g} s; raise --timeout, "
                               "or check `podctl status NAME`.")

    retrying = AsyncRetrying(
        wait=wait,
        stop=lambda state: clock.now() >= deadline,
        retry=retry_if_result(lambda result: result is None) | retry_if_exception_type(TransientError),
        sleep=clock.sleep,
        retry_error_callback=give_up,
    )

    async def attempt() -> T | None:
        # Awaited here, whatever PROBE is: tenacity awaits only what it sees is a
        # coroutine function, and would return the coroutine of a lambda unawaited.
        return await probe()

    return await retrying(attempt)


def _lost(info: SliceInfo) -> SliceLostError | None:
    """The slice can no longer become ready: say why and what to do."""
    fix = f"`podctl down {info.name}` cleans it up"
    if info.state == "PREEMPTED" or any(n.state == "PREEMPTED" for n in info.nodes):
        return SliceLostError(f"{info.name} was PREEMPTED; it still holds quota until deleted: {fix}.")
    if info.state in {"SUSPENDING", "SUSPENDED"}:
        return SliceLostError(f"queued resource {info.name} is {info.state} (preempted); {fix}.")
    if info.state == "FAILED":
        return SliceLostError(f"queued resource {info.name} FAILED: {info.error or 'no reason given'}; "
                              f"{fix}.")
    if info.state == "DELETING":
        return SliceDeletedError(f"{info.name} is DELETING; it will not become ready.")
    if info.state in {"TERMINATED", "STOPPED", "STOPPING"}:
        return SliceLostError(f"{info.name} is {info.state}; it will not become ready.")
    return None


async def wait_ready(api: TpuApi, parent: str, name: str, *, kind: Kind | None = None,
                     operation: Operation | None = None,
                     policy: WaitPolicy = WaitPolicy(), clock: Clock = Clock(),
                     progress: Progress | None = None) -> SliceInfo:
    """Until the slice is READY (a node) or ACTIVE with every node READY (a queued resource).

    With the create operation of a node, poll the operation (it carries a stockout
    as error code 8); otherwise poll the slice itself.
    """
    zone = parent.rsplit("/", 1)[-1]
    if operation is not None:
        current = operation

        async def poll_operation() -> SliceInfo | bool | None:
            nonlocal current
            current = await api.poll(current)
            if not current.done:
                if progress:
                    progress("CREATING")
                return None
            error = current.exception()
            if error is not None:
                raise translate_operation_error(error, f"creating {name}", zone) from error
            # The finished operation carries the node: no GET needed when it is ready.
            # (Google's leaves `health` out of it; readiness is the state.)
            node = current.node()
            info = slice_from_node(node) if node is not None else None
            return info if info is not None and info.ready else True

        done = await wait_until(poll_operation, what=f"waiting for {name}", policy=policy, clock=clock)
        if isinstance(done, SliceInfo):
            return done

    async def poll_slice() -> SliceInfo | None:
        try:
            info = await describe.describe(api, parent, name, kind)
        except NotFoundError as e:
            raise SliceDeletedError(f"{name} disappeared while podctl waited for it (its creation "
                                 "failed, or someone deleted it).") from e
        if info.ready:
            return info
        lost = _lost(info)
        if lost:
            raise lost
        if progress:
            progress(info.state)
        return None

    return await wait_until(poll_slice, what=f"waiting for {name}", policy=policy, clock=clock)


async def wait_deleted(api: TpuApi, parent: str, name: str, *, kind: Kind | None = None,
                       policy: WaitPolicy = WaitPolicy(),
                       clock: Clock = Clock(), progress: Progress | None = None) -> None:
    async def gone() -> bool | None:
        try:
            info = await describe.describe(api, parent, name, kind)
        except NotFoundError:
            return True
        if progress:
            progress(info.state)
        return None

    await wait_until(gone, what=f"waiting for {name} to be deleted", policy=policy, clock=clock)
