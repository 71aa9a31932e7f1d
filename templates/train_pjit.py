"""A multi-host JAX training script to copy and change: a decoder-only transformer LM.

Plain JAX + optax, no Flax: the parameters are a plain dict of arrays, so every
sharding rule is in plain sight (LOGICAL_TO_MESH and param_logical_axes below name
the mesh axis of every parameter dim) rather than inside a module system. It runs

  * on a real v5p slice through `podctl run SLICE templates/train_pjit.py ...`
    (one process per host, 4 chips each),
  * on podctl's fake slice (one process per fake host, 4 CPU devices each),
  * directly: `XLA_FLAGS=--xla_force_host_platform_device_count=4 python
    templates/train_pjit.py --steps 50` (one process, 4 CPU devices).

Pieces, in order: flags -> multi-host init -> mesh ("data", "fsdp", "model") ->
sharding rules (PartitionSpec per parameter dim) -> model (bf16 compute, fp32
master params) -> jitted train step with explicit in/out shardings and a donated
state -> data (synthetic, or a token file read per host) -> orbax checkpoints
(local or gs://, async, restored sharded) -> SIGTERM (preemption) handling.

Metrics: process 0 prints one JSON object per line on stdout (other podctl code
parses these; keep the keys): "config" at start, "step" per step, "checkpoint"
per save started, "done" at the end, "preempted" when stopped by SIGTERM (exit
143). Anything for humans goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from typing import NoReturn
from pathlib import Path

PROG = "train_pjit"
PEAK_BF16_FLOPS = {"v5p": 459e12}  # per chip; a v5p chip is one JAX device (megacore)


def fail(message: str, code: int = 2) -> NoReturn:
    """Expected errors: one line on stderr, no traceback, non-zero exit."""
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    sys.exit(code)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    m = p.add_argument_group("model")
    m.add_argument("--layers", type=int, default=4)
    m.add_argument("--d-model", type=int, default=256)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--d-ff", type=int, default=1024)
    m.add_argument("--vocab", type=int, default=256, help="(a .txt --data always uses 256)")
    m.add_argument("--seq-len", type=int, default=128)
    m.add_argument("--untied", action="store_true", help="a separate output projection "
                   "(default: tied to the token embedding)")
    m.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                   help="compute dtype; master params and optimizer stay float32")
    m.add_argument("--remat", action="store_true", help="recompute each block's activations "
                   "in the backward pass (less memory, ~1/3 more compute)")
    t = p.add_argument_group("training")
    t.add_argument("--batch", type=int, default=32, help="global batch (sequences per step)")
    t.add_argument("--steps", type=int, default=100, help="total optimizer steps (a resumed "
                   "run continues up to this)")
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--warmup", type=int, default=0, help="linear warm-up steps, then constant")
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--data", default="synthetic", help="'synthetic' (default), or a token "
                   "file: .npy (uint16/int32), .bin (raw uint16), .txt (bytes, vocab 256)")
    s = p.add_argument_group("parallelism")
    s.add_argument("--mesh", default=None, help="axis sizes, e.g. data=2,fsdp=2,model=2 (missing "
                   "axes are 1; the product must be jax.device_count(); default: all on fsdp)")
    s.add_argument("--no-shard", action="store_true", help="one device, nothing sharded "
                   "(single process only; the benchmark's baseline)")
    s.add_argument("--elastic", action="store_true",
                   default=bool(os.environ.get("PODCTL_ELASTIC_SLICES")),
                   help="data-parallel across the slices present (mesh data = slices, fsdp = "
                   "devices per slice: every slice holds the whole state), so a run relaunched "
                   "on fewer slices restores from the survivors' local copies (default: on when "
                   "podctl sets PODCTL_ELASTIC_SLICES, the run's full slice count)")
    s.add_argument("--elastic-batch", choices=["keep", "shrink"],
                   default=os.environ.get("PODCTL_ELASTIC_BATCH") or "keep",
                   help="on fewer slices than the full count: keep the global batch by gradient "
                   "accumulation (default), or shrink it with the slices")
    s.add_argument("--heartbeat-timeout", type=int, default=None, metavar="S",
                   help="seconds JAX's coordination service waits for a silent host before "
                   "ending the others (default: JAX's, 100)")
    c = p.add_argument_group("checkpoints")
    c.add_argument("--checkpoint-dir", default=os.environ.get("PODCTL_CHECKPOINT_DIR") or None,
                   help="local path or gs://... (default: $PODCTL_CHECKPOINT_DIR; "
                   "'none' or unset: no checkpoints)")
    c.add_argument("--checkpoint-every", type=int, default=100, metavar="K")
    c.add_argument("--keep", type=int, default=3, metavar="N", help="checkpoints kept")
    c.add_argument("--local-every", type=int, default=0, metavar="K",
                   help="also keep the latest state on each host's local disk every K steps "
                   "(cheap; 0: off); a run relaunched in place on the same hosts restores from "
                   "it when every host has the same step (local_ckpt.py)")
    c.add_argument("--local-ckpt-dir", default=None, metavar="DIR",
                   help="where the local copies go (default: $PODCTL_LOCAL_CHECKPOINT_DIR, else "
                   "~/.cache/podctl/local-checkpoints; a RAM disk such as /dev/shm is faster)")
    c.add_argument("--peak-flops", type=float, default=None, help="peak FLOP/s per device for "
                   "MFU when the device kind is not known here")
    o = p.add_argument_group("observability")
    run_dir = os.environ.get("PODCTL_RUN_DIR")
    o.add_argument("--tensorboard-dir", default=f"{run_dir}/tensorboard" if run_dir else None,
                   help="TensorBoard scalars (loss, step time, tokens/s, MFU), local or gs:// "
                   "(default: the run's folder under podctl, $PODCTL_RUN_DIR/tensorboard; "
                   "'none': off; needs tensorboardX)")
    args = p.parse_args(argv)
    for name in ("layers", "d_model", "heads", "d_ff", "vocab", "seq_len", "batch",
                 "checkpoint_every", "keep"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    if args.steps < 0:
        fail(f"--steps must not be negative, not {args.steps}")
    if args.heartbeat_timeout is not None and args.heartbeat_timeout < 1:
        fail(f"--heartbeat-timeout must be at least 1 second, not {args.heartbeat_timeout}")
    if args.d_model % args.heads:
        fail(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    if args.checkpoint_dir in ("", "none", "None"):
        args.checkpoint_dir = None
    if args.tensorboard_dir in ("", "none", "None"):
        args.tensorboard_dir = None
    if args.elastic and (args.mesh or args.no_shard):
        fail("--elastic builds the mesh from the slices present (data = slices, fsdp = the "
             "devices of one slice): leave out --mesh and --no-shard")
    if args.local_every < 0:
        fail(f"--local-every must not be negative, not {args.local_every}")
    if args.local_every and not args.checkpoint_dir:
        fail("--local-every keeps a local copy beside the checkpoints: give --checkpoint-dir "
             "(or run through podctl, which sets PODCTL_CHECKPOINT_DIR)")
    return args


# ---- environment, before jax is imported ------------------------------------------

def configure_storage_emulator() -> None:
    """Only on the fake cloud (STORAGE_EMULATOR_HOST set; a real TPU VM has no such
    variable and uses its service account). orbax writes arrays with tensorstore,
    which finds the emulator through TENSORSTORE_GCS_HTTP_URL, and metadata with
    etils/gcsfs, which finds it through STORAGE_EMULATOR_HOST; both take the node's
    token from the host's metadata server, as on a TPU VM (the fake's GCS wants one).
    gcsfs needs its bucket-type probe off there: that probe is a gRPC call to the
    Storage Control API, which the emulator does not serve, so each lookup would hang
    for its 60 s timeout."""
    if not os.environ.get("STORAGE_EMULATOR_HOST"):
        return
    os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", os.environ["STORAGE_EMULATOR_HOST"])
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # read at gcsfs import


def init_distributed(heartbeat_timeout: int | None = None) -> None:
    """One process per host. podctl gives every host the coordinator (host 0) and the
    process count and id; jax's auto-detection works only with libtpu, not on the fake's
    CPU hosts, so pass them explicitly (on a real slice this is equally right)."""
    import jax

    n = int(os.environ.get("PODCTL_NUM_PROCESSES", "1"))
    if n > 1:
        # a shorter heartbeat timeout ends a run whose host froze sooner (and a run on a
        # loaded host sooner by mistake): JAX's default stays unless asked
        timeout = {} if heartbeat_timeout is None else {"heartbeat_timeout_seconds": heartbeat_timeout}
        jax.distributed.initialize(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                                   num_processes=n,
                                   process_id=int(os.environ["PODCTL_PROCESS_ID"]), **timeout)


# ---- preemption -------------------------------------------------------------------

class StopFlag:
    """SIGTERM (a TPU VM's preemption notice, or `podctl` stopping the run) only sets a
    flag; the loop acts on it at the next step boundary.

    Every process must stop at the same step: the save is collective (each process
    writes its shards, then they meet at a barrier), and a process that went on to
    the next train step would wait forever in that step's collectives for one that
    is saving. The notice does not reach every host at the same instant, so at each
    boundary the processes agree: the max of everyone's flag (a tiny all-gather).
    Whoever sees 1 there, everyone sees 1, at the same step."""

    def __init__(self) -> None:
        self.local = False

    def install(self) -> None:
        # After jax.distributed.initialize: its preemption notifier installs a SIGTERM
        # handler of its own, which this one replaces.
        signal.signal(signal.SIGTERM, self._on_term)
        # A hung job: SIGUSR1 (podctl's stall watch, or `kill -USR1 PID` on a host) writes
        # every thread's stack to $PODCTL_STACKS_FILE, which the agent uploads (stderr
        # without it).
        import faulthandler

        where = os.environ.get("PODCTL_STACKS_FILE")
        self._stacks = open(where, "a") if where else sys.stderr  # kept open: faulthandler writes its fd
        faulthandler.register(signal.SIGUSR1, file=self._stacks, all_threads=True)
        # Say so: the agent sends SIGUSR1 only to a process that declared a handler (for
        # any other, SIGUSR1's default action is to end it).
        declare = os.environ.get("PODCTL_STACKS_HANDLER_FILE")
        if declare:
            with open(f"{declare}.tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(f"{declare}.tmp", declare)

    def _on_term(self, signum: int, frame: object) -> None:
        self.local = True

    def agreed(self) -> bool:
        import jax
        import numpy as np

        if jax.process_count() == 1:
            return self.local
        from jax.experimental import multihost_utils

        flags = multihost_utils.process_allgather(np.array([int(self.local)], np.int32))
        return bool(np.max(flags))


# ---- mesh and sharding rules ------------------------------------------------------

AXES = ("data", "fsdp", "model")


def parse_mesh(text: str | None, devices: int) -> dict[str, int]:
    if text is None:
        return {"data": 1, "fsdp": devices, "model": 1}
    sizes = {a: 1 for a in AXES}
    for part in text.split(","):
        name, eq, value = part.strip().partition("=")
        if not eq or name not in AXES or not value.strip().isdigit() or int(value) < 1:
            fail(f"--mesh {text!r}: expected NAME=SIZE,... with NAME in {', '.join(AXES)}")
        sizes[name] = int(value)
    product = math.prod(sizes.values())
    if product != devices:
        fail(f"--mesh {text} has {product} devices but jax.device_count() is {devices}; "
             f"make the sizes multiply to {devices}")
    return sizes


class Elastic:
    """An elastic run's shape on the slices present now (MEGASCALE_NUM_SLICES, as podctl
    sets it for the slices it relaunched on) against its full count (PODCTL_ELASTIC_SLICES):
    the mesh (data across slices, fsdp inside one, so every slice holds the whole state),
    the global batch, and the micro-batches a step accumulates over to keep that batch
    with no more rows per device than at full size."""

    def __init__(self, a: argparse.Namespace, devices: int) -> None:
        self.slices = int(os.environ.get("MEGASCALE_NUM_SLICES") or 1)
        self.full = max(self.slices, int(os.environ.get("PODCTL_ELASTIC_SLICES") or self.slices))
        if devices % self.slices:
            fail(f"{devices} devices do not split into {self.slices} slices alike")
        per_slice = devices // self.slices
        self.sizes = {"data": self.slices, "fsdp": per_slice, "model": 1}
        shards = self.slices * per_slice
        self.batch, self.micro, self.shrunk = a.batch, 1, False
        if a.elastic_batch == "shrink" and self.slices < self.full:
            self.shrunk = True
            self.batch = a.batch * self.slices // self.full
            if self.batch < 1 or self.batch % shards:
                fail(f"--elastic-batch shrink: --batch {a.batch} on {self.slices} of {self.full} "
                     f"slices is {self.batch}, not a multiple of {shards} devices")
            return
        rows_full = a.batch / (self.full * per_slice)  # rows per device at full size
        fits = [m for m in range(1, a.batch + 1) if a.batch % m == 0
                and (a.batch // m) % shards == 0]
        if not fits:
            fail(f"--batch {a.batch} does not split over {shards} devices in equal micro-batches "
                 f"on {self.slices} slices; make it a multiple of {shards}, or use "
                 "--elastic-batch shrink")
        self.micro = next((m for m in fits if a.batch // m / shards <= rows_full), fits[-1])

    def describe(self) -> str:
        if self.slices == self.full:
            return f"elastic: all {self.full} slices, global batch {self.batch}"
        if self.shrunk:
            how = f"global batch shrinks with the slices to {self.batch} (--elastic-batch shrink)"
        elif self.micro > 1:
            how = (f"global batch {self.batch} kept by gradient accumulation over {self.micro} "
                   f"micro-batches of {self.batch // self.micro}")
        else:
            how = f"global batch {self.batch} kept (more rows per device)"
        return f"elastic: training on {self.slices} of {self.full} slices; {how}"


def make_mesh(sizes: dict[str, int], no_shard: bool, devices: list):
    """The ("data", "fsdp", "model") mesh over DEVICES (jax.devices() to train; the
    devices of a TPU topology description under `podctl preflight`)."""
    import numpy as np
    from jax.sharding import Mesh

    if no_shard:
        return Mesh(np.array(devices[:1]).reshape(1, 1, 1), AXES)
    shape = tuple(sizes[a] for a in AXES)
    if devices[0].platform == "tpu":
        # Lays the axes onto the ICI torus so neighbours in "model" are physical neighbours.
        from jax.experimental import mesh_utils

        slices = len({getattr(d, "slice_index", 0) for d in devices})
        try:
            if slices > 1:
                # Multislice: only the outer axis that the slice count divides crosses the
                # data-center network (DCN); the rest stays inside a slice, on ICI.
                outer = next((i for i, a in enumerate(AXES[:2]) if sizes[a] % slices == 0), None)
                if outer is None:
                    raise ValueError(f"neither data nor fsdp is a multiple of {slices} slices")
                dcn = tuple(slices if i == outer else 1 for i in range(3))
                ici = tuple(n // d for n, d in zip(shape, dcn))
                grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices,
                                                            allow_split_physical_axes=True)
            else:
                grid = mesh_utils.create_device_mesh(shape, devices,
                                                     allow_split_physical_axes=True)
            return Mesh(grid, AXES)
        except (ValueError, NotImplementedError, AssertionError) as e:
            sys.stderr.write(f"{PROG}: topology-aware mesh unavailable ({e}); plain order\n")
    return Mesh(np.array(devices).reshape(shape), AXES)


# Logical name of each parameter dim -> mesh axis. "fsdp" shards the d_model side of
# every weight (ZeRO-3 style: gathered for use, reduce-scattered gradients); "model"
# shards heads, the MLP's hidden dim and the vocabulary (Megatron-style tensor
# parallelism). The batch is split over ("data", "fsdp").
LOGICAL_TO_MESH = {"vocab": "model", "embed": "fsdp", "heads": "model", "mlp": "model",
                   "layers": None, "head_dim": None, "seq": None, "norm": None}
BATCH_AXES = ("data", "fsdp")


def param_logical_axes(untied: bool) -> dict:
    """The parameter tree with, for each array, the logical name of each of its dims.
    Blocks are stacked on a leading "layers" dim and run with lax.scan (compile time
    does not grow with --layers)."""
    tree = {
        "embed": ("vocab", "embed"),
        "pos": ("seq", "embed"),
        "blocks": {
            "ln1": ("layers", "norm"),
            "wq": ("layers", "embed", "heads", "head_dim"),
            "wk": ("layers", "embed", "heads", "head_dim"),
            "wv": ("layers", "embed", "heads", "head_dim"),
            "wo": ("layers", "heads", "head_dim", "embed"),
            "ln2": ("layers", "norm"),
            "w_in": ("layers", "embed", "mlp"),
            "w_out": ("layers", "mlp", "embed"),
        },
        "ln_f": ("norm",),
    }
    if untied:
        tree["unembed"] = ("embed", "vocab")
    return tree


def param_shapes(a: argparse.Namespace) -> dict:
    L, d, h, hd, f, v = a.layers, a.d_model, a.heads, a.d_model // a.heads, a.d_ff, a.vocab
    tree = {
        "embed": (v, d), "pos": (a.seq_len, d),
        "blocks": {"ln1": (L, d), "wq": (L, d, h, hd), "wk": (L, d, h, hd), "wv": (L, d, h, hd),
                   "wo": (L, h, hd, d), "ln2": (L, d), "w_in": (L, d, f), "w_out": (L, f, d)},
        "ln_f": (d,),
    }
    if a.untied:
        tree["unembed"] = (d, v)
    return tree


def spec_for(shape: tuple[int, ...], logical: tuple[str, ...], mesh) -> "object":
    """PartitionSpec for one array: each dim on its rule's mesh axis, or replicated when
    that axis has size 1 or does not divide the dim (e.g. a vocab of 50257)."""
    from jax.sharding import PartitionSpec as P

    dims = []
    for size, name in zip(shape, logical):
        axis = LOGICAL_TO_MESH[name]
        ok = axis is not None and mesh.shape[axis] > 1 and size % mesh.shape[axis] == 0
        dims.append(axis if ok else None)
    return P(*dims)


def is_shape(x: object) -> bool:
    return isinstance(x, tuple) and all(isinstance(i, int) for i in x)


# ---- model ------------------------------------------------------------------------

def init_params(key, a: argparse.Namespace) -> dict:
    """fp32 parameters: norm scales 1, embeddings N(0, 0.02), weights N(0, 1/fan_in), the
    two residual-branch outputs (wo, w_out) further scaled by 1/sqrt(2 * layers)."""
    import jax
    import jax.numpy as jnp

    flat, treedef = jax.tree_util.tree_flatten_with_path(param_shapes(a), is_leaf=is_shape)
    keys = jax.random.split(key, len(flat))
    fan_in = {"wo": a.d_model, "w_out": a.d_ff}  # the rest read d_model
    out = []
    for k, (path, shape) in zip(keys, flat):
        name = path[-1].key
        if name.startswith("ln"):
            out.append(jnp.ones(shape, jnp.float32))
            continue
        std = 0.02 if name in ("embed", "pos") else fan_in.get(name, a.d_model) ** -0.5
        if name in ("wo", "w_out"):
            std /= math.sqrt(2 * a.layers)
        out.append(std * jax.random.normal(k, shape, jnp.float32))
    return jax.tree.unflatten(treedef, out)


def rms_norm(x, scale):
    import jax
    import jax.numpy as jnp

    x32 = x.astype(jnp.float32)  # statistics in fp32 even when computing in bf16
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
    return (y * scale).astype(x.dtype)


def forward(params: dict, tokens, a: argparse.Namespace, mesh):
    """tokens (B, T) int32 -> logits (B, T, vocab) float32."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    dtype = jnp.dtype(a.dtype)
    # fp32 master params, cast once per step: the matmuls below run in bf16 on the
    # MXU, the optimizer still updates fp32 copies (bf16 updates would vanish below
    # bf16's 8 bits of mantissa).
    p = jax.tree.map(lambda w: w.astype(dtype), params)
    T = tokens.shape[1]
    act = NamedSharding(mesh, P(BATCH_AXES, None, None))  # activations: batch-sharded
    x = jnp.take(p["embed"], tokens, axis=0) + p["pos"][:T]
    x = jax.lax.with_sharding_constraint(x, act)

    def block(x, w):
        h = rms_norm(x, w["ln1"])
        q = jnp.einsum("btd,dnh->btnh", h, w["wq"])
        k = jnp.einsum("btd,dnh->btnh", h, w["wk"])
        v = jnp.einsum("btd,dnh->btnh", h, w["wv"])
        att = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        x = x + jnp.einsum("btnh,nhd->btd", att, w["wo"])
        h = rms_norm(x, w["ln2"])
        h = jax.nn.gelu(jnp.einsum("btd,df->btf", h, w["w_in"]))
        x = x + jnp.einsum("btf,fd->btd", h, w["w_out"])
        return jax.lax.with_sharding_constraint(x, act), None

    if a.remat:
        block = jax.checkpoint(block)
    x, _ = jax.lax.scan(block, x, p["blocks"])
    x = rms_norm(x, p["ln_f"])
    out = p["unembed"] if a.untied else p["embed"].T
    return jnp.einsum("btd,dv->btv", x, out).astype(jnp.float32)


