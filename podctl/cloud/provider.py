"""SliceProvider: what podctl asks of whatever makes slices, and the registry that picks one.

Everything above cloud/ (steps/, jobs/, policy/gc.py, money/budget.py, the queue through steps/) holds a
SliceProvider and speaks slices: `SliceSpec` and `CreateRequest` in, `SliceInfo`,
`GuestEntry` and `Placement` out (cloud/types.py), never an API's dict or protobuf. Only
cloud/ names a concrete provider, so a second way of making slices (Compute Engine, which
serves TPU7x: issue 38) is one module under cloud/providers/ and one line in PROVIDERS.

What is the same for every provider is written once above the interface: `up`'s reuse,
create, wait and undo (cloud/up.py); what differs (how a slice is asked for, described,
waited for, deleted, labelled; its metadata and its hosts' guest attributes) is each
provider's.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from podctl.base.errors import ConfigError, InvalidValueError

if TYPE_CHECKING:  # annotations only: the protocol costs no import of a provider
    from podctl.base import topology
    from podctl.base.settings import Settings
    from podctl.cloud.create import CreateRequest, Creation, CreationOutcome
    from podctl.cloud.describe import Kind
    from podctl.cloud.placement import Placement
    from podctl.cloud.types import GuestEntry, SliceInfo
    from podctl.cloud.wait import Clock, Progress, WaitPolicy


class SliceProvider(Protocol):
    """One cloud API that makes slices. PARENT is `projects/P/locations/ZONE`; a node's
    name is its full path (`PARENT/nodes/N`, as NodeInfo and the metadata calls take it)."""

    # Where the provider's API answers; the fake serves its other APIs (Compute's network
    # reads, OS Login) on the same address, so connect.py finds them from here.
    endpoint: str

    # ---- the service: its clock, its calls ------------------------------------------------

    @property
    def total_calls(self) -> int:
        """HTTP requests sent so far (a queue tick reports its own)."""
        ...

    def server_now(self) -> float:
        """Now on the service's clock (budgets and expiry are judged on it)."""
        ...

    async def server_clock(self, parent: str) -> float:
        """`server_now` after one light call, when the service has not answered yet."""
        ...

    def close(self) -> None:
        """Close the HTTP sessions."""
        ...

    # ---- slices ---------------------------------------------------------------------------

    async def check_zone(self, parent: str, slice_type: topology.SliceType) -> None:
        """Refuse a zone without SLICE_TYPE's generation (InvalidValueError), before any create."""
        ...

    async def create(self, request: CreateRequest) -> Creation:
        """Ask for the slice; return at once with what `wait_ready` and `creation_outcome` follow."""
        ...

    async def creation_outcome(self, operation_name: str) -> CreationOutcome | None:
        """How a create started earlier (by another process) ended; None if forgotten."""
        ...

    async def describe(self, parent: str, name: str, kind: Kind | None = None) -> SliceInfo:
        """The slice NAME; NotFoundError (one line, what to do) if there is none."""
        ...

    async def find(self, parent: str, name: str) -> SliceInfo | None:
        ...

    async def list_slices(self, parent: str, page_size: int = 0) -> list[SliceInfo]:
        """Every slice in the zone, by name."""
        ...

    async def owning_slice(self, parent: str, info: SliceInfo) -> SliceInfo:
        """What deleting INFO deletes (a node of a bigger request goes with the request)."""
        ...

    async def delete(self, parent: str, info: SliceInfo) -> SliceInfo:
        """Start deleting INFO's slice (gone already is done); the slice as it was found."""
        ...

    async def ask_again(self, parent: str, member: str) -> None:
        """Ask again for one lost slice of an elastic slice (SliceInfo.members): its
        SUSPENDED queued resource MEMBER waits for capacity again, same tier and window."""
        ...

    async def stop_asking(self, parent: str, member: str) -> None:
        """Delete the queued resource MEMBER of an elastic slice (with its node), gone or not."""
        ...

    async def wait_ready(self, parent: str, name: str, *, kind: Kind | None = None,
                         creation: Creation | None = None, policy: WaitPolicy | None = None,
                         clock: Clock | None = None, progress: Progress | None = None) -> SliceInfo:
        """Until the slice is ready to run on; SliceLostError / WaitTimeoutError if it cannot be."""
        ...

    async def wait_deleted(self, parent: str, name: str, *, kind: Kind | None = None,
                           policy: WaitPolicy | None = None, clock: Clock | None = None,
                           progress: Progress | None = None) -> None:
        ...

    async def set_labels(self, parent: str, info: SliceInfo, labels: Mapping[str, str],
                         policy: WaitPolicy | None = None) -> SliceInfo:
        """Replace INFO's labels with LABELS and wait until written (InvalidValueError where
        the slice's kind cannot be relabelled); the slice as it is then."""
        ...

    async def placement(self, parent: str, info: SliceInfo) -> Placement:
        """What INFO's slice was made with (reservation, network, account, tags): recovery
        makes the next one alike."""
        ...

    async def upcoming_maintenance(self, info: SliceInfo) -> dict[str, dict[str, Any]]:
        """Node short name -> its announced maintenance, for the nodes that have one; an
        extra for the display: any failure is nothing."""
        ...

    # ---- a node's metadata and what its hosts publish ------------------------------------

    async def set_metadata_key(self, node_name: str, key: str, value: str, *,
                               current: Mapping[str, str] | None = None,
                               wait: bool = True) -> dict[str, str]:
        """KEY=VALUE in the node's metadata, every other key kept; the map written."""
        ...

    async def remove_metadata_key(self, node_name: str, key: str, *,
                                  current: Mapping[str, str] | None = None,
                                  wait: bool = True) -> dict[str, str]:
        ...

    async def guest_attributes(self, node_name: str, query_path: str = "", *,
                               workers: int | None = None) -> list[list[GuestEntry]]:
        """What each host published under QUERY_PATH, one list per worker in worker order."""
        ...


