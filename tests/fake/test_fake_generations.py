"""The fake's catalog and nodes for every generation come from generations.toml alone,
through the real google-cloud-tpu client: which zone lists what, the acceleratorConfig
type, hosts per node and the devices a fake host gives JAX."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from google.cloud import tpu_v2

from podctl.base import topology
from tests.conftest import PARENT

EAST5B = PARENT.rsplit("/", 1)[0] + "/us-east5-b"  # v5p, v6e and v5e (Google's US table)


def test_each_zone_lists_the_generations_it_offers(client, fake):
    def listed(parent: str) -> set[str]:
        return {t.type_ for t in client.list_accelerator_types(parent=parent)}

    central = listed(PARENT)  # us-central1-a: v5p and v5e
    assert {"v5p-8", "v5p-12288", "v5litepod-256"} <= central and not any(
        t.startswith(("v6e-", "v4-")) for t in central)
    assert {"v6e-1", "v6e-256", "v5p-8"} <= listed(EAST5B)
    one = client.get_accelerator_type(name=f"{EAST5B}/acceleratorTypes/v6e-256")
    assert (one.accelerator_configs[0].type_, one.accelerator_configs[0].topology) == (
        tpu_v2.AcceleratorConfig.Type.V6E, "16x16")
    with pytest.raises(gexc.NotFound):
        client.get_accelerator_type(name=f"{PARENT}/acceleratorTypes/v6e-8")
    versions = {v.version for v in client.list_runtime_versions(parent=PARENT)}
    assert {g.default_runtime_version for g in topology.generations().values()} <= versions


@pytest.mark.parametrize("config, topo, expected, hosts", [
    (tpu_v2.AcceleratorConfig.Type.V6E, "4x4", "v6e-16", 4),
    (tpu_v2.AcceleratorConfig.Type.V6E, "2x4", "v6e-8", 1),
    (tpu_v2.AcceleratorConfig.Type.V5LITE_POD, "4x8", "v5litepod-32", 8),
])
def test_a_node_of_another_generation_by_accelerator_config(client, fake, config, topo, expected,
                                                             hosts):
    gen = topology.generation_by_api_type(tpu_v2.AcceleratorConfig.Type(config).name)
    node = client.create_node(parent=EAST5B, node_id="gen", node=tpu_v2.Node(
        accelerator_config=tpu_v2.AcceleratorConfig(type_=config, topology=topo),
        runtime_version=gen.default_runtime_version)).result(timeout=10)
    assert node.accelerator_type == expected and len(node.network_endpoints) == hosts
    assert node.accelerator_config.type_ == config
    client.delete_node(name=node.name).result(timeout=10)
