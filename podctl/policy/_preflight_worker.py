"""The compile of `podctl preflight`, in a process of its own (podctl/policy/preflight.py starts
it with `python -m podctl.policy._preflight_worker REQUEST.json RESULT.json`).

It imports jax with the CPU platform only (no real TPU or GPU is probed), asks libtpu
for the devices of a TPU topology that is not attached, imports the user's script
without running it (`__name__` is `"__podctl_preflight__"`, `PODCTL_PREFLIGHT=1`),
calls the script's `preflight(argv, devices)` hook, and lowers and compiles the step it
hands back with the real TPU compiler. What the compiler says goes to RESULT.json as
plain numbers; the parent turns them into a report. Nothing of podctl above this file
is imported here: it is a separate world, like the script it runs.

Exit codes: 0 a result was written (fits or not); 2 the script or its hook is at fault
(its own error is on stderr); 3 libtpu or the topology is unavailable.
"""

from __future__ import annotations

import json
import math
import os
import re
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

EXIT_SCRIPT = 2
EXIT_NO_TPU = 3
# libtpu's message when the program does not fit, e.g. "the total memory required for HLO
# temporaries (358.21G) exceeds available HBM (95.74G)". G is GiB there (95.74 = v5p's).
_OOM = re.compile(r"required for (?P<what>[\w ]+?) \((?P<need>[0-9.]+)(?P<unit>[KMGT])\) exceeds "
                  r"available HBM \((?P<have>[0-9.]+)(?P<unit2>[KMGT])\)")
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _say(text: str) -> None:
    sys.stderr.write(f"podctl preflight: {text}\n")
    sys.stderr.flush()


def _bytes_per_device(args: Any) -> int:
    """What the arguments occupy on one device: each leaf's shard shape x its itemsize."""
    import jax
    import numpy as np

    total = 0
    for leaf in jax.tree.leaves(args):
        shape = tuple(leaf.shape)
        sharding = getattr(leaf, "sharding", None)
        if sharding is not None:
            shape = tuple(sharding.shard_shape(shape))
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


def _dot_flops(eqn: Any) -> float:
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    lhs = eqn.invars[0].aval.shape
    out = eqn.outvars[0].aval.shape
    flops: float = 2.0 * math.prod(out) * math.prod(lhs[d] for d in lhs_contract)
    return flops


def _sub_jaxprs(eqn: Any) -> list[Any]:
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(item, "jaxpr", item)  # ClosedJaxpr -> Jaxpr
            if hasattr(inner, "eqns"):
                found.append(inner)
    return found


def matmul_flops(jaxpr: Any) -> tuple[float, float, int]:
    """Matmul FLOPs of a traced step, (loops at their trip counts, loop bodies once, loops
    of unknown trip count). XLA's cost analysis counts a while loop's body once, so a
    lax.scan over 48 layers shows as one layer; the difference of the first two is what
    its figure leaves out. dot_general only (the bulk of a transformer's FLOPs)."""
    full = once = 0.0
    unknown = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            f = _dot_flops(eqn)
            full, once = full + f, once + f
            continue
        subs = _sub_jaxprs(eqn)
        if not subs:
            continue
        counted = [matmul_flops(s) for s in subs]
        if name == "cond":  # one branch runs: the costliest, as XLA counts it too
            f, o, u = max(counted)
            full, once, unknown = full + f, once + o, unknown + u
            continue
        trips = eqn.params.get("length", 1) if name == "scan" else 1
        if name == "while":
            unknown += 1
        for f, o, u in counted:
            full, once, unknown = full + trips * f, once + o, unknown + u
    return full, once, unknown


def _topology_devices(request: dict[str, Any]) -> list[Any]:
    from jax.experimental import topologies

    topo = topologies.get_topology_desc(
        platform="tpu", topology_name=request["topology_name"],
        chip_config_name=request["chip_config_name"],
        chips_per_host_bounds=tuple(request["chips_per_host_bounds"]),
        num_slices=request["num_slices"])
    return list(topo.devices)


