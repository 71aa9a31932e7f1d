import pytest

from podctl import topology
from podctl.errors import InvalidSliceError


@pytest.mark.parametrize("name, topo, chips, hosts", [
    ("v5p-8", "2x2x1", 4, 1), ("v5p-16", "2x2x2", 8, 2), ("v5p-32", "2x2x4", 16, 4),
    ("v5p-64", "2x4x4", 32, 8), ("v5p-128", "4x4x4", 64, 16), ("v5p-256", "4x4x8", 128, 32),
    ("v5p-512", "4x8x8", 256, 64), ("v5p-1024", "8x8x8", 512, 128),
    ("v5p-2048", "8x8x16", 1024, 256), ("v5p-4096", "8x16x16", 2048, 512),
    ("v5p-8192", "16x16x16", 4096, 1024), ("v5p-12288", "16x16x24", 6144, 1536),
])
def test_google_table(name, topo, chips, hosts):
    st = topology.parse_slice(name)
    assert (st.name, st.topology, st.chips, st.hosts, st.in_google_table) == (name, topo, chips, hosts, True)
    assert topology.parse_topology(st.topology) == st.chips


def test_sizes_beyond_the_table_are_accepted_and_flagged():
    st = topology.parse_slice("v5p-384")
    assert (st.topology, st.chips, st.hosts, st.in_google_table) == ("4x4x12", 192, 48, False)
    # the cube rule reproduces every table entry beyond one cube
    for name, topo in topology.GOOGLE_TABLE.items():
        chips = topology.parse_slice(name).chips
        if chips >= 64:
            assert topology.parse_topology(topology._cube_topology(chips)) == chips


@pytest.mark.parametrize("bad, words", [
    ("v5p-4095", ["not a v5p size", "v5p-3968", "v5p-4096"]),
    ("v5p-7", ["not a v5p size", "v5p-8"]),
    ("v5p-0", ["smallest is v5p-8"]),
    ("v5p-abc", ["whole number", "v5p-8"]),
    ("v4-8", ["v5p only"]),
    ("v5p-99999", ["largest", "v5p-12288", "--num-slices"]),
    ("v5p-48", ["nearest: v5p-32, v5p-64"]),
    ("banana", ["expected v5p-N"]),
    ("", ["expected v5p-N"]),
])
def test_bad_names_say_what_to_do(bad, words):
    with pytest.raises(InvalidSliceError) as e:
        topology.parse_slice(bad)
    message = str(e.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_multislice_totals_and_limits():
    multi = topology.parse_multislice("v5p-4096", 4)
    assert (multi.chips, multi.hosts) == (8192, 2048)
    with pytest.raises(InvalidSliceError, match="at most 3 slices"):
        topology.parse_multislice("v5p-12288", 4)
    with pytest.raises(InvalidSliceError, match="1 or more"):
        topology.parse_multislice("v5p-8", 0)


def test_valid_sizes_are_sorted_and_bounded():
    sizes = topology.valid_core_counts()
    assert sizes[:5] == [8, 16, 32, 64, 128]
    assert sizes[-1] == 12288 and sizes == sorted(sizes)
