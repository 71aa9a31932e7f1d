"""podctl: run JAX training jobs on Cloud TPU Pod slices (v5p, v6e, v5e, v4), from the CLI or from Python.

    import podctl

    with podctl.connect(backend="fake") as cloud:      # the local fake cloud; "gcp" for Google's
        with cloud.up("v5p-16") as slice:               # deleted when the block ends
            run = slice.run("train.py", args=["--steps", "20"])
            run.wait()
            print(run.checkpoints())

The public names (`__all__`) are imported on first use, so `import podctl` (and the
CLI's start) stays fast; see podctl.api for the objects' methods.
"""

from __future__ import annotations

import warnings
from typing import Any

# asyncssh 2.24 names cryptography's DSA classes at import, and cryptography 47+ warns on
# each name: ten lines on stderr before every command's output (and before a one-line
# error), about a key type podctl never uses. Nothing a user can act on, so it is silenced
# here, for asyncssh's modules only, wherever podctl is imported (CLI, fake hosts, tests).
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")

__all__ = ["connect", "Cloud", "Slice", "Run", "Checkpoint", "PodctlError", "plan", "frontier"]

_WHERE = {
    "connect": "podctl.api", "Cloud": "podctl.api", "Slice": "podctl.api", "Run": "podctl.api",
    "Checkpoint": "podctl.jobs.checkpoints", "PodctlError": "podctl.base.errors",
    "plan": "podctl.policy.planner.core", "frontier": "podctl.policy.planner.frontier",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'podctl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
