"""The dataclasses that cross the provisioning layer: what to create, what exists.

Nothing above `podctl/cloud/` sees a protobuf or an API dict; it sees these.
`SliceInfo.to_json()` is the stable shape of `podctl up/ls/status --json`
(documented in docs/reference/json.md): add keys, never rename or remove them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from podctl.base.errors import InvalidValueError
from podctl.base.topology import MultiSlice, SliceType, parse_multislice, parse_topology
from podctl.base.vocabulary import SERVING_STATES

Tier = Literal["on-demand", "spot", "guaranteed"]
TIERS: tuple[Tier, ...] = ("on-demand", "spot", "guaranteed")

# The node metadata key that says which startup script (the boot watcher) the slice carries:
# its version, or absent on a slice made before it or not by podctl. The same string as
# jobs/run_layout.BOOT_KEY (cloud may not import jobs; tests/fake/test_node_metadata.py holds them equal).
BOOT_METADATA_KEY = "podctl-boot"

# States in which a slice holds chips and bills (or may soon).
BILLABLE_STATES = {"CREATING", "READY", "PREEMPTED", "STOPPING", "STARTING", "RESTARTING",
                   "REPAIRING", "PROVISIONING", "ACTIVE", "SUSPENDING"}


@dataclass(frozen=True)
class SliceSpec:
    """What `up` asks for: K slices of one TPU type, as a node or a queued resource."""

    slice_type: SliceType
    num_slices: int = 1
    queued: bool = False
    tier: Tier = "on-demand"
    valid_for_seconds: int | None = None
    runtime_version: str = ""  # empty: the generation's default (generations.toml)
    # K slices as K single-slice queued resources (cloud/create.py), so that a lost one is
    # asked for again on its own while the others keep running (`up --elastic`)
    elastic: bool = False

    def __post_init__(self) -> None:
        if not self.runtime_version:
            object.__setattr__(self, "runtime_version",
                               self.slice_type.generation.default_runtime_version)

    @classmethod
    def build(cls, slice_type: str, *, num_slices: int = 1, queued: bool = False,
              tier: Tier = "on-demand", valid_for_seconds: int | None = None,
              runtime_version: str | None = None, elastic: bool = False) -> SliceSpec:
        """Validate a request; multislice is only offered through queued resources."""
        multi = parse_multislice(slice_type, num_slices)
        if elastic and num_slices < 2:
            raise InvalidValueError("--elastic makes one queued resource per slice: give "
                                    "--num-slices 2 or more.")
        if tier not in TIERS:
            raise InvalidValueError(f"unknown tier {tier!r}: use one of {', '.join(TIERS)}.")
        queued = queued or num_slices > 1
        if tier == "guaranteed" and not queued:
            raise InvalidValueError("--guaranteed is a queued-resource tier: add --queued.")
        if valid_for_seconds is not None and not queued:
            raise InvalidValueError("--valid-for applies to queued resources: add --queued.")
        return cls(multi.slice_type, num_slices, queued, tier, valid_for_seconds,
                   runtime_version or "", elastic)

    @property
    def multislice(self) -> MultiSlice:
        return MultiSlice(self.slice_type, self.num_slices)

    def describe(self) -> str:
        count = f"{self.num_slices} x " if self.num_slices > 1 else ""
        kind = ("queued resource each" if self.elastic else "queued resource") if self.queued else "node"
        return f"{count}{self.slice_type.name} ({self.tier} {kind})"


@dataclass(frozen=True)
class Member:
    """One queued resource of an elastic slice (`up --elastic`): slice INDEX's, by NAME,
    in STATE (a member deleted at the grow-back deadline is absent)."""

    index: int
    name: str
    state: str


@dataclass(frozen=True)
class Host:
    """One TPU VM of a slice: the job layer's SSH target."""

    slice_index: int
    worker: int
    ip: str
    port: int
    external_ip: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"slice": self.slice_index, "worker": self.worker, "ip": self.ip,
                "port": self.port, "external_ip": self.external_ip}


@dataclass(frozen=True)
class NodeInfo:
    """One Cloud TPU node (one slice of a multislice)."""

    name: str  # the short node id
    state: str
    health: str | None
    accelerator_type: str
    topology: str
    hosts: tuple[Host, ...]
    spot: bool
    created: float  # epoch seconds
    labels: dict[str, str]
    queued_resource: str | None  # the short id of the queued resource that owns it
    symptoms: tuple[str, ...] = ()  # Node.symptoms: "HBM_OUT_OF_MEMORY on worker 1: details"
    os_login: str | None = None  # the node's own `enable-oslogin` metadata, if it has one (oslogin.py)
    # The node's whole metadata map as read (nodes.get/list): what a read-modify-write of
    # it starts from (node_metadata.py). Readable by anyone with tpu.nodes.get: no secrets.
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def boot_version(self) -> str | None:
        """The node's `podctl-boot` metadata (the boot watcher's version), None without one."""
        return self.metadata.get(BOOT_METADATA_KEY)