def _versions() -> dict[str, str]:
    """What this compile ran with: the interpreter's Python and its jax, jaxlib, libtpu."""
    import platform
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in ("jax", "jaxlib", "libtpu", "libtpu-nightly"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def _load_hook(script: Path) -> Any:
    os.environ["PODCTL_PREFLIGHT"] = "1"
    sys.path.insert(0, str(script.parent))
    sys.argv = [str(script)]
    namespace = runpy.run_path(str(script), run_name="__podctl_preflight__")
    hook = namespace.get("preflight")
    if not callable(hook):
        _say(f"{script.name} has no preflight(argv, devices) function: see docs/guides/preflight.md, "
             "'Preflight', for the three lines a script adds")
        sys.exit(EXIT_SCRIPT)
    return hook


def _memory(compiled: Any) -> dict[str, int]:
    m = compiled.memory_analysis()
    return {"arguments": int(m.argument_size_in_bytes), "outputs": int(m.output_size_in_bytes),
            "aliased": int(m.alias_size_in_bytes), "temporaries": int(m.temp_size_in_bytes),
            "code": int(m.generated_code_size_in_bytes)}


def run(request: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        import jax  # noqa: F401  (the CPU platform only: JAX_PLATFORMS=cpu, set by the parent)

        devices = _topology_devices(request)
    except Exception as e:  # ImportError, or libtpu refusing the topology
        _say(f"libtpu cannot describe {request['topology_name']} x {request['num_slices']}: "
             f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
        sys.exit(EXIT_NO_TPU)
    t_topology = time.perf_counter() - t0
    script = Path(request["script"])
    hook = _load_hook(script)
    spec = hook(list(request["args"]), devices)
    if not isinstance(spec, dict) or "step" not in spec or "args" not in spec:
        _say(f"{script.name}: preflight() must return a dict with 'step' (the jitted train "
             "step) and 'args' (a tuple of jax.ShapeDtypeStruct trees)")
        sys.exit(EXIT_SCRIPT)
    step, args = spec["step"], tuple(spec["args"])
    if not hasattr(step, "trace"):
        step = jax.jit(step)
    result: dict[str, Any] = {
        "versions": _versions(), "devices": len(devices), "device_kind": devices[0].device_kind,
        "tokens_per_step": spec.get("tokens_per_step"), "params": spec.get("params"),
        "info": spec.get("info") or {}, "topology_s": round(t_topology, 3),
        "argument_bytes_from_shardings": _bytes_per_device(args)}
    t1 = time.perf_counter()
    traced = step.trace(*args)
    full, once, unknown = matmul_flops(traced.jaxpr.jaxpr)
    lowered = traced.lower()
    t2 = time.perf_counter()
    result.update(lower_s=round(t2 - t1, 3), matmul_flops=full, matmul_flops_loops_once=once,
                  loops_unknown_trips=unknown)
    try:
        compiled = lowered.compile()
    except Exception as e:  # jax's JaxRuntimeError; its text says what ran out
        text = str(e)
        result["compile_s"] = round(time.perf_counter() - t2, 3)
        oom = _OOM.search(text)
        if "RESOURCE_EXHAUSTED" not in text:
            _say(f"the TPU compiler refused the step: {text.strip().splitlines()[0]}")
            sys.exit(EXIT_SCRIPT)
        result.update(compiled=False, compiler_message=text.strip().splitlines()[0][:500])
        if oom:
            result["oom"] = {"what": oom["what"],
                             "needed": float(oom["need"]) * _UNITS[oom["unit"]],
                             "available": float(oom["have"]) * _UNITS[oom["unit2"]]}
        return result
    result["compile_s"] = round(time.perf_counter() - t2, 3)
    cost = compiled.cost_analysis()
    cost = (cost[0] if cost else {}) if isinstance(cost, list) else (cost or {})
    result.update(compiled=True, memory=_memory(compiled),
                  xla_flops_per_device=float(cost.get("flops", 0.0)),
                  xla_bytes_accessed_per_device=float(cost.get("bytes accessed", 0.0)),
                  xla_optimal_seconds=cost.get("optimal_seconds"))
    return result


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text())
    try:
        result = run(request)
    except SystemExit as e:  # the script's own fail(): its message is on stderr already
        code = e.code if isinstance(e.code, int) else 1
        return code if code in (EXIT_SCRIPT, EXIT_NO_TPU) else EXIT_SCRIPT
    except Exception as e:
        traceback.print_exc()
        # podctl shows only the last lines (one line in all): say where and what here
        frames = traceback.extract_tb(e.__traceback__)
        where = frames[-1] if frames else None
        at = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
        _say(f"{Path(request['script']).name}'s preflight failed{at}: {type(e).__name__}: {e}")
        return EXIT_SCRIPT
    Path(argv[2]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