# ---- the registry ---------------------------------------------------------------------------

# Provider name -> "module:function", the opener: Settings in, a SliceProvider out (the
# backend switch inside it: Google's endpoint or the fake's). Imported only when chosen,
# so that `podctl --help` loads no cloud client. A new provider is one line here.
PROVIDERS: dict[str, str] = {
    "cloud-tpu": "podctl.cloud.connect:connect",  # tpu.googleapis.com (v6e and older)
    "compute": "podctl.cloud.connect:connect_compute",  # compute.googleapis.com (TPU7x; v5p, v6e)
    # both of them, where none was chosen: a slice is found wherever it was made
    "both": "podctl.cloud.providers.both_apis:open_both",
}
DEFAULT = "cloud-tpu"
ENV = "PODCTL_PROVIDER"  # which provider makes slices, where the default is not wanted


# Settings.api (--api, PODCTL_API, podctl.toml's api) -> the provider it names.
BY_API = {"tpu": "cloud-tpu", "compute": "compute"}


def provider_name(env: Mapping[str, str] = os.environ, api: str | None = None) -> str:
    """The provider to make slices with: PODCTL_PROVIDER, else the one API names (the
    settings' --api), else the default. An unknown name is refused in one line with the
    known ones."""
    name = env.get(ENV) or BY_API.get(api or "") or DEFAULT
    if name not in PROVIDERS:
        raise ConfigError(f"{ENV}={name!r} names no slice provider; known: {', '.join(sorted(PROVIDERS))}.")
    return name


def opener(name: str) -> Callable[[Settings], SliceProvider]:
    """The registered opener of provider NAME (ConfigError if none is registered)."""
    where = PROVIDERS.get(name)
    if where is None:
        raise ConfigError(f"no slice provider named {name!r}; known: {', '.join(sorted(PROVIDERS))}.")
    module, _, function = where.partition(":")
    found: Callable[[Settings], SliceProvider] = getattr(importlib.import_module(module), function)
    return found


BOTH = "both"


def open_provider(settings: Settings, name: str | None = None,
                  env: Mapping[str, str] = os.environ) -> SliceProvider:
    """Open provider NAME (or the chosen one: `provider_name`, from SETTINGS' api) for SETTINGS.
    Where nothing chose one (no PODCTL_PROVIDER, no --api, PODCTL_API or podctl.toml `api`),
    both APIs as one (providers/both_apis.py): what the default makes, and a slice found by
    name or listed wherever it was made, so `status`, `down`, `run`, `ls` and the rest need
    no --api for a slice Compute Engine made."""
    if name is None and not env.get(ENV) and settings.api is None:
        name = BOTH
    return opener(name or provider_name(env, settings.api))(settings)


def api_for(settings: Settings, slice_type: topology.SliceType) -> Settings:
    """SETTINGS with the API that serves SLICE_TYPE when none was chosen: a generation the
    Cloud TPU API does not serve (TPU7x) goes through Compute Engine by itself."""
    import dataclasses

    if settings.api is None and os.environ.get(ENV) is None and not slice_type.generation.on_cloud_tpu:
        return dataclasses.replace(settings, api="compute")
    chosen = provider_name(api=settings.api)  # refused before anything is started or connected
    if chosen == "compute":
        refuse_off_compute(slice_type)
    elif chosen == "cloud-tpu":
        refuse_off_cloud_tpu(slice_type)
    return settings


def refuse_off_cloud_tpu(slice_type: topology.SliceType) -> None:
    """A generation the Cloud TPU API does not serve (TPU7x) is refused in one line, with
    the way that does serve it."""
    gen = slice_type.generation
    if not gen.on_cloud_tpu:
        raise InvalidValueError(f"{slice_type.name}: {gen.not_on_cloud_tpu}; podctl makes it through "
                                "Compute Engine: leave --api out (or pass --api compute).")


def refuse_off_compute(slice_type: topology.SliceType) -> None:
    """A generation Compute Engine makes no VMs of (v5e, v4) is refused in one line."""
    if not slice_type.generation.on_compute:
        from podctl.base import topology

        gen = slice_type.generation
        served = ", ".join(g.key for g in topology.generations().values() if g.on_compute)
        raise InvalidValueError(f"{slice_type.name}: Compute Engine makes no {gen.name} VMs "
                                f"(it serves {served}); use the Cloud TPU API (--api tpu).")
