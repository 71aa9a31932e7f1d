"""The template's local checkpoint tier (templates/local_ckpt.py) on a fake v5p-16: a run
killed in place and relaunched on the same hosts restores from the hosts' local
copies, and says so; with one host's copy gone it restores from GCS, and says so."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.test_jobs_cli import own16 as podctl  # noqa: F401  (a fake v5p-16 "cli16" of the case's own)
from tests.e2e.test_template import SCRIPT, TINY, metrics, of

ARGS = [*TINY, "--checkpoint-every", "4", "--local-every", "2"]


def _steps_logged(cli, run_id: str) -> int:
    lines = metrics(cli("logs", run_id, check=False).stdout)
    return max([m["step"] for m in of("step", lines)], default=0)


def _gcs_latest(cli, run_id: str) -> int:
    listed = json.loads(cli("ckpt", "ls", run_id, "--json").stdout)
    return max((c["step"] for c in listed["checkpoints"] if c["complete"]), default=0)


@pytest.mark.host_env
def test_killed_in_place_restores_from_local_then_from_gcs_without_a_hosts_copy(podctl):  # noqa: F811
    # bare hosts: the first run of a test session builds the template's env (minutes)
    # over SSH, every run here: the kill below takes the watchers too, and the local copies
    # live in the home of who ran the agent (`exec` removes one in the SSH login's)
    run_id = podctl("run", "cli16", "--via", "ssh", "--detach", str(SCRIPT), *ARGS, "--steps", "100000",
                    timeout=1500).stdout.strip()
    deadline = time.time() + 1200
    while _steps_logged(podctl, run_id) < 7 and time.time() < deadline:
        time.sleep(2)
    assert _steps_logged(podctl, run_id) >= 7
    for worker in ("0", "1"):  # every process dies at once: no save on the way out
        podctl("fake", "inject", "kill-host", "cli16", worker, "--signal", "KILL")
    gcs_step = _gcs_latest(podctl, run_id)
    assert gcs_step >= 4

    # the kill lands wherever training got to while `logs` was polled: steps relative to
    # GCS's latest (every 4), which the local copy (every 2) is at or beyond
    target = gcs_step + 10
    # (the kill took every process of the hosts, their watchers too: a fake host has no
    # systemd to start them again, and podctl would find them dead only at the start)
    again = podctl("run", "cli16", "--via", "ssh", "--resume", run_id, str(SCRIPT), *ARGS, "--steps",
                   str(target), timeout=600)
    config = of("config", metrics(again.stdout))[0]
    assert config["restored_from"] == "local", again.stdout + again.stderr
    local_step = config["restored_step"]
    assert gcs_step <= local_step < target and local_step % 2 == 0
    assert config["start_step"] == local_step
    assert f"restored step {local_step} from the local copy on every host" in again.stdout
    assert [m["step"] for m in of("step", metrics(again.stdout))] == list(range(local_step + 1,
                                                                                 target + 1))

    # host 1 loses its copy (a replaced VM, a wiped disk): every host goes to GCS
    podctl("exec", "cli16", "--hosts", "1", "--", "rm -rf ~/.cache/podctl/local-checkpoints")
    done = target  # the end of the second run: saved to GCS and locally
    third = podctl("run", "cli16", "--via", "ssh", "--resume", run_id, str(SCRIPT), *ARGS, "--steps",
                   str(done + 2), timeout=600)
    config = of("config", metrics(third.stdout))[0]
    assert (config["restored_from"], config["restored_step"]) == ("gcs", done), third.stdout
    assert "local copies are missing, differ or are older" in third.stdout
    assert [m["step"] for m in of("step", metrics(third.stdout))] == [done + 1, done + 2]


def _tier_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("local_ckpt", SCRIPT.parent / "local_ckpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tier_round_trips_keeps_two_steps_and_refuses_another_layout(tmp_path):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    lt = _tier_module()
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("fsdp",))
    sharding = NamedSharding(mesh, P("fsdp"))
    state = {"w": jax.device_put(jnp.arange(8, dtype=jnp.float32), sharding),
             "h": jax.device_put(jnp.ones((2, 2), jnp.bfloat16), NamedSharding(mesh, P())),
             "step": jax.device_put(jnp.int32(3), NamedSharding(mesh, P()))}
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
    tier = lt.LocalTier(str(tmp_path), "gs://b/run/checkpoints", "process-0", every=2)
    assert not tier.due(1) and tier.due(2)
    for step in (2, 4, 6):
        tier.save(step, state, wait=True)
    assert tier.steps() == [4, 6] and tier.usable_steps(target) == [4, 6]
    assert lt.agree(tier.usable_steps(target)) == 6
    back = tier.restore(6, target)
    assert all(bool(jnp.array_equal(back[k], state[k])) for k in state)
    assert back["h"].dtype == jnp.bfloat16 and back["w"].sharding == sharding

    (tier.dir / ".tmp-step-8").mkdir()  # a write a kill cut short: never counts, swept
    again = lt.LocalTier(str(tmp_path), "gs://b/run/checkpoints", "process-0", every=2)
    assert again.steps() == [4, 6] and not (tier.dir / ".tmp-step-8").exists()
    other = {**target, "w": jax.ShapeDtypeStruct((16,), jnp.float32, sharding=sharding)}
    assert again.usable_steps(other) == []  # another model: GCS, not this copy
    elsewhere = lt.LocalTier(str(tmp_path), "gs://b/other-run/checkpoints", "process-0", every=2)
    assert elsewhere.steps() == []  # another run's copies are never taken for this one's
