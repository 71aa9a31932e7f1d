"""Know before you rent: compile a script's training step for a TPU slice that is not
attached, with the real TPU compiler (libtpu from PyPI), and read what the compiled
program needs per chip (HBM) and costs per step (FLOPs).

The compile runs in a child process (podctl/policy/_preflight_worker.py) with the CPU platform
only, so no TPU or GPU of this machine is probed and podctl's own process never imports
jax. The script takes part through one function (docs/guides/preflight.md):

    def preflight(argv: list[str], devices: list) -> dict:
        return {"step": jitted_train_step, "args": (abstract_state, abstract_batch),
                "tokens_per_step": batch * seq_len, "params": n_params}

where the args are jax.ShapeDtypeStruct trees with shardings over a Mesh of DEVICES.
The script is imported (not run: `__name__` is "__podctl_preflight__", and
PODCTL_PREFLIGHT=1 is set), so code under `if __name__ == "__main__":` does not start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podctl.base import children
from podctl.base.errors import ConfigError, DoesNotFitError, PreflightError, UsageError
from podctl.base.topology import parse_multislice
from podctl.base.vocabulary import PREFLIGHT_TIMEOUT_SECONDS

GIB = 2**30
DEFAULT_MFU = 0.45  # as `podctl plan` assumes, and says so
DEFAULT_TIMEOUT_S = PREFLIGHT_TIMEOUT_SECONDS
WORKER = str(Path(__file__).with_name("_preflight_worker.py"))
INSTALL_HINT = "pip install -e '.[jax,tpu]' (libtpu from PyPI; README.md, 'On a fresh machine')"


@dataclass(frozen=True)
class Target:
    """What libtpu needs to describe a slice, and what its generation has per chip."""

    slice_type: str
    num_slices: int
    generation: str
    topology: str
    topology_name: str  # e.g. "v5:8x16x16"
    chip_config_name: str
    chips_per_host_bounds: tuple[int, int, int]
    chips: int  # all slices together
    hbm_bytes_per_chip: int
    peak_flops_per_chip: float


def target_for(slice_type: str, num_slices: int = 1) -> Target:
    """`v5p-N` (any generation of data/generations.toml) x K -> the topology request for
    libtpu: the record names libtpu's topology ("v5:8x8x16"), chip config ("megacore":
    one JAX device per v5p chip, its 2 TensorCores as one) and the chips on one host."""
    multi = parse_multislice(slice_type, num_slices)
    kind = multi.slice_type
    generation = kind.generation
    bounds = tuple(int(side) for side in kind.chips_per_host_bounds.split(","))
    return Target(slice_type=kind.name, num_slices=num_slices, generation=generation.key,
                  topology=kind.topology, topology_name=kind.libtpu_topology,
                  chip_config_name=kind.chip_config_name,
                  chips_per_host_bounds=(bounds[0], bounds[1], bounds[2]),
                  chips=multi.chips, hbm_bytes_per_chip=int(generation.hbm_gib_per_chip * GIB),
                  peak_flops_per_chip=generation.peak_flops_per_chip)


@dataclass(frozen=True)
class CompileEnv:
    """The interpreter a compile runs in, and what to say about it: the hosts' locked
    environment built here (steps/preflight_env.py), or this machine's own."""

    python: str  # the interpreter's path
    source: str  # e.g. "the hosts' environment 1a2b3c4d5e6f (Python 3.12, from requirements.txt)"
    key: str | None = None  # the environment's key (env_lock), None for this machine's

    @classmethod
    def this_machine(cls, why: str) -> CompileEnv:
        return cls(python=sys.executable, source=f"this machine's jax ({why})")