def loss_fn(params: dict, batch, a: argparse.Namespace, mesh):
    import jax
    import jax.numpy as jnp

    inputs, targets = batch[:, :-1], batch[:, 1:]
    logits = forward(params, inputs, a, mesh)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


# ---- data -------------------------------------------------------------------------

class Data:
    """Global batch (B, seq_len + 1) of token ids per step, the same rows whatever the
    number of processes: row r of step s depends only on (seed, s, r). Each process
    builds only the rows its own devices hold (`rows(lo, hi)`)."""

    def __init__(self, a: argparse.Namespace):
        import numpy as np

        self.a, self.width = a, a.seq_len + 1
        self.tokens = None
        if a.data == "synthetic":
            return
        path = Path(a.data)
        if not path.is_file():
            fail(f"--data {a.data}: no such file")
        if path.suffix == ".npy":
            self.tokens = np.load(path, mmap_mode="r")
            if self.tokens.dtype not in (np.uint16, np.int32) or self.tokens.ndim != 1:
                fail(f"--data {a.data}: expected a 1-D uint16 or int32 array, found "
                     f"{self.tokens.ndim}-D {self.tokens.dtype}")
        elif path.suffix == ".bin":
            self.tokens = np.memmap(path, dtype=np.uint16, mode="r")
        elif path.suffix == ".txt":
            self.tokens = np.memmap(path, dtype=np.uint8, mode="r")
        else:
            fail(f"--data {a.data}: expected synthetic, .npy, .bin or .txt")
        if len(self.tokens) < self.width + 1:
            fail(f"--data {a.data}: {len(self.tokens)} tokens, fewer than --seq-len + 2")

    def rows(self, step: int, lo: int, hi: int):
        import numpy as np

        B, a = self.a.batch, self.a
        # Per-step randomness for the whole global batch is a few numbers per row:
        # cheap, and identical on every process.
        rng = np.random.default_rng([a.seed, step])
        if self.tokens is None:
            # Learnable: each row counts from a random start by a random stride, mod vocab.
            # A model must read the stride from the context; loss falls within tens of steps.
            start = rng.integers(0, a.vocab, B)[lo:hi, None]
            stride = rng.integers(1, 8, B)[lo:hi, None]
            t = np.arange(self.width)[None, :]
            return ((start + stride * t) % a.vocab).astype(np.int32)
        offsets = rng.integers(0, len(self.tokens) - self.width, B)[lo:hi]
        out = np.stack([np.asarray(self.tokens[o:o + self.width]) for o in offsets])
        out = out.astype(np.int32)
        if out.max(initial=0) >= a.vocab:
            fail(f"--data {a.data}: token id {int(out.max())} is not below --vocab {a.vocab}")
        return out

    def global_batch(self, step: int, sharding, batch: int | None = None, micro: int = 1):
        """A global jax.Array whose local shards this process builds from its own rows:
        the step's first BATCH rows (default --batch), as (MICRO, BATCH/MICRO, width)
        when a step accumulates over MICRO micro-batches."""
        import jax
        import numpy as np

        batch = batch or self.a.batch
        rows = batch // micro
        shape = (batch, self.width) if micro == 1 else (micro, rows, self.width)
        cache: dict[tuple[int, int], object] = {}

        def part(lo: int, hi: int):
            if (lo, hi) not in cache:  # devices along "model" hold the same rows
                cache[(lo, hi)] = self.rows(step, lo, hi)
            return cache[(lo, hi)]

        def local(index):  # index: this device's slices of the global batch
            if micro == 1:
                lo, hi, _ = index[0].indices(shape[0])
                return part(lo, hi)[:, index[1]]
            lo, hi, _ = index[1].indices(rows)
            return np.stack([part(i * rows + lo, i * rows + hi)[:, index[2]]
                             for i in range(*index[0].indices(micro))])

        return jax.make_array_from_callback(shape, sharding, local)


