"""Every generation through the CLI on the fake, as a user types it: `podctl up --slice
v6e-256` works as v5p does, in a zone that offers v6e."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cli_in_process import podctl_here, shared_daemon
from tests.conftest import Podctl, assert_one_line_error, fake_booting_after_the_test


def test_lifecycle_v6e_256_through_the_cli(podctl):
    fake_booting_after_the_test(podctl)  # its 64 hosts' watchers: none of this reaches them
    up = podctl.json("--backend", "fake", "up", "--slice", "v6e-256", "--zone", "us-east5-b")
    assert up["created"] and up["ready"] and up["state"] == "READY"
    # 256 chips on 64 host VMs of 4 chips (generations.toml), the v6e runtime by default
    assert (up["hosts"], up["topology"], up["chips"]) == (64, "16x16", 256)
    assert up["accelerator_type"] == "v6e-256" and up["runtime_version"] == "v2-alpha-tpuv6e"
    name = up["name"]
    status = podctl("--backend", "fake", "status", name, "--zone", "us-east5-b").stdout
    assert "256 on 64 hosts" in status
    cost = podctl("--backend", "fake", "cost", name, "--zone", "us-east5-b", "--price", "2.5",
                  "--json")
    assert '"usd_per_hour": 640.0' in cost.stdout  # 256 chips x $2.50
    podctl_here(podctl.tmp, "--backend", "fake", "down", name, "--yes", "--zone", "us-east5-b",
                env=podctl.env, check=True)  # in this process: `down` is test_cli's
    assert podctl_here(podctl.tmp, "--backend", "fake", "ls", "--zone", "us-east5-b", env=podctl.env,
                       check=True).stdout.startswith("no slices in us-east5-b")
    # a mistake of the kind below, through a `podctl` process as a user types it
    assert_one_line_error(podctl("--backend", "fake", "up", "--slice", "v6e-12", "--zone", "us-east5-b",
                                 check=False), 2, "nearest: v6e-8, v6e-16")


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One fake daemon for every refusal below (tests/cli_in_process.py, shared_daemon);
    its end checks that none of them made anything billable."""
    with shared_daemon(tmp_path_factory.mktemp("refusals")) as cli:
        yield cli


@pytest.mark.parametrize("args, words", [
    # us-central1-a offers v5p and v5e but not v6e (the fake's default, us-east5-a, has both)
    (["--slice", "v6e-16", "--zone", "us-central1-a"], ["zone 'us-central1-a' offers no TPU v6e",
                                                        "us-central1-b"]),
    (["--slice", "v6e-12", "--zone", "us-east5-b"], ["nearest: v6e-8, v6e-16"]),
    # TPU7x goes through Compute Engine by itself, which offers it in us-central1-c only
    (["--slice", "tpu7x-128"], ["zone 'us-east5-a' offers no TPU7x", "pass --zone us-central1-c"]),
])
def test_generation_mistakes_in_one_line(refusing, args, words):
    # in this process, on the module's daemon; one of them through a `podctl` process:
    # test_lifecycle_v6e_256_through_the_cli
    assert_one_line_error(podctl_here(refusing.tmp, "--backend", "fake", "up", *args, env=refusing.env),
                          2, *words)
