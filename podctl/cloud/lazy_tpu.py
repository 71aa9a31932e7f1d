"""google.cloud.tpu_v2, imported when podctl first uses it, not when a module names it.

The package's `__init__` loads the whole client: the async client, every transport, gRPC,
and through google-api-core's `operations_v1` the asyncio REST transport, google.auth.aio
and aiohttp (installed for the fake cloud's servers): about 0.4 s of CPU per process. A
command that only reads GCS (`podctl logs`, `runs`, `ckpt`) or the fake's daemon file
reaches `cloud/` through `steps/` and should not pay it; a command that talks to the
Cloud TPU API pays it once, at its first request or protobuf. Google's own package is
what runs either way: this only decides when it is imported.

    if TYPE_CHECKING:
        from google.cloud import tpu_v2
    else:
        from podctl.cloud.lazy_tpu import tpu_v2
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Module NAME, imported at the first attribute asked of it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self) -> str:
        return f"<{self._name}, imported on first use>"


tpu_v2 = LazyModule("google.cloud.tpu_v2")