# ---- metrics ----------------------------------------------------------------------

METRICS = sys.stdout


def keep_stdout_for_metrics() -> None:
    """Native code prints to file descriptor 1 too (gloo's "[Gloo] Rank 0 is connected"
    lines on CPU, libtpu's logs): point fd 1 at stderr and keep a private copy of the
    real stdout for the metric lines, so stdout carries nothing else."""
    global METRICS
    try:
        sys.stdout.flush()
        METRICS = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
    except OSError:  # no real descriptors (embedded, a notebook): leave stdout as it is
        METRICS = sys.stdout


class Progress:
    """Every process: the step it has finished, where podctl's agent reads it (the stall
    watch names a host behind its peers) with this host's own share of a step.

    In SPMD every host's step ends together (the collectives, and the stop flag's
    all-gather, wait for the slowest), so a slow host shows only in what it does alone:
    building its input batch. (Not the dispatch: on CPU a small step may run inside it,
    collectives and all.) `host_s` is the mean of that over the last WINDOW steps,
    `step_s` the mean step; podctl compares `host_s` across hosts
    (steps/slow_hosts.py). Written whole, then renamed."""

    WINDOW = 50

    def __init__(self) -> None:
        import jax

        self.where = os.environ.get("PODCTL_PROGRESS_FILE")
        self.process = jax.process_index()
        self.host_s: list[float] = []
        self.step_s: list[float] = []

    def note(self, step: int, host_s: float | None = None, step_s: float | None = None) -> None:
        if not self.where:
            return
        if host_s is not None and step_s is not None:
            self.host_s = (self.host_s + [host_s])[-self.WINDOW:]
            self.step_s = (self.step_s + [step_s])[-self.WINDOW:]
        record: dict = {"step": step, "t": round(time.time(), 3), "process": self.process}
        if self.host_s:
            record.update(host_s=round(sum(self.host_s) / len(self.host_s), 5),
                          step_s=round(sum(self.step_s) / len(self.step_s), 5),
                          window=len(self.host_s))
        tmp = f"{self.where}.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(record))
        os.replace(tmp, self.where)


