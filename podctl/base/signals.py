"""Every way a podctl process can be told to stop takes the path Ctrl-C takes.

`timeout`, a CI cancel, a supervisor and `kill` send SIGTERM, a closed terminal SIGHUP;
left at their defaults they end the process at once, skipping the undo that deletes a
slice a failed or interrupted `up` created. podctl decides from the signal that
arrived, never from what SIGINT happens to be set to: a shell starts a background job
with SIGINT ignored, and its SIGTERM must still stop it.

- `route_stop_signals()` (at start): SIGTERM and SIGHUP raise KeyboardInterrupt, or
  call SIGINT's handler where a program or asyncio set one, as Ctrl-C would.
- `on_stop(action)`: while a block runs, each stop signal that would take that path
  calls ACTION instead (a running coroutine is cancelled, a queue pass finishes first).
- `first_stop_only()`, `stop_signals_ignored()`: while a slice is made and undone, one
  signal starts the undo and none can cut it short.

A signal the parent ignored (SIG_IGN when podctl looks: SIGHUP under nohup, SIGINT in a
background job) stays ignored everywhere; podctl itself sets SIG_IGN only for the
length of an undo and on its way out. The exit code says which signal came: 128 + its
number (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from podctl.base.vocabulary import EXIT_INTERRUPTED

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_ROUTED = (signal.SIGTERM, signal.SIGHUP)
received: list[int] = []  # the stop signals this process got, in order (for its exit code)

Handler = Any  # what signal.getsignal returns: a callable, SIG_DFL, SIG_IGN or None


def _note(signum: int) -> None:
    received.append(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _ctrl_c(signum: int, frame: FrameType | None, sigint_handler: Handler) -> None:
    """What Ctrl-C does here, done for SIGNUM: SIGINT_HANDLER where a program or asyncio
    set one, else KeyboardInterrupt. SIG_IGN there does not mean this signal is ignored
    (a background job's SIGINT is): it too raises."""
    if callable(sigint_handler) and sigint_handler is not signal.default_int_handler:
        sigint_handler(signum, frame)
        return
    raise KeyboardInterrupt


def _as_sigint(signum: int, frame: FrameType | None) -> None:
    _note(signum)
    _ctrl_c(signum, frame, signal.getsignal(signal.SIGINT))


def _is_asyncio_runner(handler: Handler) -> bool:
    """asyncio.run's SIGINT handler (a partial of Runner._on_sigint): it cancels the
    loop's main task, which cannot run while podctl blocks that loop's thread."""
    owner = getattr(getattr(handler, "func", None), "__self__", None)
    return type(owner).__module__ == "asyncio.runners" and type(owner).__name__ == "Runner"


def takes_ctrl_c_path(handler: Handler) -> bool:
    """HANDLER stops the work under way as Ctrl-C does: Python's default
    (KeyboardInterrupt), podctl's routing of SIGTERM/SIGHUP, or asyncio.run's."""
    return handler is signal.default_int_handler or handler is _as_sigint or _is_asyncio_runner(handler)


def _not_ignored(handler: Handler) -> bool:
    return handler is not signal.SIG_IGN


def route_stop_signals(*, only_defaults: bool = False) -> dict[int, Handler]:
    """Send SIGTERM and SIGHUP down Ctrl-C's path in this process -> the handlers they
    replaced. One the parent ignored stays ignored. ONLY_DEFAULTS (a library in someone
    else's process): leave a signal alone whose handler its owner has set."""
    previous: dict[int, Handler] = {}
    if not _main_thread():
        return previous
    for sig in _ROUTED:
        current = signal.getsignal(sig)
        if current is _as_sigint or current is signal.SIG_IGN:
            continue
        if only_defaults and current is not signal.SIG_DFL:
            continue
        previous[sig] = signal.signal(sig, _as_sigint)
    return previous


def restore(previous: dict[int, Handler]) -> None:
    if not _main_thread():
        return
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextlib.contextmanager
def on_stop(action: Callable[[int], object], *,
            takes: Callable[[Handler], bool] = _not_ignored) -> Iterator[None]:
    """While the block runs (in the main thread; elsewhere nothing changes): each stop
    signal whose handler TAKES (by default every one not ignored) calls ACTION(signum)
    instead. The handlers are put back after, whatever happened."""
    if not _main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        _note(signum)
        action(signum)

    previous: dict[int, Handler] = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS
                                    if takes(signal.getsignal(sig))}
    try:
        yield
    finally:
        restore(previous)


@contextlib.contextmanager
def first_stop_only() -> Iterator[None]:
    """While a slice is being made: the first stop signal (any of the three) takes the
    path it took before (and starts the undo); later ones are ignored, so that a second
    Ctrl-C (or a `timeout` that follows its TERM) cannot land between the first and the
    undo."""
    before: dict[int, Handler] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    fired = False

    def first(signum: int) -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        handler = before[signum]
        if handler is _as_sigint:
            handler = before[signal.SIGINT]
        _ctrl_c(signum, None, handler)

    with on_stop(first):
        yield


@contextlib.contextmanager
def stop_signals_ignored() -> Iterator[None]:
    """While podctl undoes a creation, no second signal (of any of the three) may cut
    the undo short."""
    if not _main_thread():
        yield
        return
    previous: dict[int, Handler] = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        restore(previous)


def ignore_further_stops() -> None:
    """The stop was handled and podctl is on its way out: a second signal now must not
    kill it by the default action (Python's shutdown puts that back for every signal
    it had a handler for), which would lose the exit code that says what happened."""
    if _main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def exit_code(default: int = EXIT_INTERRUPTED) -> int:
    """128 + the signal that stopped the process (130 for Ctrl-C, 143 for SIGTERM, 129
    for SIGHUP)."""
    return 128 + received[0] if received else default


def name_of_stop() -> str:
    return signal.Signals(received[0]).name if received else "SIGINT"
