"""A Compute Engine slice's resource names and the paths the steps hand a provider
(cloud/compute_names.py): parsed once, refused in one line when they are not paths."""

from __future__ import annotations

import pytest

from podctl.base.errors import InvalidValueError
from podctl.cloud import compute_names as names


def test_parents_and_node_paths_parse_into_project_zone_and_name():
    assert names.parse_parent("projects/p-1/locations/us-central1-c") == ("p-1", "us-central1-c")
    assert names.parse_node("projects/p-1/locations/us-central1-c/nodes/iw16") == ("p-1", "us-central1-c", "iw16")
    assert names.region_of("us-central1-c") == "us-central1"


@pytest.mark.parametrize("bad", ["projects/p/zones/z", "projects//locations/z", "p/locations/z", ""])
def test_a_parent_that_is_no_path_is_refused(bad):
    with pytest.raises(InvalidValueError, match="projects/PROJECT/locations/ZONE"):
        names.parse_parent(bad)


@pytest.mark.parametrize("bad", ["projects/p/locations/z", "projects/p/locations/z/nodes/",
                                 "projects/p/locations/z/nodes/a/b"])
def test_a_node_path_that_is_no_path_is_refused(bad):
    with pytest.raises(InvalidValueError):
        names.parse_node(bad)


def test_derived_names_fit_compute_engines_63_characters_and_keep_long_names_apart():
    assert (names.template_name("iw16"), names.policy_name("iw16")) == ("iw16-tpl", "iw16-topo")
    long_a, long_b = "a" * 60 + "-x", "a" * 60 + "-y"
    made = {names.template_name(long_a), names.template_name(long_b)}
    assert len(made) == 2 and all(len(n) <= 63 and n.endswith("-tpl") for n in made)


def test_an_operation_path_names_its_scope_and_a_cloud_tpu_one_is_not_compute_engines():
    for scope in ("zones/us-central1-c", "regions/us-central1", "global"):
        path = names.operation_path("p-1", scope, "operation-17-ab")
        assert names.parse_operation(path) == ("p-1", scope, "operation-17-ab")
    assert names.parse_operation("projects/p-1/locations/us-central1-c/operations/op-1") is None
