"""The names of a Compute Engine slice's resources, and the paths podctl's steps give a
provider, parsed (no client import: tests/unit/test_compute_names.py holds them).

Slice NAME is the MIG NAME, made from template NAME-tpl under workload policy NAME-topo.
"""

from __future__ import annotations

import re
import zlib

from podctl.base.errors import InvalidValueError
from podctl.cloud.names import MAX_NAME


def parse_parent(parent: str) -> tuple[str, str]:
    """'projects/P/locations/Z' -> (P, Z); what every provider method is given."""
    parts = parent.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "locations" or not parts[1] or not parts[3]:
        raise InvalidValueError(f"{parent!r} is not projects/PROJECT/locations/ZONE.")
    return parts[1], parts[3]


def parse_node(node_name: str) -> tuple[str, str, str]:
    """'projects/P/locations/Z/nodes/N' (how the steps name a slice's node) -> (P, Z, N)."""
    parent, sep, name = node_name.rpartition("/nodes/")
    if not sep or not name or "/" in name:
        raise InvalidValueError(f"{node_name!r} is not projects/PROJECT/locations/ZONE/nodes/NAME.")
    project, zone = parse_parent(parent)
    return project, zone, name


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def derived(name: str, suffix: str) -> str:
    """NAME-SUFFIX within Compute Engine's 63 characters (a long NAME is cut and a hash of
    it added, so two long names do not meet)."""
    whole = f"{name}-{suffix}"
    if len(whole) <= MAX_NAME:
        return whole
    digest = f"{zlib.crc32(name.encode()):08x}"
    return f"{name[:MAX_NAME - len(suffix) - len(digest) - 2]}-{digest}-{suffix}"


def template_name(name: str) -> str:
    return derived(name, "tpl")


def policy_name(name: str) -> str:
    return derived(name, "topo")


# A podctl template's description names its slice and zone: how `ls` and gc find a template
# left without its MIG, and how the provider seam's lister (providers/both_apis.py) sees,
# without Compute Engine's client, that a zone holds something of podctl's there.
_TEMPLATE_DESCRIPTION = re.compile(r"podctl slice (?P<name>[a-z][-a-z0-9]*) in (?P<zone>[a-z0-9-]+): .*")


def template_description(name: str, zone: str, what: str) -> str:
    return f"podctl slice {name} in {zone}: {what}"


def template_slice(description: str) -> tuple[str, str] | None:
    """A podctl template's description -> (slice name, zone); None for any other."""
    found = _TEMPLATE_DESCRIPTION.fullmatch(description or "")
    return (found["name"], found["zone"]) if found else None


def resize_request_name(name: str) -> str:
    """The flex-start resize request of slice NAME (a sub-resource of its MIG)."""
    return derived(name, "flex")


def operation_path(project: str, scope: str, name: str) -> str:
    """A Compute Engine operation as one name another process can follow (the queue keeps a
    create's): 'projects/P/zones/Z/operations/N' (or regions/R, or global)."""
    return f"projects/{project}/{scope}/operations/{name}"


_OPERATION_PATH = re.compile(r"projects/([^/]+)/((?:zones|regions)/[^/]+|global)/operations/([^/]+)")


def parse_operation(path: str) -> tuple[str, str, str] | None:
    """operation_path's name -> (project, scope, name); None for any other (a Cloud TPU
    operation is 'projects/P/locations/Z/operations/N')."""
    found = _OPERATION_PATH.fullmatch(path)
    return (found[1], found[2], found[3]) if found else None
