"""One thin sync face over podctl's async core, that also works inside a running
event loop (a Jupyter kernel), where asyncio.run() refuses to start."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from podctl.base.signals import on_stop, stop_signals_ignored, takes_ctrl_c_path

T = TypeVar("T")
CLEANUP_SECONDS = 120.0  # how long an interrupted call's cleanup (an undo) may take


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run CORO to completion and return its result (or raise its error). A stop signal
    (podctl.base.signals) cancels CORO, which cleans up (an undo, a stop on the hosts)
    before KeyboardInterrupt reaches the caller."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro)
    # A loop runs in this thread (a notebook): run ours in a helper thread and wait for it.
    helper = LoopThread()
    try:
        return helper.run(coro)
    finally:
        helper.close()


def _run_here(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(CORO), with what asyncio does for Ctrl-C done for every stop signal
    that takes Ctrl-C's path here, whatever SIGINT is set to (a background job's is
    ignored, and asyncio then handles nothing): the first cancels CORO's task, a second
    raises KeyboardInterrupt at once."""
    task: asyncio.Task[Any] | None = None
    stops = 0

    async def main() -> T:
        nonlocal task
        task = asyncio.current_task()
        return await coro

    with asyncio.Runner() as runner:
        loop = runner.get_loop()

        def cancel(signum: int) -> None:
            nonlocal stops
            stops += 1
            if stops == 1 and task is not None and not task.done():
                task.cancel()
                loop.call_soon_threadsafe(lambda: None)  # wake a select() with a long timeout
                return
            raise KeyboardInterrupt

        with on_stop(cancel, takes=takes_ctrl_c_path):
            try:
                return runner.run(main())
            except asyncio.CancelledError:
                if stops:
                    raise KeyboardInterrupt from None
                raise


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
        background = self.start(coro)
        background.wait(poll=poll, poll_seconds=poll_seconds)  # no UNTIL: returns once done
        return background.future.result()

    def start(self, coro: Coroutine[Any, Any, T]) -> Background[T]:
        """Start CORO on the loop and return at once; `.wait()` for its result."""
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

        return Background(asyncio.run_coroutine_threadsafe(runner(), self.loop), started, ended)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class Background(Generic[T]):
    """A coroutine running on a LoopThread's loop."""

    def __init__(self, future: concurrent.futures.Future[T], started: threading.Event,
                 ended: threading.Event):
        self.future, self._started, self._ended = future, started, ended

    def done(self) -> bool:
        return self.future.done()

    def wait(self, *, poll: Callable[[], None] | None = None, poll_seconds: float = 0.25,
             until: Callable[[], bool] | None = None) -> T | None:
        """Block until the coroutine is done (or UNTIL() is true: then None), calling
        POLL every POLL_SECONDS in this thread. Ctrl-C cancels the coroutine and waits
        for its own cleanup before the KeyboardInterrupt goes on."""
        # Stop signals raise KeyboardInterrupt here, in the thread that waits, also where
        # they would only cancel a task of a loop this thread runs (asyncio.run, a
        # notebook's), which cannot run while this thread waits. Once: a second signal
        # must not cut short the cleanup that the first started.
        fired = False

        def interrupt(signum: int) -> None:
            nonlocal fired
            if not fired:
                fired = True
                raise KeyboardInterrupt

        with on_stop(interrupt, takes=takes_ctrl_c_path):
            try:
                while not self.future.done():
                    if _take_callers_cancel():
                        self.cancel()
                        raise asyncio.CancelledError
                    if until is not None and until():
                        return None
                    concurrent.futures.wait([self.future], timeout=poll_seconds)
                    if poll is not None:
                        poll()
            except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (podctl.base.signals)
                self.cancel()
                raise
        return self.future.result()

    def cancel(self) -> None:
        """Cancel the coroutine and wait (a second signal may not cut it short) until its
        cleanup has run, or the caller could close the loop under an undo half done."""
        with stop_signals_ignored():
            self.future.cancel()
            if self._started.is_set():
                self._ended.wait(timeout=CLEANUP_SECONDS)


def _take_callers_cancel() -> bool:
    """True when the caller runs in a task of its own loop (asyncio.run) that was asked
    to stop before podctl's wait began, by a Ctrl-C that asyncio turned into a cancel:
    the task can see it only once this wait returns, so the wait ends now (after podctl's
    own cleanup) with CancelledError, as an await would have. The request is taken (the
    task uncancelled once), so that the cleanup the caller then runs (a `with` block's
    `down()`) waits as it should; asyncio still raises KeyboardInterrupt at the end."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no loop runs in this thread
        return False
    if task is None or task.cancelling() == 0:
        return False
    task.uncancel()
    return True