def emit(kind: str, **fields: object) -> None:
    """Process 0 only; one JSON object per line, flushed at once (podctl parses these)."""
    import jax

    if jax.process_index() == 0:  # "t": when (Unix seconds), for podctl's goodput account
        METRICS.write(json.dumps({"kind": kind, **fields, "t": round(time.time(), 3)}) + "\n")
        METRICS.flush()


def peak_flops(devices: list, override: float | None) -> tuple[float | None, str | None]:
    """Whole-job peak bf16 FLOP/s for MFU, or None with the reason."""
    kind = devices[0].device_kind.lower()
    if override:
        return override * len(devices), None
    if devices[0].platform == "cpu":
        return None, "not meaningful on cpu"
    # v5p reports "TPU v5" (v5e is "TPU v5 lite" / "TPU v5e"); newer runtimes may say "v5p".
    if devices[0].platform == "tpu" and ("v5p" in kind or kind.strip() == "tpu v5"):
        return PEAK_BF16_FLOPS["v5p"] * len(devices), None
    return None, f"peak FLOP/s unknown for {devices[0].device_kind}; pass --peak-flops"


class Scalars:
    """TensorBoard scalars on process 0, written by tensorboardX (no TensorFlow) on a
    thread of their own: a step only queues its numbers (a few hundred microseconds of
    protobuf work per step, and the copies, happen while the devices compute). A gs://
    directory gets the event file copied there (gcsfs) every SYNC_SECONDS and at the
    end, so `tensorboard --logdir gs://...` follows the run. Without tensorboardX
    installed this says so once and the run goes on."""

    SYNC_SECONDS = 30.0

    def __init__(self, target: str | None):
        import jax

        self.writer, self.target, self.thread = None, target, None
        if not target or jax.process_index() != 0:
            return
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            sys.stderr.write(f"{PROG}: no TensorBoard scalars: tensorboardX is not installed "
                             "(add it to requirements.txt)\n")
            return
        import queue
        import tempfile
        import threading

        self.local = target if "://" not in target else tempfile.mkdtemp(prefix="tensorboard-")
        self.writer = SummaryWriter(self.local, flush_secs=self.SYNC_SECONDS)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._write, name="tensorboard-scalars", daemon=True)
        self.thread.start()

    def step(self, line: dict) -> None:
        if self.thread is not None:
            self.queue.put(line)

    def _write(self) -> None:
        synced = time.monotonic()
        while True:
            line = self.queue.get()
            if line is None:
                break
            for key in ("loss", "step_time_s", "tokens_per_s", "mfu"):
                if isinstance(line.get(key), float) and not (key != "loss" and line.get("compile")):
                    self.writer.add_scalar(f"train/{key}", line[key], line["step"])
            if time.monotonic() - synced > self.SYNC_SECONDS:
                synced = time.monotonic()
                self._sync()
        self.writer.close()
        self._sync()

    def _sync(self) -> None:
        if "://" not in self.target:
            return
        self.writer.flush()
        try:
            import fsspec

            fs, root = fsspec.core.url_to_fs(self.target)
            for name in os.listdir(self.local):
                fs.put_file(os.path.join(self.local, name), f"{root.rstrip('/')}/{name}")
        except Exception as e:  # scalars are a nicety: a failed copy never stops training
            sys.stderr.write(f"{PROG}: TensorBoard scalars not copied to {self.target}: {e}\n")

    def close(self) -> None:
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join(timeout=120)  # the last copy to GCS
            self.thread = None