@dataclass
class PreflightResult:
    """One compile's figures, per chip unless named otherwise."""

    target: Target
    script: str
    args: list[str]
    raw: dict[str, Any]
    mfu: float
    wall_s: float
    env: CompileEnv | None = None
    fits: bool = field(init=False)

    def __post_init__(self) -> None:
        self.fits = bool(self.raw.get("compiled")) and self.hbm_needed <= self.hbm_capacity

    # -- memory -----------------------------------------------------------------------
    @property
    def memory(self) -> dict[str, int]:
        if self.raw.get("compiled"):
            return dict(self.raw["memory"])
        # The compiler stopped at "does not fit": it names the temporaries it needed; the
        # arguments are the shards of the inputs (their shardings say it exactly).
        oom = self.raw.get("oom") or {}
        return {"arguments": int(self.raw.get("argument_bytes_from_shardings") or 0),
                "outputs": 0, "aliased": 0, "temporaries": int(oom.get("needed") or 0),
                "code": 0}

    @property
    def hbm_needed(self) -> int:
        """arguments + outputs - aliased (donated inputs reused for outputs) + temporaries
        + the program's code: what must be in HBM at once at the step's peak."""
        m = self.memory
        return m["arguments"] + m["outputs"] - m["aliased"] + m["temporaries"] + m["code"]

    @property
    def hbm_capacity(self) -> int:
        return self.target.hbm_bytes_per_chip

    @property
    def headroom(self) -> int:
        return self.hbm_capacity - self.hbm_needed

    # -- FLOPs and time ----------------------------------------------------------------
    @property
    def xla_flops(self) -> float | None:
        """XLA's cost_analysis() FLOPs of the compiled program, all chips together."""
        per = self.raw.get("xla_flops_per_device")
        return None if per is None else per * self.raw["devices"]

    @property
    def loop_flops(self) -> float:
        """The matmul FLOPs of loop trips that XLA's analysis leaves out (it counts a
        while loop's body once; a scan over L layers runs it L times)."""
        flops: float = max(0.0, self.raw.get("matmul_flops", 0.0) - self.raw.get("matmul_flops_loops_once", 0.0))
        return flops

    @property
    def flops_per_step(self) -> float | None:
        x = self.xla_flops
        return None if x is None else x + self.loop_flops

    @property
    def six_n_tokens(self) -> float | None:
        n, t = self.raw.get("params"), self.raw.get("tokens_per_step")
        return 6.0 * n * t if n and t else None

    @property
    def step_seconds(self) -> float | None:
        f = self.flops_per_step
        peak = self.target.chips * self.target.peak_flops_per_chip
        return None if f is None else f / (peak * self.mfu)

    @property
    def tokens_per_second(self) -> float | None:
        s, t = self.step_seconds, self.raw.get("tokens_per_step")
        return t / s if s and t else None

    def versions_line(self) -> str:
        """E.g. "jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1 on Python 3.12.3 (the hosts' ...)"."""
        v = self.raw.get("versions") or {}
        libtpu = v.get("libtpu") or v.get("libtpu-nightly")
        parts = [f"{name} {v[name]}" for name in ("jax", "jaxlib") if v.get(name)]
        parts.append(f"libtpu {libtpu}" if libtpu else "no libtpu")
        where = f" ({self.env.source})" if self.env is not None else ""
        return f"{', '.join(parts)} on Python {v.get('python', '?')}{where}"

    def advice(self) -> str:
        m = self.memory
        parts = []
        if not self.raw.get("info", {}).get("remat"):
            parts.append("--remat (recompute activations in the backward pass)")
        mesh = self.raw.get("info", {}).get("mesh")
        fsdp = f" (now {mesh.get('fsdp')})" if isinstance(mesh, dict) and "fsdp" in mesh else ""
        parts.append(f"a larger fsdp axis{fsdp} on a larger slice")
        parts.append("a smaller --batch")
        heavy = "temporaries (activations)" if m["temporaries"] >= m["arguments"] else \
            "arguments (parameters and optimizer state)"
        return f"most of it is {heavy}; try " + ", ".join(parts)

    def does_not_fit_line(self) -> str:
        missing = -self.headroom
        return (f"the step does not fit {self.target.slice_type}"
                f"{'' if self.target.num_slices == 1 else f' x {self.target.num_slices}'}: "
                f"it needs {gib(self.hbm_needed)} of HBM per chip, the chip has "
                f"{gib(self.hbm_capacity)}, {gib(missing)} missing; {self.advice()}.")

    def to_json(self) -> dict[str, Any]:
        t, m = self.target, self.memory
        return {
            "slice": t.slice_type, "num_slices": t.num_slices, "generation": t.generation,
            "topology": t.topology_name, "chips": t.chips, "devices": self.raw.get("devices"),
            "device_kind": self.raw.get("device_kind"), "script": self.script, "args": self.args,
            "fits": self.fits, "compiled": bool(self.raw.get("compiled")),
            "hbm": {"per_chip_bytes": self.hbm_capacity, "needed_bytes": self.hbm_needed,
                    "headroom_bytes": self.headroom, "arguments_bytes": m["arguments"],
                    "outputs_bytes": m["outputs"], "aliased_bytes": m["aliased"],
                    "temporaries_bytes": m["temporaries"], "code_bytes": m["code"],
                    "compiler_message": self.raw.get("compiler_message")},
            "flops": {"per_step": self.flops_per_step, "xla_cost_analysis": self.xla_flops,
                      "xla_cost_analysis_per_chip": self.raw.get("xla_flops_per_device"),
                      "loop_trips_added": self.loop_flops,
                      "loops_unknown_trips": self.raw.get("loops_unknown_trips", 0),
                      "six_n_tokens": self.six_n_tokens,
                      "ratio_to_six_n_tokens": (self.flops_per_step / self.six_n_tokens
                                                if self.flops_per_step and self.six_n_tokens
                                                else None)},
            "params": self.raw.get("params"), "tokens_per_step": self.raw.get("tokens_per_step"),
            "predicted": {"mfu": self.mfu, "peak_flops_per_chip": t.peak_flops_per_chip,
                          "step_seconds": self.step_seconds,
                          "tokens_per_second": self.tokens_per_second},
            "compile_seconds": self.raw.get("compile_s"), "lower_seconds": self.raw.get("lower_s"),
            "wall_seconds": round(self.wall_s, 3), "info": self.raw.get("info") or {},
            "versions": self.raw.get("versions") or {},
            "environment": {"source": self.env.source if self.env else "this machine's jax",
                            "key": self.env.key if self.env else None},
        }


