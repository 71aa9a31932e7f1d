"""Both APIs as one SliceProvider: where no API was chosen (no --api, PODCTL_API, podctl.toml
`api` or PODCTL_PROVIDER), a slice is found wherever it was made, so a user who made a v5p
slice with `--api compute` last week can type `podctl down NAME` and not be told, while it
bills, that it does not exist (issue 38). The one place that decides it; the steps above
hold a SliceProvider as before.

    find, describe:  the Cloud TPU API and one light GET of Compute Engine's MIG NAME, at
                     once; the slice where it is; a name in both is refused in one line
                     asking for --api; in neither, a not-found line that says both were asked;
                     a name met once is asked of its API alone while it is there (a run's
                     watch and recovery describe it every few seconds)
    list_slices:     both, at once: the Cloud TPU API's slices, then Compute Engine's where
                     the zone has a MIG or a template of podctl's (each says which in `api`)
    create:          the API that makes its generation (TPU7x: Compute Engine), or the one
                     a slice of that name was found on (recovery makes it again there)
    the rest:        by the slice's `api`, or by the API a name was found on

The light GETs go through cloud/firewall.py's ComputeReader (requests, no client library):
google-cloud-compute costs seconds of CPU to import, paid only when a Compute Engine slice
is there. Where Compute Engine cannot be asked (its API off, no permission), the Cloud TPU
API's answer stands, and a name found in neither says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from podctl.base import topology
from podctl.base.errors import InvalidValueError, NotFoundError, PodctlError
from podctl.base.settings import Settings
from podctl.cloud import compute_names
from podctl.cloud.create import CreateRequest, Creation, CreationOutcome
from podctl.cloud.describe import Kind
from podctl.cloud.firewall import ComputeReader
from podctl.cloud.placement import Placement
from podctl.cloud.provider import SliceProvider, opener
from podctl.cloud.types import GuestEntry, SliceInfo
from podctl.cloud.wait import Clock, Progress, WaitPolicy

COMPUTE = "compute"  # SliceInfo.api of a Compute Engine slice, and its provider's name


class BothApis:
    """The Cloud TPU provider, with Compute Engine's opened only when one of its slices is
    met (cloud/provider.py's protocol)."""

    def __init__(self, settings: Settings, tpu: SliceProvider,
                 open_compute: Callable[[], SliceProvider] | None = None,
                 open_reader: Callable[[], ComputeReader] | None = None):
        self.settings = settings
        self.tpu = tpu
        self.endpoint = tpu.endpoint
        # Compute Engine's provider, opened when first needed (tests give the in-process fake's)
        self._open_compute = open_compute or (lambda: opener(COMPUTE)(settings))
        self._compute: SliceProvider | None = None
        self._open_reader = open_reader or self._compute_reader
        self._reader: ComputeReader | None = None
        self._probes = 0
        # PARENT/nodes/NAME -> the API its slice was met on (SliceInfo.api): a slice looked at
        # again (a run's watch, recovery's) is asked of that API alone while it is there
        self._where: dict[str, str] = {}

    # ---- which API -----------------------------------------------------------------------

    @property
    def compute(self) -> SliceProvider:
        if self._compute is None:
            self._compute = self._open_compute()
        return self._compute

    def _compute_reader(self) -> ComputeReader:
        from podctl.cloud.connect import compute_reader

        return compute_reader(self.settings, self.tpu)

    def _reader_now(self) -> ComputeReader:
        if self._reader is None:
            self._reader = self._open_reader()
        return self._reader

    async def _get(self, path: str, **params: str) -> tuple[int, dict[str, Any]] | str:
        """One GET of Compute Engine (in a thread, beside the Cloud TPU call); a str says
        why it could not be asked."""
        self._probes += 1
        try:
            return await asyncio.to_thread(self._reader_now().get, path, **params)
        except Exception as e:  # requests' connection errors, ADC's: Compute Engine not asked
            return f"{type(e).__name__}: {e}"

    async def _mig_of(self, parent: str, name: str) -> bool | str:
        """Whether Compute Engine has MIG NAME in PARENT's zone; a str: it could not be asked."""
        project, zone = compute_names.parse_parent(parent)
        got = await self._get(f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}")
        if isinstance(got, str):
            return got
        status, body = got
        if status in (200, 404):
            return status == 200
        return f"{status}: {(body.get('error') or {}).get('message') or 'no answer'}"

    async def _zone_has_any(self, parent: str) -> bool:
        """Whether PARENT's zone holds a MIG, or a template of podctl's for a slice there
        (an `up` killed before its MIG: gc's to remove); False where it cannot be asked."""
        project, zone = compute_names.parse_parent(parent)
        migs, templates = await asyncio.gather(
            self._get(f"projects/{project}/zones/{zone}/instanceGroupManagers", maxResults="1"),
            self._templates_in(project, zone))
        return templates or (not isinstance(migs, str) and migs[0] == 200 and bool(migs[1].get("items")))

    async def _templates_in(self, project: str, zone: str) -> bool:
        token = ""
        while True:
            got = await self._get(f"projects/{project}/global/instanceTemplates",
                                  **({"pageToken": token} if token else {}))
            if isinstance(got, str) or got[0] != 200:
                return False
            for template in got[1].get("items") or []:
                owner = compute_names.template_slice(str(template.get("description") or ""))
                if owner is not None and owner[1] == zone:
                    return True
            token = str(got[1].get("nextPageToken") or "")
            if not token:
                return False

    def _met(self, parent: str, info: SliceInfo) -> SliceInfo:
        self._where[f"{parent}/nodes/{info.name}"] = info.api
        return info

    def _by_name(self, parent: str, name: str) -> SliceProvider:
        return self._by_node(f"{parent}/nodes/{name}")

    def _by_node(self, node_name: str) -> SliceProvider:
        return self.compute if self._where.get(node_name) == COMPUTE else self.tpu

    def _by_info(self, info: SliceInfo) -> SliceProvider:
        return self.compute if info.api == COMPUTE else self.tpu

    def _maker(self, parent: str, name: str, slice_type: topology.SliceType) -> SliceProvider:
        if not slice_type.generation.on_cloud_tpu:
            return self.compute
        return self._by_name(parent, name)

    # ---- the service ---------------------------------------------------------------------

    @property
    def total_calls(self) -> int:
        return self.tpu.total_calls + self._probes + (self._compute.total_calls if self._compute else 0)

    def server_now(self) -> float:
        return self.tpu.server_now()

    async def server_clock(self, parent: str) -> float:
        return await self.tpu.server_clock(parent)

    def close(self) -> None:
        for provider in (self.tpu, self._compute):
            if provider is not None:
                provider.close()
        if self._reader is not None:
            self._reader.close()

    # ---- slices ---------------------------------------------------------------------------

    async def check_zone(self, parent: str, slice_type: topology.SliceType) -> None:
        maker = self.compute if not slice_type.generation.on_cloud_tpu else self.tpu
        await maker.check_zone(parent, slice_type)

    async def create(self, request: CreateRequest) -> Creation:
        maker = self._maker(request.parent, request.name, request.spec.slice_type)
        return await maker.create(request)

    async def creation_outcome(self, operation_name: str) -> CreationOutcome | None:
        # a MIG's insert is 'projects/P/zones/Z/operations/N', a node's '.../locations/Z/...'
        if compute_names.parse_operation(operation_name) is not None:
            return await self.compute.creation_outcome(operation_name)
        return await self.tpu.creation_outcome(operation_name)

    async def describe(self, parent: str, name: str, kind: Kind | None = None) -> SliceInfo:
        found = await self._look(parent, name, kind)
        if isinstance(found, NotFoundError):
            raise found
        return found

    async def find(self, parent: str, name: str) -> SliceInfo | None:
        found = await self._look(parent, name, None)
        return None if isinstance(found, NotFoundError) else found

    async def _look(self, parent: str, name: str, kind: Kind | None) -> SliceInfo | NotFoundError:
        """NAME on the API it was met on, while it is there; else on the Cloud TPU API and
        on Compute Engine, asked at once."""
        key = f"{parent}/nodes/{name}"
        if key in self._where:
            try:
                return self._met(parent, await self._by_node(key).describe(parent, name, kind))
            except NotFoundError:
                pass  # gone from there: both are asked again (made again, it is made there: create)
        on_tpu, on_compute = await asyncio.gather(self.tpu.describe(parent, name, kind),
                                                  self._mig_of(parent, name), return_exceptions=True)
        for said in (on_tpu, on_compute):
            if isinstance(said, BaseException) and not isinstance(said, PodctlError):
                raise said  # cancelled, or a bug: not an answer
        if on_compute is True:
            if isinstance(on_tpu, SliceInfo):
                zone = compute_names.parse_parent(parent)[1]
                raise InvalidValueError(f"{zone} has a slice named {name!r} on both the Cloud TPU API and "
                                        "Compute Engine: say which with --api tpu or --api compute.")
            # the Cloud TPU API's failure (its API off, say) does not hide a slice that is there
            return self._met(parent, await self.compute.describe(parent, name, kind))
        if isinstance(on_tpu, SliceInfo):
            return self._met(parent, on_tpu)
        if not isinstance(on_tpu, NotFoundError):
            assert isinstance(on_tpu, PodctlError)
            raise on_tpu
        if isinstance(on_compute, str):
            return NotFoundError(f"{on_tpu} (Compute Engine could not be asked: {on_compute}; with "
                                 "--api compute it is asked alone.)")
        zone = compute_names.parse_parent(parent)[1]  # both were asked: neither has it
        return NotFoundError(f"no slice named {name!r} in {zone}, on the Cloud TPU API or Compute "
                             "Engine; `podctl ls` lists them.")

    async def list_slices(self, parent: str, page_size: int = 0) -> list[SliceInfo]:
        on_tpu, has_compute = await asyncio.gather(self.tpu.list_slices(parent, page_size),
                                                   self._zone_has_any(parent))
        if not has_compute:
            return on_tpu
        on_compute = await self.compute.list_slices(parent, page_size)
        on_both = {s.name for s in on_tpu} & {s.name for s in on_compute}
        for info in (*on_tpu, *on_compute):
            if info.name not in on_both:  # one of a name on both is no answer for the name
                self._met(parent, info)
        return sorted([*on_tpu, *on_compute], key=lambda s: (s.name, s.api))

    async def owning_slice(self, parent: str, info: SliceInfo) -> SliceInfo:
        return await self._by_info(info).owning_slice(parent, info)

    async def delete(self, parent: str, info: SliceInfo) -> SliceInfo:
        return await self._by_info(self._met(parent, info)).delete(parent, info)

    async def ask_again(self, parent: str, member: str) -> None:  # queued resources: Cloud TPU's
        await self.tpu.ask_again(parent, member)

    async def stop_asking(self, parent: str, member: str) -> None:
        await self.tpu.stop_asking(parent, member)

    async def wait_ready(self, parent: str, name: str, *, kind: Kind | None = None,
                         creation: Creation | None = None, policy: WaitPolicy | None = None,
                         clock: Clock | None = None, progress: Progress | None = None) -> SliceInfo:
        ready = await self._by_name(parent, name).wait_ready(parent, name, kind=kind, creation=creation,
                                                             policy=policy, clock=clock, progress=progress)
        return self._met(parent, ready)

    async def wait_deleted(self, parent: str, name: str, *, kind: Kind | None = None,
                           policy: WaitPolicy | None = None, clock: Clock | None = None,
                           progress: Progress | None = None) -> None:
        await self._by_name(parent, name).wait_deleted(parent, name, kind=kind, policy=policy, clock=clock,
                                                       progress=progress)

    async def set_labels(self, parent: str, info: SliceInfo, labels: Mapping[str, str],
                         policy: WaitPolicy | None = None) -> SliceInfo:
        return await self._by_info(info).set_labels(parent, info, labels, policy)

    async def placement(self, parent: str, info: SliceInfo) -> Placement:
        return await self._by_info(info).placement(parent, info)

    async def upcoming_maintenance(self, info: SliceInfo) -> dict[str, dict[str, Any]]:
        return await self._by_info(info).upcoming_maintenance(info)

    # ---- a node's metadata and what its hosts publish ------------------------------------

    async def set_metadata_key(self, node_name: str, key: str, value: str, *,
                               current: Mapping[str, str] | None = None,
                               wait: bool = True) -> dict[str, str]:
        return await self._by_node(node_name).set_metadata_key(node_name, key, value, current=current, wait=wait)

    async def remove_metadata_key(self, node_name: str, key: str, *,
                                  current: Mapping[str, str] | None = None,
                                  wait: bool = True) -> dict[str, str]:
        return await self._by_node(node_name).remove_metadata_key(node_name, key, current=current, wait=wait)

    async def guest_attributes(self, node_name: str, query_path: str = "", *,
                               workers: int | None = None) -> list[list[GuestEntry]]:
        return await self._by_node(node_name).guest_attributes(node_name, query_path, workers=workers)


def open_both(settings: Settings) -> BothApis:
    """The registry's opener: the Cloud TPU provider (which makes what the Cloud TPU API
    serves) with Compute Engine's beside it."""
    return BothApis(settings, opener("cloud-tpu")(settings))
