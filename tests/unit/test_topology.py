import math

import pytest

from podctl.base import topology
from podctl.base.errors import InvalidSliceError


def test_every_generation_the_api_serves_has_one_record():
    assert list(topology.generations()) == ["v5p", "v6e", "v5litepod", "v4", "tpu7x"]
    for gen in topology.generations().values():
        # the documented shapes are accepted shapes, one per chip count, within the largest
        assert set(gen.documented) <= set(gen.topologies)
        chips = [topology.parse_topology(t) for t in gen.topologies]
        assert len(set(chips)) == len(chips) and max(chips) == gen.max_chips
        assert gen.default_runtime_version and gen.zones and gen.sources and gen.as_of
        assert gen.peak_bf16_tflops_per_chip > 0 and gen.hbm_gib_per_chip > 0


# name, topology, chips, hosts, devices per host (what JAX sees on one host)
@pytest.mark.parametrize("name, topo, chips, hosts, devices", [
    ("v5p-8", "2x2x1", 4, 1, 4), ("v5p-16", "2x2x2", 8, 2, 4), ("v5p-32", "2x2x4", 16, 4, 4),
    ("v5p-64", "2x4x4", 32, 8, 4), ("v5p-128", "4x4x4", 64, 16, 4), ("v5p-256", "4x4x8", 128, 32, 4),
    ("v5p-512", "4x8x8", 256, 64, 4), ("v5p-1024", "8x8x8", 512, 128, 4),
    ("v5p-2048", "8x8x16", 1024, 256, 4), ("v5p-4096", "8x16x16", 2048, 512, 4),
    ("v5p-8192", "16x16x16", 4096, 1024, 4), ("v5p-12288", "16x16x24", 6144, 1536, 4),
    # v6e: N counts chips; up to 8 chips one VM holds them all, beyond 4 chips per VM
    ("v6e-1", "1x1", 1, 1, 1), ("v6e-4", "2x2", 4, 1, 4), ("v6e-8", "2x4", 8, 1, 8),
    ("v6e-16", "4x4", 16, 4, 4), ("v6e-32", "4x8", 32, 8, 4), ("v6e-64", "8x8", 64, 16, 4),
    ("v6e-128", "8x16", 128, 32, 4), ("v6e-256", "16x16", 256, 64, 4),
    ("v5litepod-1", "1x1", 1, 1, 1), ("v5litepod-4", "2x2", 4, 1, 4), ("v5litepod-8", "2x4", 8, 1, 8),
    ("v5litepod-16", "4x4", 16, 4, 4), ("v5litepod-256", "16x16", 256, 64, 4),
    ("v4-8", "2x2x1", 4, 1, 4), ("v4-16", "2x2x2", 8, 2, 4), ("v4-32", "2x2x4", 16, 4, 4),
    ("v4-128", "4x4x4", 64, 16, 4), ("v4-1536", "8x8x12", 768, 192, 4),
    ("v4-4096", "8x16x16", 2048, 512, 4),
    # TPU7x: N counts TensorCores (2 per chip), 4 chips per VM, each chip two JAX devices
    ("tpu7x-8", "2x2x1", 4, 1, 8), ("tpu7x-16", "2x2x2", 8, 2, 8), ("tpu7x-128", "4x4x4", 64, 16, 8),
])
def test_googles_tables(name, topo, chips, hosts, devices):
    st = topology.parse_slice(name)
    assert (st.name, st.topology, st.chips, st.hosts, st.devices_per_host, st.in_google_table) == \
        (name, topo, chips, hosts, devices, True)
    assert topology.parse_topology(st.topology) == st.chips
    assert st.hosts * st.chips_per_host == st.chips


@pytest.mark.parametrize("name, libtpu, config, bounds", [
    ("v5p-2048", "v5:8x8x16", "megacore", "2,2,1"),
    ("v6e-256", "v6e:16x16", "default", "2,2,1"),
    ("v6e-8", "v6e:2x4", "default", "2,4,1"),
    ("v6e-1", "v6e:1x1", "default", "1,1,1"),
    ("v5litepod-16", "v5e:4x4", "default", "2,2,1"),
    ("v4-8", "v4:2x2x1", "megacore", "2,2,1"),
])
def test_libtpu_names_for_preflight(name, libtpu, config, bounds):
    st = topology.parse_slice(name)
    assert (st.libtpu_topology, st.chip_config_name, st.chips_per_host_bounds) == (libtpu, config, bounds)


def test_shapes_beyond_googles_table_are_accepted_and_flagged():
    st = topology.parse_slice("v5p-384")
    assert (st.topology, st.chips, st.hosts, st.in_google_table) == ("4x4x12", 192, 48, False)
    assert topology.parse_slice("v4-384").in_google_table is False
    # 4x4x124 is in the per-chip-count list of Google's MaxText and xpk, not in the table:
    # accepted when asked for, never suggested
    assert topology.parse_slice("v5p-3968").in_google_table is False


