"""One thin sync face over podctl's async core, that also works inside a running
event loop (a Jupyter kernel), where asyncio.run() refuses to start."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Callable, Coroutine, TypeVar

T = TypeVar("T")
CLEANUP_SECONDS = 120.0  # how long an interrupted call's cleanup (an undo) may take


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


class LoopThread:
    """An event loop of podctl's own in a helper thread, for objects that live across
    calls (a notebook's Run holds SSH connections that belong to one loop).

    `run(coro)` blocks the caller until CORO is done, whether or not the caller's
    thread runs a loop of its own; Ctrl-C (a kernel interrupt) cancels CORO, which
    then cleans up in its own loop before the KeyboardInterrupt reaches the caller.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="podctl-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], *, poll: Callable[[], None] | None = None,
            poll_seconds: float = 0.25) -> T:
        """Run CORO on the loop; while it runs, call POLL every POLL_SECONDS in the
        caller's thread (where a notebook's output goes to the cell that is running)."""
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("this podctl connection is closed")
        started, ended = threading.Event(), threading.Event()

        async def runner() -> T:
            started.set()
            try:
                return await coro
            finally:
                ended.set()  # after the coroutine's own cleanup (stop, undo) has run

        future = asyncio.run_coroutine_threadsafe(runner(), self.loop)
        try:
            while poll is not None and not future.done():
                concurrent.futures.wait([future], timeout=poll_seconds)
                poll()
            return future.result()
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP routed to it (podctl.signals)
            from podctl.signals import stop_signals_ignored

            # The concurrent future says "cancelled" at once; the task on the loop only
            # then starts its cleanup. Wait for that (a second signal may not cut it
            # short), or the caller would close the loop under an undo half done.
            with stop_signals_ignored():
                future.cancel()
                if started.is_set():
                    ended.wait(timeout=CLEANUP_SECONDS)
            raise

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()
