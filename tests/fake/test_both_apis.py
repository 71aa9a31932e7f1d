"""Both APIs as one provider (cloud/providers/both_apis.py), where no --api was chosen: a
slice is found, listed and deleted wherever it was made; a name on both APIs is refused
asking for --api; and Compute Engine's client is not even opened in a zone without a slice
of its (the in-process fake's Cloud TPU API and Compute Engine, on its one server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podctl.base._sync import run_sync
from podctl.base.errors import InvalidValueError, NotFoundError
from podctl.base.settings import Settings
from podctl.cloud import up as cloud_up
from podctl.cloud.connect import api_for_endpoint, compute_engine_at
from podctl.cloud.firewall import ComputeReader
from podctl.cloud.providers.both_apis import BothApis
from podctl.cloud.sshkey import ensure_ssh_key
from podctl.cloud.types import SliceSpec
from podctl.fake.api.server import fake_cloud
from tests.conftest import FAST, PARENT, PROJECT, ZONE


def _up(provider, name: str, slice_type: str = "v5p-8") -> None:
    request = cloud_up.UpRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_type),
                                 ssh_keys=ensure_ssh_key(Path(os.environ["PODCTL_CONFIG_DIR"])).metadata_entry,
                                 owner="alice", policy=FAST)
    run_sync(cloud_up.up(provider, request))


def _both(tmp_path: Path, tpu_url: str, compute_url: str) -> BothApis:
    """Both APIs as `Session.open` makes them where no --api is chosen, on the fakes at
    TPU_URL (the Cloud TPU API) and COMPUTE_URL (Compute Engine); `opened` counts the
    openings of Compute Engine's client."""
    settings = Settings(backend="fake", project=PROJECT, zone=ZONE, config_dir=tmp_path / "config",
                        state_dir=tmp_path / "state", oslogin=False)
    opened: list = []

    def open_compute():
        opened.append(compute_engine_at(compute_url))
        return opened[-1]

    both = BothApis(settings, api_for_endpoint(tpu_url), open_compute, lambda: ComputeReader(compute_url))
    both.opened = opened  # type: ignore[attr-defined]
    return both


def test_a_slice_is_found_listed_and_deleted_on_whichever_api_made_it(fake, tmp_path):
    fake.admin.set_timings(time_scale=1e4)
    both = _both(tmp_path, fake.tpu_api_url, fake.tpu_api_url)
    try:
        _up(both, "tpu-made")  # a v5p with no --api: the Cloud TPU API's
        assert run_sync(both.describe(PARENT, "tpu-made")).api == "cloud-tpu"
        assert [s.name for s in run_sync(both.list_slices(PARENT))] == ["tpu-made"]
        assert run_sync(both.find(PARENT, "nowhere")) is None
        with pytest.raises(NotFoundError, match="nowhere"):
            run_sync(both.describe(PARENT, "nowhere"))
        assert both.opened == []  # no slice of Compute Engine's met: its client never loaded

        compute = compute_engine_at(fake.tpu_api_url)
        try:
            _up(compute, "ce-made")  # last week's `up --api compute`
        finally:
            compute.close()
        info = run_sync(both.describe(PARENT, "ce-made"))
        assert (info.api, info.accelerator_type, info.state) == ("compute", "v5p-8", "READY")
        listed = [(s.name, s.api) for s in run_sync(both.list_slices(PARENT))]
        assert listed == [("ce-made", "compute"), ("tpu-made", "cloud-tpu")]

        # `down` of each through the one provider: the MIG with its template, and the node
        for found in run_sync(both.list_slices(PARENT)):
            run_sync(both.delete(PARENT, found))
            run_sync(both.wait_deleted(PARENT, found.name, policy=FAST))
        assert run_sync(both.list_slices(PARENT)) == []

        # made again by this client (recovery's `up` of a slice that was deleted under its
        # run): through the API it was on, not the Cloud TPU API that makes v5p by default
        _up(both, "ce-made")
        assert run_sync(both.describe(PARENT, "ce-made")).api == "compute"
        run_sync(both.delete(PARENT, run_sync(both.describe(PARENT, "ce-made"))))
    finally:
        both.close()


def test_a_name_on_both_apis_is_refused_asking_for_api(fake, tmp_path):
    """The fake keeps a MIG's VMs beside its nodes, so one name cannot be on both there:
    a second fake serves Compute Engine, as Google's two APIs keep their own names."""
    fake.admin.set_timings(time_scale=1e4)
    with fake_cloud() as other:
        other.admin.set_timings(time_scale=1e4)
        both = _both(tmp_path, fake.tpu_api_url, other.tpu_api_url)
        compute = compute_engine_at(other.tpu_api_url)
        try:
            _up(both.tpu, "twin")  # made by two other clients: this one has met neither
            _up(compute, "twin")
            with pytest.raises(InvalidValueError, match="both the Cloud TPU API and Compute Engine.*--api"):
                run_sync(both.describe(PARENT, "twin"))
            assert [(s.name, s.api) for s in run_sync(both.list_slices(PARENT))] == \
                [("twin", "cloud-tpu"), ("twin", "compute")]
            run_sync(compute.delete(PARENT, run_sync(compute.describe(PARENT, "twin"))))
            run_sync(both.delete(PARENT, run_sync(both.describe(PARENT, "twin"))))
            run_sync(both.wait_deleted(PARENT, "twin", policy=FAST))
        finally:
            both.close()
            compute.close()
        assert not any(other.admin.resources().values())
