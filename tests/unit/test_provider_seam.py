"""The slice-provider seam (cloud/provider.py): a provider is one module and one line in
PROVIDERS. A stand-in that keeps slices in memory (memory_provider.py), registered by that
one line and chosen by PODCTL_PROVIDER, serves `podctl up`, `status` and `down`: nothing
above cloud/ names the Cloud TPU client (and this tier refuses every socket, so no call
could have gone to Google or to the fake)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from podctl.cloud import provider
from tests.conftest import assert_one_line_error
from tests.unit import memory_provider

Invoke = Callable[..., subprocess.CompletedProcess]
PARENT = "projects/seam-project/locations/us-east5-a"


@pytest.fixture
def podctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    """`podctl ARGS` in this process, on Google Cloud's settings (no fake cloud), with the
    stand-in registered: the one registry line a new provider adds."""
    from click.testing import CliRunner

    from podctl.cli.main import cli

    monkeypatch.setitem(provider.PROVIDERS, "memory", "tests.unit.memory_provider:open_memory")
    monkeypatch.setattr(memory_provider, "WORLD", {})
    env: dict[str, str | None] = {k: None for k in os.environ
                                  if k.startswith(("CLOUDSDK_", "PODCTL_", "GOOGLE_"))}
    env.update({"PODCTL_PROVIDER": "memory", "PODCTL_BACKEND": "gcp",
                "CLOUDSDK_CORE_PROJECT": "seam-project", "CLOUDSDK_COMPUTE_ZONE": "us-east5-a",
                "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "HOME": str(tmp_path / "home"),
                "PODCTL_CONFIG_DIR": str(tmp_path / "config"), "PODCTL_STATE_DIR": str(tmp_path / "state")})

    def invoke(*args: str, provider_name: str = "memory") -> subprocess.CompletedProcess:
        result = CliRunner().invoke(cli, list(args), prog_name="podctl",
                                    env={**env, "PODCTL_PROVIDER": provider_name})
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)

    return invoke


def test_a_provider_of_one_module_and_one_registry_line_serves_up_status_down(podctl: Invoke):
    made = podctl("up", "--slice", "v5p-16", "--name", "seam-1", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["created"] is True
    held = memory_provider.WORLD[PARENT]["seam-1"]
    assert held.ready and held.managed and len(held.hosts) == 2  # v5p-16: two hosts

    again = podctl("up", "--slice", "v5p-16", "--name", "seam-1", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False, again.stderr

    shown = podctl("status", "seam-1", "--json")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert (status["name"], status["state"], status["hosts"]) == ("seam-1", "READY", 2)

    gone = podctl("down", "seam-1", "--yes")
    assert gone.returncode == 0, gone.stderr
    assert "deleted seam-1" in gone.stdout
    assert memory_provider.WORLD[PARENT] == {}  # nothing left billing

    assert_one_line_error(podctl("status", "seam-1"), 1, "no slice named 'seam-1'")


def test_a_provider_not_registered_is_refused_in_one_line(podctl: Invoke):
    refused = podctl("status", "seam-1", provider_name="compute-engine")
    assert_one_line_error(refused, 2, "PODCTL_PROVIDER='compute-engine'", "cloud-tpu", "memory")


def test_the_api_setting_and_the_slice_type_choose_the_provider(monkeypatch: pytest.MonkeyPatch):
    """--api (Settings.api) names a provider; with none, a generation only Compute Engine
    serves (TPU7x) chooses it by itself; PODCTL_PROVIDER wins over both."""
    import dataclasses

    from podctl.base import settings as settings_mod
    from podctl.base import topology

    monkeypatch.delenv("PODCTL_PROVIDER", raising=False)
    assert provider.provider_name({}, api="compute") == "compute"
    assert provider.provider_name({}, api="tpu") == provider.provider_name({}) == "cloud-tpu"
    assert provider.provider_name({"PODCTL_PROVIDER": "cloud-tpu"}, api="compute") == "cloud-tpu"
    plain = settings_mod.Settings(backend="gcp", project="seam-project", zone="us-central1-c",
                                  config_dir=Path("/nonexistent"), state_dir=Path("/nonexistent"))
    assert provider.api_for(plain, topology.parse_slice("tpu7x-16")).api == "compute"
    assert provider.api_for(plain, topology.parse_slice("v5p-16")).api is None
    chosen = dataclasses.replace(plain, api="tpu")
    with pytest.raises(Exception, match="tpu7x-16: the Cloud TPU API does not serve TPU7x"):
        provider.api_for(chosen, topology.parse_slice("tpu7x-16"))  # before anything is started
    with pytest.raises(Exception, match="unknown api 'gke'"):
        settings_mod.resolve(backend="fake", api="gke", env={})


def test_where_no_api_is_chosen_both_are_opened_as_one(monkeypatch):
    """No PODCTL_PROVIDER, --api, PODCTL_API or podctl.toml api: `both` (a slice found on
    either API: providers/both_apis.py); any choice opens the chosen provider alone."""
    import dataclasses

    from podctl.base import settings as settings_mod

    opened: list[str] = []  # the providers' names, in the order opened (each a stand-in here)
    monkeypatch.setattr(provider, "opener", lambda name: (opened.append(name), memory_provider.open_memory)[1])
    plain = settings_mod.Settings(backend="gcp", project="seam-project", zone="us-central1-c",
                                  config_dir=Path("/nonexistent"), state_dir=Path("/nonexistent"))
    provider.open_provider(plain, env={})
    provider.open_provider(dataclasses.replace(plain, api="compute"), env={})
    provider.open_provider(dataclasses.replace(plain, api="tpu"), env={})
    provider.open_provider(plain, env={"PODCTL_PROVIDER": "cloud-tpu"})
    assert opened == ["both", "compute", "cloud-tpu", "cloud-tpu"]
