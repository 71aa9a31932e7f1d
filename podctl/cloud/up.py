"""`up`: the idempotent composition of the lifecycle steps.

    find -> (reuse: check spec, wait) | (check zone -> create -> wait)

A second `up` with the same name and spec reuses the slice; a different spec is
refused. A slice this call created is deleted again if the wait fails, times out
or is interrupted (Ctrl-C), so a failed `up` never leaves chips billing.

Written once for every slice provider (cloud/provider.py): each step is the provider's.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from podctl.base.errors import (
    AlreadyExistsError,
    CloudError,
    NotFoundError,
    PodctlError,
    SliceLostError,
    SpecMismatchError,
)
from podctl.base.failures import slice_lost_reason, unfit
from podctl.base.signals import first_stop_only, stop_signals_ignored
from podctl.cloud import create as create_step
from podctl.cloud.names import OWNER_LABEL, REQUEST_LABEL, podctl_labels, validate_name
from podctl.cloud.placement import Placement
from podctl.cloud.provider import SliceProvider
from podctl.cloud.types import SliceInfo, SliceSpec
from podctl.cloud.wait import Clock, Progress, WaitPolicy


@dataclass(frozen=True)
class UpRequest:
    parent: str
    name: str
    spec: SliceSpec
    ssh_keys: str
    owner: str
    wait: bool = True
    policy: WaitPolicy = WaitPolicy()
    labels: dict[str, str] = field(default_factory=dict)  # e.g. budgets; podctl's own win
    placement: Placement = Placement()  # reservation, network, service account, tags
    # The name is the default one, made from the owner's identity: a slice of that name
    # labelled with another owner is not this user's to reuse.
    named_for_owner: bool = False
    # More node metadata beside ssh-keys: the watcher's startup-script (jobs/boot_script.py)
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UpResult:
    info: SliceInfo
    created: bool  # False: an existing slice of the same spec was reused


def create_request_of(request: UpRequest, labels: dict[str, str]) -> create_step.CreateRequest:
    """What is asked of the API for REQUEST, with LABELS on the slice (`up` adds its
    owner and a token of its own; the queue's ask gives the queue's)."""
    return create_step.CreateRequest(parent=request.parent, name=request.name, spec=request.spec,
                                     labels=dict(labels), ssh_keys=request.ssh_keys,
                                     placement=request.placement, extra_metadata=dict(request.metadata))


def _check_reusable(info: SliceInfo, request: UpRequest, *, state: bool = True) -> None:
    """INFO may be reused for REQUEST (podctl's, the owner's, the same spec) and, with
    STATE, can run now; else one line that says why and what to do."""
    if not info.managed:
        raise SpecMismatchError(f"a slice named {info.name!r} exists but was not created by podctl; "
                                "choose another --name.")
    theirs = info.labels.get(OWNER_LABEL)
    if request.named_for_owner and theirs != request.owner:
        raise SpecMismatchError(f"slice {info.name!r} belongs to {repr(theirs) if theirs else 'another user'} "
                                f"(its {OWNER_LABEL} label), not to {request.owner!r}; choose a --name.")
    diffs = info.matches(request.spec)
    if diffs:
        raise SpecMismatchError(
            f"slice {info.name!r} exists with another spec ({'; '.join(diffs)}); choose another "
            f"--name, or `podctl down {info.name}` first.")
    if not state:
        return
    if info.state == "DELETING":
        raise SliceLostError(f"slice {info.name!r} is being deleted; wait for it, then `podctl up` again.")
    if slice_lost_reason(info):
        raise SliceLostError(f"slice {info.name!r} is {info.state}; "
                             f"`podctl down {info.name}`, then `podctl up` again.")
    sick = unfit(info)
    if sick:
        raise SliceLostError(f"slice {info.name!r} is {info.state} but unfit to run on ({sick}); "
                             f"`podctl down {info.name}`, then `podctl up` again.")


def degraded(info: SliceInfo) -> dict[int, str] | None:
    """An elastic slice (`up --elastic`: members) that holds some of its slices READY but
    not all -> each slice it lacks and its queued resource's state ("deleted": none, as
    at --grow-deadline); None for any other slice, or one with no slice READY."""
    if not info.members or info.state == "DELETING":
        return None
    serving = info.ready_slices
    if not serving or len(serving) >= info.num_slices:
        return None
    states = {m.index: m.state for m in info.members}
    return {i: states.get(i, "deleted") for i in range(info.num_slices) if i not in serving}


async def _say_degraded(api: SliceProvider, request: UpRequest, info: SliceInfo,
                        lost: dict[int, str]) -> None:
    """A second `up` of an elastic slice that lost a slice: no wait for it (in a stockout,
    hours: until --timeout), but the lost slice asked for again if it is SUSPENDED, and
    one line that says what is there."""
    words = []
    names = {m.index: m.name for m in info.members}
    for index, state in sorted(lost.items()):
        if state == "SUSPENDED":
            await api.ask_again(request.parent, names[index])
            state = "SUSPENDED, asked for again now"
        words.append(f"slice {index} {state}")
    held = info.num_slices - len(lost)
    raise SliceLostError(
        f"slice {info.name!r} exists with {held} of its {info.num_slices} slices READY "
        f"({'; '.join(words)}): not waiting for the rest; `podctl run --recover N --elastic` "
        f"goes on on those and grows back, or `podctl down {info.name}` and `podctl up` for all "
        f"{info.num_slices} now.")


async def _reuse(api: SliceProvider, request: UpRequest, info: SliceInfo, clock: Clock,
                 progress: Progress | None) -> UpResult:
    lost = degraded(info) if request.wait else None
    if lost:
        _check_reusable(info, request, state=False)  # podctl's, the owner's, the same spec
        await _say_degraded(api, request, info, lost)
    _check_reusable(info, request)
    if request.wait and not info.ready:
        info = await api.wait_ready(request.parent, request.name, kind=info.kind,
                                policy=request.policy, clock=clock, progress=progress)
        _check_reusable(info, request)  # ready now, and still fit to run on
    return UpResult(info, created=False)


async def up(api: SliceProvider, request: UpRequest, *, clock: Clock = Clock(),
             progress: Progress | None = None) -> UpResult:
    validate_name(request.name, request.spec.num_slices)
    existing = await api.find(request.parent, request.name)
    if existing:
        return await _reuse(api, request, existing, clock, progress)
    await api.check_zone(request.parent, request.spec.slice_type)
    # A label unique to this call tells, after a lost response or an interrupt,
    # whether a slice of this name is the one this call created.
    token = secrets.token_hex(6)
    create_request = create_request_of(
        request, {**request.labels, **podctl_labels(request.owner), REQUEST_LABEL: token})
    with first_stop_only():  # one signal starts the undo; a second cannot cut it short
        return await _create_and_wait(api, request, token, create_request, clock, progress)


async def _create_and_wait(api: SliceProvider, request: UpRequest, token: str,
                           create_request: create_step.CreateRequest, clock: Clock,
                           progress: Progress | None) -> UpResult:
    creation = None
    try:
        creation = await api.create(create_request)
        kind = creation.kind
    except AlreadyExistsError as e:
        info = await _taken_by(api, request, e)
        if info.labels.get(REQUEST_LABEL) != token:  # another `up` won the race
            return await _reuse(api, request, info, clock, progress)
        kind = info.kind  # ours: a retried create whose first try went through
    except BaseException:  # interrupted or failed: the create may still have gone through
        await _undo(api, request.parent, request.name, token, progress)
        raise
    if not request.wait:
        info = await api.describe(request.parent, request.name, kind)
        return UpResult(info, created=True)
    try:
        info = await api.wait_ready(request.parent, request.name, kind=kind, creation=creation,
                                    policy=request.policy, clock=clock, progress=progress)
    except BaseException:
        await _undo(api, request.parent, request.name, token, progress)
        raise
    return UpResult(info, created=True)


async def _taken_by(api: SliceProvider, request: UpRequest, conflict: AlreadyExistsError) -> SliceInfo:
    try:
        return await api.describe(request.parent, request.name)
    except NotFoundError:
        nodes = (f" or one of its node ids {request.name}-0 ... {request.name}-"
                 f"{request.spec.num_slices - 1}" if request.spec.num_slices > 1 else "")
        raise AlreadyExistsError(f"the name {request.name!r}{nodes} is taken by a node that is not "
                                 "this slice; choose another --name.") from conflict


async def _undo(api: SliceProvider, parent: str, name: str, token: str, progress: Progress | None) -> None:
    """Delete the slice NAME if this call created it (its label carries TOKEN)."""
    with stop_signals_ignored():
        try:
            info = await api.find(parent, name)
            if info is None or info.labels.get(REQUEST_LABEL) != token:
                return  # nothing was created (a stockout leaves nothing), or not by us
            if progress:
                progress(f"deleting {name}, which this failed `up` created")
            await api.delete(parent, info)
        except PodctlError as e:
            raise CloudError(f"{name} could not be deleted after a failed `up` ({e}); "
                             f"run `podctl down {name}` so that it does not bill.") from e