class ProfileRequests:
    """`podctl profile RUN`: the host agent drops profile-ID.json into $PODCTL_CONTROL_DIR;
    between steps (after the first, which compiles) this starts a JAX profiler trace of
    the next N steps into PODCTL_CONTROL_DIR/profile-ID/ and leaves profile-ID.done for
    the agent to upload. Each process traces its own host; no collective is involved."""

    def __init__(self) -> None:
        self.dir = os.environ.get("PODCTL_CONTROL_DIR")
        self.active: dict | None = None
        self.looked = 0.0

    def before_step(self, step: int) -> None:
        if not self.dir or self.active is not None or time.monotonic() - self.looked < 1.0:
            return
        self.looked = time.monotonic()  # a directory read a second at most: nothing per step
        names = sorted(n for n in os.listdir(self.dir) if n.startswith("profile-") and n.endswith(".json"))
        if not names:
            return
        path = os.path.join(self.dir, names[0])
        with open(path) as f:
            request = json.load(f)
        os.replace(path, path[:-len(".json")] + ".taken")
        import jax

        out = os.path.join(self.dir, f"profile-{request['id']}")
        try:
            jax.profiler.start_trace(out, create_perfetto_trace=True)
        except Exception as e:  # e.g. a trace the script started itself: never stop training
            self.active = {"id": request["id"], "first_step": step + 1}
            return self.finish(step, error=f"start_trace failed: {e}")
        self.active = {"id": request["id"], "left": max(1, int(request.get("steps", 5))),
                       "first_step": step + 1, "out": out}

    def after_step(self, step: int) -> None:
        if self.active is not None:
            self.active["left"] -= 1
            if self.active["left"] <= 0:
                self.finish(step)

    def finish(self, step: int, error: str | None = None) -> None:
        if self.active is None:
            return
        import jax

        active, self.active = self.active, None
        if error is None:
            jax.profiler.stop_trace()
        done = {"first_step": active["first_step"], "last_step": step, "error": error}
        tmp = os.path.join(self.dir, f".profile-{active['id']}.tmp")
        with open(tmp, "w") as f:
            json.dump(done, f)
        os.replace(tmp, os.path.join(self.dir, f"profile-{active['id']}.done"))