@dataclass(frozen=True)
class GuestEntry:
    """One guest attribute a host published (nodes.getGuestAttributes' queryValue.items)."""

    namespace: str
    key: str
    value: str


@dataclass(frozen=True)
class SliceInfo:
    """What podctl knows of one slice: a node, or a queued resource with its nodes."""

    name: str
    project: str
    zone: str
    kind: Literal["node", "queued-resource"]
    state: str  # the node's state, or the queued resource's (ACTIVE = its nodes are up)
    accelerator_type: str
    topology: str
    num_slices: int
    tier: Tier
    created: float
    labels: dict[str, str]
    nodes: tuple[NodeInfo, ...] = ()
    error: str | None = None  # why a queued resource failed
    runtime_version: str = ""
    valid_until: float | None = None
    observed: float = field(default_factory=time.time)
    api: str = "cloud-tpu"  # which API made it: "cloud-tpu" or "compute" (a Compute Engine MIG)
    members: tuple[Member, ...] = ()  # an elastic slice's queued resources, one per slice

    @property
    def managed(self) -> bool:
        return self.labels.get("podctl-managed") == "true"

    @property
    def hosts(self) -> tuple[Host, ...]:
        return tuple(h for node in self.nodes for h in node.hosts)

    @property
    def ready(self) -> bool:
        return (self.state in SERVING_STATES and len(self.nodes) == self.num_slices
                and all(n.state == "READY" for n in self.nodes))

    @property
    def chips(self) -> int:
        """From the topology, so that a v5e or v6e node in the same zone lists too."""
        return parse_topology(self.topology) * self.num_slices if self.topology else 0

    @property
    def ready_slices(self) -> set[int]:
        """The slices whose node is READY, by the cloud's word alone (no host asked)."""
        return {n.hosts[0].slice_index for n in self.nodes if n.state == "READY" and n.hosts}

    @property
    def billed_chips(self) -> int:
        """The chips billed now: an elastic slice's (members) only on its nodes that exist
        and bill (a lost slice asked for again has none until it is READY; one deleted at
        --grow-deadline has none at all); any other slice's, all of them."""
        if not self.members or not self.topology:
            return self.chips
        return parse_topology(self.topology) * sum(1 for n in self.nodes if n.state in BILLABLE_STATES)

    @property
    def age_seconds(self) -> float:
        return max(0.0, self.observed - self.created)

    @property
    def health(self) -> str | None:
        healths = {n.health for n in self.nodes}
        if not healths:
            return None
        return healths.pop() if len(healths) == 1 else "MIXED"

    @property
    def billable(self) -> bool:
        return self.state in BILLABLE_STATES or any(n.state in BILLABLE_STATES for n in self.nodes)

    def matches(self, spec: SliceSpec) -> list[str]:
        """How this slice differs from SPEC, in words; empty if it is the same."""
        diffs = []
        if self.accelerator_type != spec.slice_type.name:
            diffs.append(f"type {self.accelerator_type}, not {spec.slice_type.name}")
        if self.num_slices != spec.num_slices:
            diffs.append(f"{self.num_slices} slices, not {spec.num_slices}")
        if (self.kind == "queued-resource") != spec.queued:
            diffs.append(f"a {self.kind}, not a {'queued-resource' if spec.queued else 'node'}")
        if self.tier != spec.tier:
            diffs.append(f"tier {self.tier}, not {spec.tier}")
        if bool(self.members) != spec.elastic:
            diffs.append("one queued resource per slice, not one for all" if self.members
                         else "one queued resource for all slices, not one per slice (--elastic)")
        return diffs

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "project": self.project, "zone": self.zone, "kind": self.kind,
            "state": self.state, "ready": self.ready, "health": self.health,
            "accelerator_type": self.accelerator_type, "topology": self.topology,
            "num_slices": self.num_slices, "chips": self.chips, "hosts": len(self.hosts),
            "tier": self.tier, "runtime_version": self.runtime_version,
            "created": self.created, "age_seconds": round(self.age_seconds, 1),
            "managed": self.managed, "labels": dict(self.labels), "error": self.error,
            "valid_until": self.valid_until, "api": self.api,
            "members": [{"index": m.index, "name": m.name, "state": m.state} for m in self.members],
            "nodes": [{"name": n.name, "state": n.state, "health": n.health,
                       "symptoms": list(n.symptoms),
                       "hosts": [h.to_json() for h in n.hosts]} for n in self.nodes],
        }
