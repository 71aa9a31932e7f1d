"""One thin sync face over podctl's async core, that also works inside a running
event loop (a Jupyter kernel), where asyncio.run() refuses to start."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run CORO to completion and return its result (or raise its error)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # A loop runs in this thread: run ours in a helper thread and wait for it.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(coro)
        except BaseException as e:  # handed back to the caller below
            box["error"] = e

    thread = threading.Thread(target=target, name="podctl-sync", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