def compiled_everywhere(step_fn, state, batch, timeout_s: float = 1800.0) -> None:
    """The train step compiled here (jit keeps it: the first call runs it), then wait until
    every process has compiled it too. On CPU devices the step's collectives go through
    Gloo, which waits only 30 s for a peer (`GetKeyValue() timed out`, an abort): a resume
    whose host 0 loads the step from its compilation cache while another host compiles it
    on busy cores passed that. The coordination service's barrier waits as long as a
    compile may take."""
    import jax

    if jax.process_count() == 1:
        return
    step_fn.lower(state, batch).compile()
    from jax._src import distributed  # the client orbax's barriers use too

    client = distributed.global_state.client
    if client is not None:
        client.wait_at_barrier("train_pjit_step_compiled", int(timeout_s * 1000))


# ---- main -------------------------------------------------------------------------

class Built:
    """Everything the train step needs, made over a list of devices (see build)."""

    def __init__(self, **parts: object) -> None:
        self.__dict__.update(parts)


def set_precision(a: argparse.Namespace) -> None:
    import jax

    # Deliberate: any float32 matmul left (there should be none in the step: params are
    # cast to bf16) runs as a single bf16 pass on the MXU. "highest"/"float32" takes
    # several passes, about 30% more step time on TPU for no gain in a bf16 model.
    # With --dtype float32 (e.g. on CPU, whose bf16 matmuls are slow) keep full precision.
    jax.config.update("jax_default_matmul_precision",
                      "bfloat16" if a.dtype == "bfloat16" else "float32")


