"""OS Login (issue 23, item 5): with `enable-oslogin=TRUE` in the project's metadata the
hosts ignore `ssh-keys` and take only keys imported through the OS Login API, for the
profile's POSIX username; podctl sees it and logs in that way, as gcloud does.

The CLI cases share one v5p-8 on one fake daemon (CI time); each sets the switch it needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from podctl.cloud.oslogin import OsLogin, enabled
from podctl.base.errors import PermissionDeniedError
from podctl.fake.admin.admin_client import FakeAdmin
from podctl.fake.api.oslogin import FAKE_ACCOUNT, posix_username
from podctl.base.settings import FAKE_ACCOUNT as CLIENT_ACCOUNT
from tests.conftest import Podctl, _share_env_signing_key, assert_one_line_error, slice_on_daemon


def test_project_metadata_and_the_nodes_own_switch():
    from google.cloud import tpu_v2

    from podctl.cloud.convert import node_info
    from podctl.fake.api import oslogin
    from podctl.fake.world import World

    node = tpu_v2.Node(name="projects/p/locations/z/nodes/n", accelerator_type="v5p-8",
                       metadata={"enable-oslogin": "FALSE", "ssh-keys": "podctl:ssh-ed25519 AAAA podctl"})
    assert node_info(node).os_login == "FALSE"
    world = World()
    oslogin.set_enabled(world, "p", True)
    assert oslogin.enabled(world, "p", {}) and not oslogin.enabled(world, "other", {})
    assert not oslogin.enabled(world, "p", {"enable-oslogin": "false"})  # the fake's hosts too
    oslogin.set_enabled(world, "p", False)
    assert not oslogin.enabled(world, "p", {}) and oslogin.enabled(world, "p", {"enable-oslogin": "True"})
    assert enabled({"enable-oslogin": "true"}, [None])
    assert not enabled({"enable-oslogin": "TRUE"}, ["FALSE"])  # the node's own wins
    assert enabled({}, [None, "True"])
    assert not enabled({"enable-oslogin": "FALSE"}, [])
    assert posix_username("Jane.Doe@example.com") == "jane_doe_example_com"
    assert posix_username("ci@proj.iam.gserviceaccount.com").startswith("sa_")


def test_a_node_without_its_own_value_follows_the_project_whatever_a_sibling_slice_sets():
    """Multislice: one node says FALSE, the other sets nothing under a project with OS Login
    on. That other node ignores ssh-keys (as the fake's hosts do), so podctl must log in
    through OS Login; it used to let the one node's FALSE turn it off for the whole slice."""
    from podctl.fake.api import oslogin
    from podctl.fake.world import World

    world = World()
    oslogin.set_enabled(world, "p", True)
    assert oslogin.enabled(world, "p", {}) and not oslogin.enabled(world, "p", {"enable-oslogin": "FALSE"})
    assert enabled({"enable-oslogin": "TRUE"}, [None, "FALSE"])
    assert enabled({"enable-oslogin": "TRUE"}, ["FALSE", None])
    assert not enabled({"enable-oslogin": "TRUE"}, ["FALSE", "false"])
    assert not enabled({}, [None, "FALSE"])


def test_a_slice_whose_nodes_disagree_on_os_login_is_refused_in_one_line_naming_them():
    """One login user serves the whole fleet: where one node's hosts take only OS Login's
    user and another's only podctl's metadata key, no user gets in everywhere; say so
    before connecting instead of a host's refusal that blames a role."""
    import asyncio

    from types import SimpleNamespace

    from podctl.cloud.oslogin import login_user
    from podctl.base.errors import ConfigError

    class Client:
        def project_metadata(self, project):
            return {"enable-oslogin": "TRUE"}

        def import_key(self, project, key):
            return "jane_example_com"

    def sliced(*own):
        nodes = tuple(SimpleNamespace(name=f"ms-{i}", os_login=v) for i, v in enumerate(own))
        return SimpleNamespace(name="ms", project="p", nodes=nodes)  # a SliceInfo's fields used

    with pytest.raises(ConfigError) as mixed:
        asyncio.run(login_user(Client(), sliced(None, "FALSE"), "ssh-ed25519 AAAA"))
    assert "\n" not in str(mixed.value)
    assert "mixes OS Login on (ms-0) and off (ms-1" in str(mixed.value)
    assert asyncio.run(login_user(Client(), sliced(None, "true"), "k")) == "jane_example_com"
    assert asyncio.run(login_user(Client(), sliced("FALSE", "false"), "k")) is None

