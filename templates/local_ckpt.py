"""A local checkpoint tier for train_pjit.py: the latest state also on each host's own
disk (or RAM disk), written every K steps, besides orbax's checkpoints in GCS.

Each process writes only the shards it holds (its addressable shards, copied to host
memory at the step boundary, then written by a background thread while training goes
on), each named by the part of its array it is (not by device: an elastic run's
survivors restore theirs under new device and process numbers), into
DIR/LINEAGE/HOST/step-N/ (HOST: process-P, or worker-W in its slice for an elastic
run, whose process numbers change when a slice is lost); the directory is renamed into place when
complete, so a half-written step (a SIGKILL mid-write) never counts. The latest two
steps are kept. LINEAGE is a hash of the GCS checkpoint directory, so a run relaunched
with `--resume` (same PODCTL_CHECKPOINT_DIR) on the same hosts finds its copy, and
another run's copy is never taken for it.

A run relaunched in place restores from this tier only when every process has the
same step here, with the same shapes and every part of every array its devices now
hold (the processes agree on the newest such step with one tiny all-gather), and that step is
no older than GCS's latest; otherwise from GCS. A host that was replaced, a process whose copy is gone,
or another mesh: GCS.

Why not orbax's own (orbax.checkpoint.experimental.emergency): its CheckpointManager
keeps local copies only with two or more data-parallel replicas (slices), restoring a
lost host's shards from a peer replica; with one slice it drops the local directory
and writes GCS only (`_slice_count == 1` in its checkpoint_manager.py), and its
replicator variant needs GKE's replicator service. A single v5p slice, the common
case and the fake's, is what this tier is for.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

_STEP = "step-"
KEEP = 2  # local steps kept per process


def default_root() -> str:
    return os.environ.get("PODCTL_LOCAL_CHECKPOINT_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "podctl", "local-checkpoints")


class LocalTier:
    """This process's local copies of the state, in ROOT, for the checkpoints in LINEAGE."""

    def __init__(self, root: str, lineage: str, host: str, every: int) -> None:
        """HOST: this host's folder name (`process-P`; `worker-W` in an elastic run)."""
        digest = hashlib.sha256(lineage.encode()).hexdigest()[:16]
        self.dir = Path(root).expanduser() / digest / host
        self.every = every
        self.last_saved: int | None = None
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.glob(f".tmp-{_STEP}*"):  # a write a kill cut short
            shutil.rmtree(stale, ignore_errors=True)

    # ---- reading ----------------------------------------------------------------------

    def steps(self) -> list[int]:
        return sorted(int(p.name[len(_STEP):]) for p in self.dir.glob(f"{_STEP}*")
                      if p.name[len(_STEP):].isdigit() and (p / "meta.json").exists())

    def usable_steps(self, target: Any) -> list[int]:
        """The local steps that hold, for TARGET (jax.ShapeDtypeStructs with shardings),
        every leaf's shape and dtype and every part this process's devices need, oldest
        first."""
        needed, usable = _layout(target), []
        for step in self.steps():
            try:
                meta = json.loads((self.dir / f"{_STEP}{step}" / "meta.json").read_text())
            except (OSError, ValueError):
                continue
            saved = meta.get("leaves")
            if isinstance(saved, list) and len(saved) == len(needed) and all(
                    s.get("shape") == n["shape"] and s.get("dtype") == n["dtype"]
                    and set(n["parts"]) <= set(s.get("parts") or ())
                    for s, n in zip(saved, needed)):
                usable.append(step)
        return usable

    def restore(self, step: int, target: Any) -> Any:
        """The state at STEP from this process's files, placed as TARGET's shardings say."""
        import jax
        import numpy as np

        leaves, treedef = jax.tree_util.tree_flatten(target)
        with np.load(self.dir / f"{_STEP}{step}" / "shards.npz") as data:
            arrays = []
            for i, leaf in enumerate(leaves):
                dtype = np.dtype(leaf.dtype)
                indices = leaf.sharding.addressable_devices_indices_map(leaf.shape)
                shards = []
                for device, index in indices.items():
                    shape = _shard_shape(index, leaf.shape)
                    raw = data[_key(i, index, leaf.shape)]
                    shards.append(jax.device_put(raw.view(dtype).reshape(shape), device))
                arrays.append(jax.make_array_from_single_device_arrays(leaf.shape, leaf.sharding,
                                                                       shards))
        return jax.tree_util.tree_unflatten(treedef, arrays)

    # ---- writing ----------------------------------------------------------------------

    def due(self, step: int) -> bool:
        return self.every > 0 and step > 0 and step % self.every == 0 and step != self.last_saved

    def save(self, step: int, state: Any, *, wait: bool = False) -> None:
        """Copy this process's shards of STATE to host memory now (the next step donates
        STATE's buffers), and write them in the background."""
        import jax
        import numpy as np

        self.wait()
        leaves = jax.tree_util.tree_leaves(state)
        shards: dict[str, Any] = {}
        for i, leaf in enumerate(leaves):
            for shard in leaf.addressable_shards:
                key = _key(i, shard.index, leaf.shape)
                if key in shards:  # a replica of a part already copied (e.g. along "model")
                    continue
                host = np.ascontiguousarray(np.asarray(shard.data))
                shards[key] = host.reshape(-1).view(np.uint8)
        meta = {"step": step, "leaves": _layout(state)}
        self._writer = threading.Thread(target=self._write, args=(step, shards, meta),
                                        name="local-ckpt", daemon=True)
        self._writer.start()
        self.last_saved = step
        if wait:
            self.wait()

    def wait(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _write(self, step: int, shards: dict[str, Any], meta: dict) -> None:
        import numpy as np

        tmp, final = self.dir / f".tmp-{_STEP}{step}", self.dir / f"{_STEP}{step}"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            np.savez(tmp / "shards.npz", **shards)
            (tmp / "meta.json").write_text(json.dumps(meta))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)  # the commit: a step is there whole or not at all
            # Keep the one before too: a kill can land after this process committed a
            # step and before another did; the two then still share the previous one.
            for old in self.steps()[:-KEEP]:
                shutil.rmtree(self.dir / f"{_STEP}{old}", ignore_errors=True)
        except BaseException as e:  # raised at the next save or wait, in the main thread
            self._error = e