def gib(n: float) -> str:
    return f"{n / GIB:,.2f} GiB"


def _child_env() -> dict[str, str]:
    """The compile sees the CPU platform only: no TPU, GPU or metadata server of this
    machine is asked; libtpu is loaded only to describe (not open) a topology."""
    env = dict(os.environ)
    env.update({
        "JAX_PLATFORMS": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "TPU_SKIP_MDS_QUERY": "1",  # libtpu: do not ask a GCE metadata server
        # libtpu takes /tmp/libtpu_lockfile unless told that several may load at once;
        # a compile opens no chip, so two preflights (or a stale lock) must not collide.
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    })
    env.pop("XLA_FLAGS", None)  # e.g. a forced host device count meant for training
    env.pop("PODCTL_FAKE_HOST", None)
    return env


_WORKER_SAYS = "podctl preflight: "  # _preflight_worker._say's prefix


def _last_lines(stderr: str, n: int = 3) -> str:
    """The script's own message from the child's stderr, without libtpu's start-up noise."""
    noise = ("WARNING", "E0000", "I0000", "W0000", "===", "learning/", "Failed to find host")
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(noise)]
    return " | ".join(lines[-n:]) if lines else "(no message)"


def compile_for(slice_type: str, script: Path, args: list[str], *, num_slices: int = 1,
                mfu: float = DEFAULT_MFU, timeout: float = DEFAULT_TIMEOUT_S,
                env: CompileEnv | None = None) -> PreflightResult:
    """Compile SCRIPT's step for `slice_type` x num_slices; the figures, fitting or not.
    ENV: the interpreter (and so the jax and libtpu) to compile with; None: this
    process's. Raises UsageError for a script that is missing or at fault, ConfigError
    when libtpu is not installed, PreflightError when the compile fails otherwise."""
    target = target_for(slice_type, num_slices)
    if not script.is_file():
        raise UsageError(f"{script}: no such script.")
    with tempfile.TemporaryDirectory(prefix="podctl-preflight-") as tmp:
        request, out = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request.write_text(json.dumps({
            "script": str(script.resolve()), "args": list(args),
            "topology_name": target.topology_name, "chip_config_name": target.chip_config_name,
            "chips_per_host_bounds": list(target.chips_per_host_bounds),
            "num_slices": target.num_slices}))
        began = time.perf_counter()
        try:
            # the worker as a file of its own: it needs only the standard library and jax, so
            # it runs in an interpreter that has no podctl (the hosts' environment built
            # here); copied out, as podctl's directory on sys.path would shadow the standard
            # library's `numbers` with podctl/base/numbers.py
            worker = Path(tmp) / "podctl_preflight_worker.py"
            shutil.copyfile(WORKER, worker)
            proc = children.run([env.python if env else sys.executable, str(worker), str(request),
                                 str(out)], env=_child_env(), cwd=str(script.resolve().parent),
                                stdin=subprocess.DEVNULL, timeout=timeout)  # ends with podctl
        except subprocess.TimeoutExpired as e:
            raise PreflightError(f"the compile for {target.slice_type} did not finish in "
                                 f"{timeout:.0f} s; try a smaller slice first.") from e
        wall = time.perf_counter() - began
        if proc.returncode == 3:
            hint = (f"pin a jax whose libtpu knows {target.generation}" if env and env.key
                     else f"install it: {INSTALL_HINT}")
            raise ConfigError(f"preflight needs libtpu, which cannot describe "
                              f"{target.topology_name} here ({_last_lines(proc.stderr, 1)}); {hint}.")
        if proc.returncode == 2:
            # the worker's own last line says it all (where the script raised, and what)
            last = _last_lines(proc.stderr, 1)
            said = (last.removeprefix(_WORKER_SAYS) if last.startswith(_WORKER_SAYS)
                    else _last_lines(proc.stderr))
            raise UsageError(f"{' '.join([script.name, *args])}: {said}")
        if proc.returncode != 0 or not out.is_file():
            raise PreflightError(f"the preflight compile failed (exit {proc.returncode}): "
                                 f"{_last_lines(proc.stderr)}")
        raw = json.loads(out.read_text())
    return PreflightResult(target=target, script=str(script), args=list(args), raw=raw,
                           mfu=mfu, wall_s=wall, env=env)


def require_fit(result: PreflightResult) -> PreflightResult:
    """The result if the step fits; DoesNotFitError with the numbers otherwise."""
    if not result.fits:
        raise DoesNotFitError(result.does_not_fit_line(), result)
    return result


def load_result(path: Path) -> dict[str, Any]:
    """A `podctl preflight --json` report from a file, checked enough to price it."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"--from-preflight {path}: not a readable `podctl preflight --json` "
                         f"report ({e}).") from e
    flops = (data.get("flops") or {}).get("per_step") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not flops or not data.get("tokens_per_step") \
            or not data.get("slice"):
        raise UsageError(f"--from-preflight {path}: no compiled FLOPs per step in it; make it "
                         "with `podctl preflight --slice v5p-N SCRIPT ... --json > FILE`.")
    return data