@pytest.mark.parametrize("bad, words", [
    # every suggestion is a shape in Google's own table (v5p-3968 = 4x4x124 is not)
    ("v5p-4095", ["not a TPU v5p size", "nearest: v5p-2048, v5p-4096"]),
    ("v5p-7", ["not a TPU v5p size", "nearest: v5p-8"]),
    ("v5p-0", ["smallest is v5p-8"]),
    ("v5p-abc", ["whole number of TensorCores", "v5p-8"]),
    ("v5p-99999", ["largest", "v5p-12288", "--num-slices"]),
    ("v5p-48", ["nearest: v5p-32, v5p-64"]),
    ("v6e-12", ["not a TPU v6e", "nearest: v6e-8, v6e-16"]),
    ("v6e-512", ["largest", "v6e-256", "--num-slices"]),
    ("v6e-2", ["chips", "nearest: v6e-1, v6e-4"]),
    ("v5litepod-24", ["not a TPU v5e size", "nearest: v5litepod-16, v5litepod-32"]),
    ("v5litepod-0", ["smallest is v5litepod-1"]),
    ("v4-12", ["not a TPU v4 size", "nearest: v4-8, v4-16"]),
    ("v4-8192", ["largest", "v4-4096"]),
    ("v7x-8", ["TPU7x (Ironwood) is written tpu7x-N", "tpu7x-8"]),
    ("tpu7x-12", ["not a TPU7x (Ironwood) size", "nearest: tpu7x-8, tpu7x-16"]),
    ("v3-8", ["unknown TPU generation", "v5p-N, v6e-N, v5litepod-N, v4-N, tpu7x-N"]),
    ("banana", ["expected GENERATION-N", "v5p-8"]),
    ("", ["expected GENERATION-N"]),
])
def test_bad_names_say_what_to_do(bad, words):
    with pytest.raises(InvalidSliceError) as e:
        topology.parse_slice(bad)
    message = str(e.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_every_suggested_size_is_in_googles_table():
    for gen in topology.generations().values():
        documented = {gen.type_name(topology.parse_topology(t)) for t in gen.documented}
        largest = gen.valid_sizes()[-1]
        for size in range(1, largest, max(1, largest // 300)):
            try:
                topology.parse_slice(f"{gen.key}-{size}")
            except InvalidSliceError as e:
                text = str(e)
                if "nearest: " in text:
                    suggested = text.split("nearest: ")[1].rstrip(".").split(", ")
                    assert set(suggested) <= documented, (size, suggested)


def test_multislice_totals_and_limits():
    multi = topology.parse_multislice("v5p-4096", 4)
    assert (multi.chips, multi.hosts) == (8192, 2048)
    with pytest.raises(InvalidSliceError, match="at most 3 slices"):
        topology.parse_multislice("v5p-12288", 4)
    with pytest.raises(InvalidSliceError, match="1 or more"):
        topology.parse_multislice("v5p-8", 0)
    assert topology.parse_multislice("v6e-256", 4).hosts == 256  # no limit found: none applied


def test_valid_sizes_are_sorted_and_bounded():
    v5p = topology.generation("v5p")
    sizes = v5p.valid_sizes()
    assert sizes[:5] == [8, 16, 32, 64, 128]
    assert sizes[-1] == 12288 and sizes == sorted(sizes)
    assert topology.generation("v6e").valid_sizes() == [1, 4, 8, 16, 32, 64, 128, 256]


def test_a_shape_given_as_accelerator_config():
    v6e = topology.generation_by_api_type("V6E")
    assert v6e is not None and v6e.slice_type("4x4").name == "v6e-16"
    assert topology.generation("v5p").slice_type("16x8x8").name == "v5p-2048"  # sides in any order
    with pytest.raises(InvalidSliceError):
        v6e.slice_type("3x3")
    assert topology.generation_by_api_type("V2") is None
    assert math.isclose(topology.generation("v5p").peak_flops_per_chip, 459e12)


def test_which_api_serves_each_generation_and_its_machine_types():
    """TPU7x only through Compute Engine (a VM or a MIG of tpu7x-standard-4t); v5p and v6e
    through both; the older ones through the Cloud TPU API only."""
    gens = topology.generations()
    assert gens["tpu7x"].apis == ("compute",) and not gens["tpu7x"].on_cloud_tpu
    assert "GKE or Compute Engine" in gens["tpu7x"].not_on_cloud_tpu
    assert gens["v5p"].apis == ("cloud-tpu", "compute") and gens["v4"].apis == ("cloud-tpu",)
    assert topology.parse_slice("tpu7x-32").machine_type == "tpu7x-standard-4t"
    assert topology.parse_slice("v5p-16").machine_type == "ct5p-hightpu-4t"
    assert topology.parse_slice("v6e-8").machine_type == "ct6e-standard-8t"
    assert topology.parse_slice("v4-8").machine_type is None
