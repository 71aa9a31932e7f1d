"""The v5p slice catalog: `v5p-N` -> TensorCores, chips, hosts and ICI topology.

A v5p chip has 2 TensorCores and every host VM carries 4 chips, so `v5p-N` has
N/2 chips on N/8 hosts. Google's table lists the common sizes; beyond one 4x4x4
cube any AxBxC torus with each side a multiple of 4 is accepted (as xpk does),
and such a size is flagged as "not in Google's table" rather than refused.

This module is shared data: the fake cloud imports it too, so it must import
nothing from podctl but `errors`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from podctl.errors import InvalidSliceError

CORES_PER_CHIP = 2
CHIPS_PER_HOST = 4
PEAK_BF16_TFLOPS_PER_CHIP = 459.0
HBM_GIB_PER_CHIP = 95
MAX_SLICE_CHIPS = 6144
MAX_MULTISLICE_CHIPS = 18432
DEFAULT_RUNTIME_VERSION = "v2-alpha-tpuv5"
V5P_ZONES = ("us-central1-a", "us-east5-a", "us-east5-b", "us-east5-c", "us-south1-a")

# Google's table (plus v5p-32 from xpk's defaults): accelerator type -> topology.
GOOGLE_TABLE: dict[str, str] = {
    "v5p-8": "2x2x1",
    "v5p-16": "2x2x2",
    "v5p-32": "2x2x4",
    "v5p-64": "2x4x4",
    "v5p-128": "4x4x4",
    "v5p-256": "4x4x8",
    "v5p-512": "4x8x8",
    "v5p-1024": "8x8x8",
    "v5p-2048": "8x8x16",
    "v5p-4096": "8x16x16",
    "v5p-8192": "16x16x16",
    "v5p-12288": "16x16x24",
}
# Below one cube only these shapes exist.
_SUB_CUBE_CHIPS = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4"}
_NAME = re.compile(r"^(?P<family>[a-z0-9]+)-(?P<cores>[^-]+)$")


@dataclass(frozen=True)
class SliceType:
    """One v5p slice shape, e.g. v5p-4096 = 2048 chips on 512 hosts, 8x16x16."""

    cores: int
    topology: str

    @property
    def name(self) -> str:
        return f"v5p-{self.cores}"

    @property
    def chips(self) -> int:
        return self.cores // CORES_PER_CHIP

    @property
    def hosts(self) -> int:
        return self.chips // CHIPS_PER_HOST

    @property
    def in_google_table(self) -> bool:
        return self.name in GOOGLE_TABLE


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


def _cube_topology(chips: int) -> str | None:
    """The most cubic AxBxC (sides multiples of 4, A<=B<=C) with A*B*C == chips."""
    if chips % 64:
        return None
    units = chips // 64  # the product of the sides divided by 4 each
    best: tuple[int, int, int] | None = None
    for a in range(1, round(units ** (1 / 3)) + 2):
        if units % a:
            continue
        rest = units // a
        for b in range(a, math.isqrt(rest) + 1):
            if rest % b:
                continue
            c = rest // b
            if c < b:
                continue
            if best is None or c - a < best[2] - best[0]:
                best = (a, b, c)
    if best is None:
        return None
    return "x".join(str(4 * side) for side in best)


def topology_for_chips(chips: int) -> str | None:
    """The ICI topology of a slice with this many chips, or None if none exists."""
    if chips in _SUB_CUBE_CHIPS:
        return _SUB_CUBE_CHIPS[chips]
    if chips <= 0 or chips > MAX_SLICE_CHIPS:
        return None
    table = GOOGLE_TABLE.get(f"v5p-{chips * CORES_PER_CHIP}")
    return table or _cube_topology(chips)


def valid_core_counts() -> list[int]:
    """Every valid N of `v5p-N`, ascending."""
    chips = sorted(set(_SUB_CUBE_CHIPS) | set(range(64, MAX_SLICE_CHIPS + 1, 64)))
    return [c * CORES_PER_CHIP for c in chips if topology_for_chips(c)]


def _nearest(cores: int) -> str:
    valid = valid_core_counts()
    below = [n for n in valid if n < cores]
    above = [n for n in valid if n > cores]
    near = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return ", ".join(f"v5p-{n}" for n in near)


def parse_slice(name: str) -> SliceType:
    """`v5p-N` -> SliceType; a bad name raises InvalidSliceError naming valid sizes."""
    text = name.strip().lower()
    match = _NAME.match(text)
    if not match:
        raise InvalidSliceError(
            f"{name!r} is not a slice type: expected v5p-N, N the TensorCore count "
            "(e.g. v5p-8, v5p-4096)."
        )
    family, cores_text = match["family"], match["cores"]
    if family != "v5p":
        raise InvalidSliceError(
            f"{name!r}: podctl supports TPU v5p only for now (e.g. v5p-8, v5p-4096)."
        )
    if not cores_text.isdigit():
        raise InvalidSliceError(
            f"{name!r}: N in v5p-N must be a whole number of TensorCores (e.g. v5p-8, v5p-4096)."
        )
    cores = int(cores_text)
    largest = max(valid_core_counts())
    if cores == 0:
        raise InvalidSliceError(f"{name!r}: a slice needs TensorCores; the smallest is v5p-8.")
    if cores > largest:
        raise InvalidSliceError(
            f"{name!r} is larger than the largest v5p slice, v5p-{largest} "
            f"({MAX_SLICE_CHIPS} chips); for more, join slices with --num-slices K "
            f"(up to {MAX_MULTISLICE_CHIPS:,} chips in all)."
        )
    topology = topology_for_chips(cores // CORES_PER_CHIP) if cores % CORES_PER_CHIP == 0 else None
    if topology is None:
        raise InvalidSliceError(
            f"{name!r} is not a v5p size (N must be 8, 16, 32, 64 or a multiple of 128 "
            f"up to {largest}); nearest: {_nearest(cores)}."
        )
    return SliceType(cores=cores, topology=topology)


def parse_multislice(name: str, num_slices: int) -> MultiSlice:
    """`v5p-N` x K slices; refuses K < 1 and more than multislice's chip limit."""
    slice_type = parse_slice(name)
    if num_slices < 1:
        raise InvalidSliceError(f"--num-slices must be 1 or more, not {num_slices}.")
    multi = MultiSlice(slice_type, num_slices)
    if multi.chips > MAX_MULTISLICE_CHIPS:
        most = MAX_MULTISLICE_CHIPS // slice_type.chips
        raise InvalidSliceError(
            f"{num_slices} x {slice_type.name} is {multi.chips:,} chips, over multislice's "
            f"{MAX_MULTISLICE_CHIPS:,}; use at most {most} slices of {slice_type.name}."
        )
    return multi


def parse_topology(topology: str) -> int:
    """'8x16x16' -> 2048 chips."""
    return math.prod(int(side) for side in topology.split("x"))