def build(a: argparse.Namespace, devices: list) -> Built:
    """The mesh over DEVICES, the shardings, the abstract state and the jitted train
    step: the same code for training (jax.devices()) and for `podctl preflight` (the
    devices of a TPU topology that is not attached; nothing is allocated here)."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import NamedSharding, PartitionSpec as P

    elastic = Elastic(a, len(devices)) if a.elastic else None
    batch, micro = (elastic.batch, elastic.micro) if elastic else (a.batch, 1)
    if elastic:
        sizes = elastic.sizes
    else:
        sizes = parse_mesh(a.mesh, len(devices)) if not a.no_shard else {x: 1 for x in AXES}
    mesh = make_mesh(sizes, a.no_shard, devices)
    batch_shards = mesh.shape["data"] * mesh.shape["fsdp"]
    if (batch // micro) % batch_shards:
        fail(f"--batch {a.batch} is not a multiple of data x fsdp = {batch_shards}")

    # -- shardings: params by rule, optimizer state like the params it tracks --
    shapes, logical = param_shapes(a), param_logical_axes(a.untied)
    param_specs = jax.tree.map(lambda s, l: spec_for(s, l, mesh), shapes, logical,
                               is_leaf=is_shape)
    schedule = optax.linear_schedule(0.0, a.lr, a.warmup) if a.warmup else a.lr
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=a.weight_decay))

    def init_state(key):
        params = init_params(key, a)
        return {"params": params, "opt": tx.init(params), "step": jnp.zeros((), jnp.int32)}

    abstract = jax.eval_shape(init_state, jax.random.key(a.seed))
    by_path = {tuple(k.key for k in path): spec for path, spec in
               jax.tree_util.tree_flatten_with_path(param_specs)[0]}

    def state_spec(path, leaf):
        # adam's mu/nu have the params' tree inside optax's tuples: match on the dict keys
        keys = tuple(k.key for k in path if isinstance(k, jax.tree_util.DictKey))[1:]
        spec = by_path.get(keys)
        return NamedSharding(mesh, spec if spec is not None and leaf.ndim else P())

    state_sharding = jax.tree_util.tree_map_with_path(state_spec, abstract)
    # with accumulation the batch comes as (micro, rows, width): micro-batch i is rows
    # i*rows..(i+1)*rows of the global batch, each split over the devices as one step's is
    batch_sharding = NamedSharding(mesh, P(BATCH_AXES, None) if micro == 1 else
                                   P(None, BATCH_AXES, None))
    scalar = NamedSharding(mesh, P())
    n_params = sum(math.prod(s) for s in jax.tree.leaves(shapes, is_leaf=is_shape))

    def train_step(state, batch):
        if micro == 1:
            loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch, a, mesh)
        else:  # the mean over equal micro-batches is the whole batch's mean: the same step
            def one(carry, rows):
                loss, grads = jax.value_and_grad(loss_fn)(state["params"], rows, a, mesh)
                return jax.tree.map(jnp.add, carry, (loss, grads)), None

            zero = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, state["params"]))
            (loss, grads), _ = jax.lax.scan(one, zero, batch)
            loss, grads = loss / micro, jax.tree.map(lambda g: g / micro, grads)
        updates, opt = tx.update(grads, state["opt"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return {"params": params, "opt": opt, "step": state["step"] + 1}, loss

    # donate_argnums: the old state's buffers are reused for the new one (no second copy)
    step_fn = jax.jit(train_step, in_shardings=(state_sharding, batch_sharding),
                      out_shardings=(state_sharding, scalar), donate_argnums=0)
    return Built(mesh=mesh, init_state=init_state, abstract=abstract, step_fn=step_fn,
                 state_sharding=state_sharding, batch_sharding=batch_sharding,
                 n_params=n_params, elastic=elastic, batch=batch, micro=micro)


def preflight(argv: list[str], devices: list) -> dict:
    """`podctl preflight`'s hook: the train step and abstract arguments of the real
    shapes and shardings (jax.ShapeDtypeStruct), over DEVICES, for podctl to lower and
    compile for a TPU slice that is not attached. Nothing is allocated, no data read."""
    import jax
    import jax.numpy as jnp

    a = parse_args(argv)
    if a.data.endswith(".txt"):
        a.vocab = 256
    set_precision(a)
    b = build(a, devices)
    state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                         b.abstract, b.state_sharding)
    shape = (b.batch, a.seq_len + 1) if b.micro == 1 else (b.micro, b.batch // b.micro, a.seq_len + 1)
    batch = jax.ShapeDtypeStruct(shape, jnp.int32, sharding=b.batch_sharding)
    return {"step": b.step_fn, "args": (state, batch), "tokens_per_step": b.batch * a.seq_len,
            "params": b.n_params, "info": {"mesh": dict(b.mesh.shape), "remat": a.remat,
                                           "batch": b.batch, "seq_len": a.seq_len}}


def whole_checkpoint(directory: str) -> int | None:
    """The newest committed step whose objects are what its save wrote (ckpt_manifest.py),
    or None: a step truncated or changed since is skipped, said in one line, and deleted
    (this run saves it again; orbax saves no step at or below the newest it finds). Every
    process lists the same objects and so chooses the same step. Called before orbax's
    CheckpointManager is made, which then lists the directory without the deleted steps."""
    import jax
    from ckpt_manifest import committed_steps, newest_whole, remove

    chosen, skipped = newest_whole(directory, committed_steps(directory))
    if not skipped:
        return chosen
    said = "; ".join(f"step {step}: {why}" for step, why in skipped)
    if chosen is None:
        fail(f"no checkpoint in {directory} is whole ({said}); move them aside to start afresh, "
             "or resume from another run.")
    if jax.process_index() == 0:
        sys.stderr.write(f"{PROG}: skipped checkpoint {said}; restoring step {chosen} (deleted: "
                         f"this run saves {'it' if len(skipped) == 1 else 'them'} again)\n")
        sys.stderr.flush()
        for step, _ in skipped:
            remove(directory, step)
    if jax.process_count() > 1:  # nobody reads the directory again before process 0 is done
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("podctl-damaged-checkpoints-removed")
    return chosen


def record_manifest(directory: str, step: int | None) -> None:
    """Process 0 writes what committed step STEP holds (ckpt_manifest.py); a failure to
    write it costs the check on that step, not the run."""
    import jax

    if step is None or jax.process_index() != 0:
        return
    from ckpt_manifest import write

    try:
        write(directory, step)
    except Exception as e:  # noqa: BLE001 - the step itself is saved; say it and go on
        sys.stderr.write(f"{PROG}: step {step}'s manifest not written ({type(e).__name__}: {e}); "
                         "its objects cannot be checked before a restore\n")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.data.endswith(".txt"):
        if a.vocab != 256:
            sys.stderr.write(f"{PROG}: --data .txt is read as bytes: vocab 256, not {a.vocab}\n")
        a.vocab = 256
    keep_stdout_for_metrics()
    configure_storage_emulator()
    t_start = time.time()
    import jax

    set_precision(a)
    init_distributed(a.heartbeat_timeout)
    stop = StopFlag()
    stop.install()

    if a.no_shard and jax.process_count() > 1:
        fail("--no-shard runs on one device: use it with a single process")
    b = build(a, jax.devices() if not a.no_shard else jax.local_devices())
    mesh, abstract, state_sharding, n_params = b.mesh, b.abstract, b.state_sharding, b.n_params
    batch_sharding, step_fn = b.batch_sharding, b.step_fn
    data = Data(a)
    if b.elastic is not None and jax.process_index() == 0:
        sys.stderr.write(f"{PROG}: {b.elastic.describe()}\n")
        sys.stderr.flush()

    state = None  # restored below, else made fresh (not both: an init is a compile and a run)

    # -- checkpoints: restore the latest, sharded as above --
    manager, start_step, last_saved, local, restored = None, 0, None, None, {}
    if a.checkpoint_dir:
        import orbax.checkpoint as ocp

        directory = a.checkpoint_dir
        if "://" not in directory:
            directory = os.path.abspath(directory)
        latest = whole_checkpoint(directory)  # first: the manager lists what is left
        manager = ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
            save_interval_steps=a.checkpoint_every, max_to_keep=a.keep,
            enable_async_checkpointing=True))
        target = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                              abstract, state_sharding)
        here = None
        if a.local_every:  # the local tier: used when every process has the same step
            from local_ckpt import LocalTier, agree, default_root

            # an elastic run's process numbers change with its slices: a host's copy is
            # named by its place in its slice, which does not
            host = (f"worker-{os.environ.get('TPU_WORKER_ID', '0')}" if a.elastic
                    else f"process-{jax.process_index()}")
            local = LocalTier(a.local_ckpt_dir or default_root(), directory, host, a.local_every)
            here = agree(local.usable_steps(target))
        t_restore = time.time()
        if here is not None and (latest is None or here >= latest):
            state = local.restore(here, target)
            start_step, last_saved, local.last_saved = here, latest, here
            restored = {"restored_from": "local", "restored_step": here}
        elif latest is not None:
            state = manager.restore(latest, args=ocp.args.StandardRestore(target))
            start_step = last_saved = int(latest)
            restored = {"restored_from": "gcs" if "://" in directory else "checkpoint-dir",
                        "restored_step": start_step}
        if restored:
            restored["restore_s"] = round(time.time() - t_restore, 3)
            if restored["restored_from"] == "local":
                source = f"the local copy on every host ({local.dir.parent})"
            else:
                source = directory + (" (the hosts' local copies are missing, differ or are "
                                      "older)" if local is not None else "")
            if jax.process_index() == 0:
                sys.stderr.write(f"{PROG}: restored step {start_step} from {source} in "
                                 f"{restored['restore_s']:.2f} s\n")
    if state is None:  # parameters are created where they live: each device makes only its own shards
        state = jax.jit(b.init_state, out_shardings=state_sharding)(jax.random.key(a.seed))

    unrecorded = None  # the step whose save is under way: its manifest comes once it commits

    def save(step: int, force: bool) -> None:
        nonlocal last_saved, unrecorded
        # orbax would also save the very first step of a fresh run; only every K-th here
        # (and a stop before the first step has nothing worth saving)
        due = force or step % a.checkpoint_every == 0
        if manager is None or step in (0, last_saved) or not due:
            return
        began = time.time()
        if manager.save(step, args=ocp.args.StandardSave(state), force=force):
            record_manifest(directory, unrecorded)  # save() waited for the one before to commit
            last_saved, unrecorded = step, step
            # save_s: what the step loop waited for (the write goes on in the background)
            emit("checkpoint", step=step, save_s=round(time.time() - began, 4))

    def finish_saves() -> None:
        if manager is not None:
            manager.wait_until_finished()
            record_manifest(directory, unrecorded)
            manager.close()

    def save_local(step: int, force: bool) -> None:
        if local is not None and (local.due(step) or (force and step and step != local.last_saved)):
            local.save(step, state, wait=force)

    peak, note = peak_flops(jax.devices() if not a.no_shard else jax.local_devices()[:1],
                            a.peak_flops)
    config = {"params": n_params, "devices": mesh.devices.size, "processes": jax.process_count(),
              "platform": jax.devices()[0].platform, "mesh": dict(mesh.shape), "batch": b.batch,
              "seq_len": a.seq_len, "peak_flops_per_s": peak, "start_step": start_step,
              "restore_s": 0.0, **restored}  # a restore: where from, which step, its time
    if note:
        config["mfu_note"] = note
    if b.elastic is not None:
        config.update(slices=b.elastic.slices, full_slices=b.elastic.full, micro_batches=b.micro)
    emit("config", **config)

    tokens_per_step = b.batch * a.seq_len
    step, loss, first = start_step, None, True
    scalars, profile, progress = Scalars(a.tensorboard_dir), ProfileRequests(), Progress()
    progress.note(step)  # the process index, before the first (compiling) step
    t_prev = time.time()
    while True:
        if stop.agreed():  # at a step boundary, on every process alike
            profile.finish(step)
            save(step, force=True)
            save_local(step, force=True)
            finish_saves()
            scalars.close()
            emit("preempted", step=step)
            return 143
        if step >= a.steps:
            break
        if not first:
            profile.before_step(step)
        t_batch = time.time()
        batch = data.global_batch(step, batch_sharding, b.batch, b.micro)
        host_s = time.time() - t_batch  # this host's own work: nothing here waits for a peer
        if first:
            compiled_everywhere(step_fn, state, batch)
        state, loss_arr = step_fn(state, batch)
        loss = float(loss_arr)  # waits for the step: the time below is the step's
        step += 1
        now = time.time()
        dt, t_prev = now - t_prev, now
        tps = tokens_per_step / dt
        line = {"step": step, "loss": loss, "step_time_s": dt, "tokens_per_s": tps,
                "mfu": (6 * n_params * tps / peak) if peak else None}
        if first:
            line["compile"] = True
            first = False
        emit("step", **line)
        progress.note(step, *((None, None) if line.get("compile") else (host_s, dt)))
        scalars.step(line)
        profile.after_step(step)
        save(step, force=False)
        save_local(step, force=False)
        t_prev = time.time() if manager is not None else t_prev  # a save's wait is not a step's
    profile.finish(step)  # a trace the run outlived: what it caught
    save(step, force=True)
    save_local(step, force=True)
    finish_saves()
    scalars.close()
    emit("done", step=step, loss=loss, wall_s=time.time() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
