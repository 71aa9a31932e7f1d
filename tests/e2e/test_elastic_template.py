"""templates/train_pjit.py --elastic without podctl: three local processes stand for three
one-host slices (MEGASCALE_* as podctl's agent sets them); two of them, renumbered, go on
from their own local copies on 2 of 3 slices, keeping the global batch by gradient
accumulation, and their loss curve is an uninterrupted 3-slice run's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_template import SCRIPT, free_port, metrics, of

TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "32",
        "--seq-len", "16", "--batch", "12", "--lr", "1e-2", "--dtype", "float32",
        "--checkpoint-every", "4", "--local-every", "2"]


def _slices(hosts: list[Path], full: int, steps: int, ckpt: Path, *extra: str) -> tuple[str, str]:
    """One process per one-host slice, each with its own local disk (HOSTS); -> process
    0's (stdout, stderr)."""
    port = free_port()
    procs = []
    for i, disk in enumerate(hosts):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PODCTL_", "MEGASCALE_"))}
        env.update(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
                   PODCTL_NUM_PROCESSES=str(len(hosts)), PODCTL_PROCESS_ID=str(i),
                   JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", TPU_WORKER_ID="0",
                   MEGASCALE_NUM_SLICES=str(len(hosts)), MEGASCALE_SLICE_ID=str(i),
                   PODCTL_ELASTIC_SLICES=str(full), JAX_COMPILATION_CACHE_DIR=str(disk / "jax-cache"))
        procs.append(subprocess.Popen(
            [sys.executable, str(SCRIPT), *TINY, "--steps", str(steps), "--checkpoint-dir", str(ckpt),
             "--local-ckpt-dir", str(disk), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, stdin=subprocess.DEVNULL))
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0] * len(hosts), outs[0][1][-3000:]
    return outs[0]


def test_two_survivors_restore_their_local_copies_and_keep_the_loss_curve(tmp_path: Path):
    disks = [tmp_path / f"host-{i}" for i in range(3)]
    out, err = _slices(disks, 3, 6, tmp_path / "ckpt")
    assert "elastic: all 3 slices, global batch 12" in err
    assert any((disks[0] / "jax-cache").iterdir())  # a size seen again loads (JAX: process 0 writes)
    assert of("config", metrics(out))[0]["mesh"] == {"data": 3, "fsdp": 2, "model": 1}

    # slice 1 is lost: slices 0 and 2 go on as 0 and 1 of 2, each from its own disk
    out, err = _slices([disks[0], disks[2]], 3, 12, tmp_path / "ckpt")
    config = of("config", metrics(out))[0]
    assert (config["restored_from"], config["restored_step"]) == ("local", 6), err[-2000:]
    assert (config["slices"], config["full_slices"], config["micro_batches"]) == (2, 3, 3)
    assert config["mesh"] == {"data": 2, "fsdp": 2, "model": 1} and config["batch"] == 12
    assert ("elastic: training on 2 of 3 slices; global batch 12 kept by gradient accumulation "
            "over 3 micro-batches of 4") in err
    shrunk = {m["step"]: m["loss"] for m in of("step", metrics(out))}
    assert sorted(shrunk) == list(range(7, 13))

    out, _ = _slices([tmp_path / f"whole-{i}" for i in range(3)], 3, 12, tmp_path / "whole")
    whole = {m["step"]: m["loss"] for m in of("step", metrics(out))}
    for step, loss in shrunk.items():  # the same steps on the same rows: float32 sums apart
        assert abs(loss - whole[step]) <= 1e-4 * abs(whole[step]), (step, loss, whole[step])


def test_shrinking_the_batch_is_said_and_a_mesh_is_refused(tmp_path: Path):
    from tests.e2e.test_template import cpu_env, train

    proc = train("--steps", "1", "--elastic", "--mesh", "data=2,fsdp=2")
    assert proc.returncode == 2 and "--elastic builds the mesh" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    # one process standing for 1 of 2 slices, the batch shrinking with them
    env = cpu_env(MEGASCALE_NUM_SLICES="1", PODCTL_ELASTIC_SLICES="2")
    proc = train("--steps", "2", "--batch", "16", "--elastic-batch", "shrink", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "global batch shrinks with the slices to 8 (--elastic-batch shrink)" in proc.stderr
    assert of("config", metrics(proc.stdout))[0]["batch"] == 8