def _shard_shape(index: tuple, shape: tuple) -> tuple:
    return tuple(len(range(*s.indices(n))) for s, n in zip(index, shape))


def _part(index: tuple, shape: tuple) -> str:
    """The part of an array an index is, as text: "lo:hi" per dimension."""
    return ",".join("%d:%d" % s.indices(n)[:2] for s, n in zip(index, shape))


def _key(leaf: int, index: tuple, shape: tuple) -> str:
    return f"l{leaf}_{_part(index, shape)}"


def _layout(tree: Any) -> list:
    """What a local copy must hold to be restored: each leaf's shape and dtype, and the
    parts of it this process's devices hold (by what they are, not by device)."""
    import jax
    import numpy as np

    out = []
    for leaf in jax.tree_util.tree_leaves(tree):
        indices = leaf.sharding.addressable_devices_indices_map(leaf.shape)
        out.append({"shape": list(leaf.shape), "dtype": np.dtype(leaf.dtype).name,
                    "parts": sorted({_part(i, leaf.shape) for i in indices.values()})})
    return out


def agree(steps: list[int]) -> int | None:
    """The newest step every process has locally (one tiny all-gather of each one's
    last KEEP steps), or None if they share none."""
    import jax
    import numpy as np

    mine = (list(steps)[-KEEP:] + [-1] * KEEP)[:KEEP]
    if jax.process_count() == 1:
        everyone = np.array([mine])
    else:
        from jax.experimental import multihost_utils

        everyone = np.asarray(multihost_utils.process_allgather(np.array(mine, np.int64)))
        everyone = everyone.reshape(jax.process_count(), KEEP)
    common = set.intersection(*({int(x) for x in row if x >= 0} for row in everyone))
    return max(common) if common else None
