"""The slice catalog: `v5p-N`, `v6e-N`, `v5litepod-N`, `v4-N` -> chips, hosts and ICI topology.

Every fact about a generation lives in one record of podctl/data/generations.toml
(TensorCores per chip, chips per host, the shapes Google offers, peak FLOP/s, HBM,
default runtime, zones, libtpu names, each with its source); this module reads those
records and nothing here names a generation. N counts TensorCores for v5p and v4
(`v5p-8` = 4 chips) and chips for v5e and v6e (`v6e-8` = 8 chips), as the API does.

A shape outside Google's own table but in the per-chip-count list that Google's
MaxText and xpk use (e.g. v5p-384 = 4x4x12) is accepted and flagged "not in Google's
table"; a size that is no shape at all is refused, and the sizes suggested instead are
always from Google's table.

This module is shared data: the fake cloud imports it too, so it must import
nothing from podctl but `errors`.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from podctl.base.errors import InvalidSliceError

_NAME = re.compile(r"^(?P<family>[a-z0-9]+)-(?P<size>[^-]+)$")
_BOUNDS = {1: "1,1,1", 4: "2,2,1", 8: "2,4,1"}  # chips on one host -> libtpu's host bounds


@dataclass(frozen=True)
class Generation:
    """One TPU generation the Cloud TPU API serves (a record of generations.toml)."""

    key: str  # the accelerator type's prefix: "v5p", "v6e", "v5litepod", "v4"
    name: str
    api_type: str  # AcceleratorConfig.Type, e.g. "V5P"
    size_unit: str  # "cores" or "chips": what N in KEY-N counts
    cores_per_chip: int
    chips_per_host: int  # per host VM of a multi-host slice
    single_host_max_chips: int
    devices_per_chip: int
    peak_bf16_tflops_per_chip: float
    hbm_gib_per_chip: float
    default_runtime_version: str
    max_chips: int
    multislice_max_chips: int | None  # None: no figure found
    zones: tuple[str, ...]
    libtpu_topology_prefix: str
    chip_config_name: str
    documented: tuple[str, ...]  # the shapes in Google's table
    topologies: tuple[str, ...]  # every shape podctl accepts, ascending by chips
    sources: dict[str, str]
    as_of: str
    # Which APIs make its slices ("cloud-tpu", "compute"), the first the default; the
    # Compute Engine machine type by chips per VM; why the Cloud TPU API refuses it, if it does.
    apis: tuple[str, ...] = ("cloud-tpu",)
    machine_types: tuple[tuple[int, str], ...] = ()
    not_on_cloud_tpu: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def on_cloud_tpu(self) -> bool:
        return "cloud-tpu" in self.apis

    @property
    def on_compute(self) -> bool:
        return "compute" in self.apis

    @property
    def peak_flops_per_chip(self) -> float:
        return self.peak_bf16_tflops_per_chip * 1e12

    def size_of(self, chips: int) -> int:
        """Chips -> the N of KEY-N."""
        return chips * self.cores_per_chip if self.size_unit == "cores" else chips

    def type_name(self, chips: int) -> str:
        return f"{self.key}-{self.size_of(chips)}"

    def shape_for_chips(self, chips: int) -> str | None:
        return next((t for t in self.topologies if parse_topology(t) == chips), None)

    def valid_sizes(self, documented_only: bool = False) -> list[int]:
        shapes = self.documented if documented_only else self.topologies
        return sorted(self.size_of(parse_topology(t)) for t in shapes)

    def slice_type(self, topology: str) -> SliceType:
        """A slice of this generation by its shape (as acceleratorConfig gives it)."""
        chips = parse_topology(topology)
        shape = self.shape_for_chips(chips)
        if shape is None or sorted(_sides(shape)) != sorted(_sides(topology)):
            raise InvalidSliceError(f"{topology!r} is not a {self.name} topology "
                                    f"(e.g. {', '.join(self.documented[:4])}).")
        return SliceType(self, self.size_of(chips), topology)


@dataclass(frozen=True)
class SliceType:
    """One slice shape, e.g. v5p-4096 = 2048 chips on 512 hosts, 8x16x16."""

    generation: Generation
    size: int  # the N of KEY-N
    topology: str

    @property
    def name(self) -> str:
        return f"{self.generation.key}-{self.size}"

    @property
    def chips(self) -> int:
        return parse_topology(self.topology)

    @property
    def cores(self) -> int:
        return self.chips * self.generation.cores_per_chip

    @property
    def hosts(self) -> int:
        """Host VMs: one holds a small slice whole; beyond, chips_per_host each."""
        if self.chips <= self.generation.single_host_max_chips:
            return 1
        return self.chips // self.generation.chips_per_host

    @property
    def chips_per_host(self) -> int:
        return self.chips // self.hosts

    @property
    def devices_per_host(self) -> int:
        """What jax.local_devices() sees on one host."""
        return self.chips_per_host * self.generation.devices_per_chip

    @property
    def machine_type(self) -> str | None:
        """The Compute Engine machine type of one VM of this slice (None: not served there)."""
        return dict(self.generation.machine_types).get(self.chips_per_host)

    @property
    def in_google_table(self) -> bool:
        return self.topology in self.generation.documented

    @property
    def libtpu_topology(self) -> str:
        """libtpu's topology name, e.g. "v5:8x8x16"."""
        return f"{self.generation.libtpu_topology_prefix}:{self.topology}"

    @property
    def chip_config_name(self) -> str:
        return self.generation.chip_config_name

    @property
    def chips_per_host_bounds(self) -> str:
        return _BOUNDS[self.chips_per_host]

    @property
    def process_bounds(self) -> str:
        """libtpu's TPU_PROCESS_BOUNDS: hosts along each axis (the topology over the chips
        on one host; a real v4-256, 4x4x8 with 2,2,1 per host, says 2,2,8)."""
        sides = [*_sides(self.topology), 1, 1][:3]
        per_host = [int(x) for x in self.chips_per_host_bounds.split(",")]
        return ",".join(str(max(1, side // per)) for side, per in zip(sides, per_host))

    @property
    def wrap(self) -> str:
        """The tpu-env's WRAP: ICI wraparound per axis, which only whole cubes of a 3D
        torus have (a real v4-256, 4x4x8, says true,true,true; smaller shapes and 2D
        generations false: unrecorded, podctl's reading of the TPU docs)."""
        sides = _sides(self.topology)
        whole = len(sides) == 3 and all(side % 4 == 0 for side in sides)
        return ",".join(["true" if whole else "false"] * 3)


@dataclass(frozen=True)
class MultiSlice:
    """K identical slices joined over the data-center network (multislice)."""

    slice_type: SliceType
    num_slices: int

    @property
    def chips(self) -> int:
        return self.slice_type.chips * self.num_slices

    @property
    def hosts(self) -> int:
        return self.slice_type.hosts * self.num_slices


def _sides(topology: str) -> list[int]:
    return [int(side) for side in topology.split("x")]


def parse_topology(topology: str) -> int:
    """'8x16x16' -> 2048 chips."""
    return math.prod(_sides(topology))


def _generation(key: str, record: dict[str, Any]) -> Generation:
    multi = record.get("multislice_max_chips")
    shapes = tuple(sorted(record["topologies"], key=parse_topology))
    return Generation(
        key=key, name=record["name"], api_type=record["api_type"], size_unit=record["size_unit"],
        cores_per_chip=record["cores_per_chip"], chips_per_host=record["chips_per_host"],
        single_host_max_chips=record["single_host_max_chips"],
        devices_per_chip=record["devices_per_chip"],
        peak_bf16_tflops_per_chip=float(record["peak_bf16_tflops_per_chip"]),
        hbm_gib_per_chip=float(record["hbm_gib_per_chip"]),
        default_runtime_version=record["default_runtime_version"], max_chips=record["max_chips"],
        multislice_max_chips=multi if isinstance(multi, int) else None,
        zones=tuple(record["zones"]), libtpu_topology_prefix=record["libtpu_topology_prefix"],
        chip_config_name=record["chip_config_name"], documented=tuple(record["documented"]),
        topologies=shapes, sources=dict(record.get("sources", {})), as_of=record["as_of"],
        apis=tuple(record.get("apis", ("cloud-tpu",))),
        machine_types=tuple(sorted((int(k), v) for k, v in record.get("machine_types", {}).items())),
        not_on_cloud_tpu=record.get("not_on_cloud_tpu", ""), aliases=tuple(record.get("aliases", ())))


@functools.lru_cache(maxsize=1)
def _records() -> dict[str, Any]:
    text = resources.files("podctl").joinpath("data/generations.toml").read_text()
    return tomllib.loads(text)


@functools.lru_cache(maxsize=1)
def generations() -> dict[str, Generation]:
    """Every generation podctl makes slices of (through the Cloud TPU API, Compute Engine
    or both: Generation.apis), by accelerator-type prefix."""
    return {key: _generation(key, record) for key, record in _records().items()}


def generation(key: str) -> Generation:
    """'v6e' -> its record; an unknown or unserved prefix raises InvalidSliceError."""
    found = generations().get(key)
    if found is None:
        raise InvalidSliceError(_unknown_family(key, key))
    return found


def generation_by_api_type(api_type: str) -> Generation | None:
    """'V6E' -> the v6e record (None for a type podctl does not know)."""
    return next((g for g in generations().values() if g.api_type == api_type), None)


def all_zones() -> tuple[str, ...]:
    """Every zone some served generation is offered in, in record order."""
    return tuple(dict.fromkeys(z for g in generations().values() for z in g.zones))


def examples() -> str:
    """'v5p-8, v6e-1, v5litepod-1, v4-8' for help texts: each generation's smallest."""
    return ", ".join(f"{g.key}-{g.valid_sizes(documented_only=True)[0]}"
                     for g in generations().values())


def _unknown_family(name: str, family: str) -> str:
    for gen in generations().values():
        if family in gen.aliases:
            return (f"{name!r}: {gen.name} is written {gen.key}-N "
                    f"(e.g. {gen.key}-{gen.valid_sizes(documented_only=True)[0]}).")
    served = ", ".join(f"{k}-N" for k in generations())
    return f"{name!r}: unknown TPU generation {family!r}; podctl makes {served}."


def _nearest(gen: Generation, size: int) -> str:
    """The sizes either side of SIZE, from Google's own table only."""
    valid = gen.valid_sizes(documented_only=True)
    below = [n for n in valid if n < size]
    above = [n for n in valid if n > size]
    near = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return ", ".join(f"{gen.key}-{n}" for n in near)


@functools.lru_cache(maxsize=4096)
def parse_slice(name: str) -> SliceType:
    """`KEY-N` -> SliceType; a bad name raises InvalidSliceError naming valid sizes.
    Cached (the catalog is read once; a SliceType is frozen): a list of 1,000 slices, or a
    queue tick over 1,000 entries, parses the same few names again and again."""
    text = name.strip().lower()
    match = _NAME.match(text)
    if not match:
        raise InvalidSliceError(
            f"{name!r} is not a slice type: expected GENERATION-N, e.g. {examples()} "
            "(N counts TensorCores for v5p and v4, chips for v6e and v5litepod).")
    family, size_text = match["family"], match["size"]
    if family not in generations():
        raise InvalidSliceError(_unknown_family(name, family))
    gen = generations()[family]
    unit = "TensorCores" if gen.size_unit == "cores" else "chips"
    smallest, largest = gen.valid_sizes()[0], gen.valid_sizes()[-1]
    if not (size_text.isascii() and size_text.isdigit()):  # not '１６' (int() reads it as 16)
        raise InvalidSliceError(f"{name!r}: N in {family}-N must be a whole number of {unit} "
                                f"(e.g. {family}-{smallest}, {family}-{largest}).")
    size = int(size_text)
    if size == 0:
        raise InvalidSliceError(f"{name!r}: a slice needs {unit}; the smallest is {family}-{smallest}.")
    if size > largest:
        multi = (f" (up to {gen.multislice_max_chips:,} chips in all)"
                 if gen.multislice_max_chips else "")
        raise InvalidSliceError(
            f"{name!r} is larger than the largest {gen.name} slice, {family}-{largest} "
            f"({gen.max_chips} chips); for more, join slices with --num-slices K{multi}.")
    per_chip = gen.cores_per_chip if gen.size_unit == "cores" else 1
    shape = gen.shape_for_chips(size // per_chip) if size % per_chip == 0 else None
    if shape is None:
        raise InvalidSliceError(
            f"{name!r} is not a {gen.name} size ({unit}; Google's table has "
            f"{', '.join(str(n) for n in gen.valid_sizes(documented_only=True))}); "
            f"nearest: {_nearest(gen, size)}.")
    return SliceType(gen, size, shape)


def parse_multislice(name: str, num_slices: int) -> MultiSlice:
    """`KEY-N` x K slices; refuses K < 1 and more than multislice's chip limit."""
    slice_type = parse_slice(name)
    if num_slices < 1:
        raise InvalidSliceError(f"--num-slices must be 1 or more, not {num_slices}.")
    multi = MultiSlice(slice_type, num_slices)
    limit = slice_type.generation.multislice_max_chips
    if limit is not None and multi.chips > limit:
        most = limit // slice_type.chips
        raise InvalidSliceError(
            f"{num_slices} x {slice_type.name} is {multi.chips:,} chips, over multislice's "
            f"{limit:,}; use at most {most} slices of {slice_type.name}.")
    return multi
