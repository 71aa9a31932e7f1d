"""Every way a podctl process can be told to stop takes the path Ctrl-C takes.

`timeout` and a CI cancel send SIGTERM, a closed terminal SIGHUP; left at their
defaults they end the process at once, skipping the undo that deletes a slice a
failed or interrupted `up` created. `route_stop_signals()` makes SIGTERM and SIGHUP
call whatever handles SIGINT at that moment: asyncio's runner (which cancels the
main task, so its `except BaseException` undo runs), Python's default (which raises
KeyboardInterrupt), a queue loop's "finish the pass, then stop", or nothing at all
while an undo has SIGINT ignored. One path, three signals.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from collections.abc import Iterator

from podctl.vocabulary import EXIT_INTERRUPTED
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_ROUTED = (signal.SIGTERM, signal.SIGHUP)
received: list[int] = []  # the stop signals this process got, in order (for its exit code)


def _as_sigint(signum: int, frame: FrameType | None) -> None:
    received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.SIG_IGN:
        return  # an undo is under way: it must not be cut short
    if callable(handler):
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt  # SIG_DFL or a handler set outside Python


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def route_stop_signals(*, only_defaults: bool = False) -> dict[int, object]:
    """Send SIGTERM and SIGHUP down SIGINT's path in this process -> the handlers they
    replaced. ONLY_DEFAULTS (a library in someone else's process): leave a signal alone
    whose handler its owner has set."""
    previous: dict[int, object] = {}
    if not _main_thread():
        return previous
    for sig in _ROUTED:
        current = signal.getsignal(sig)
        if current is _as_sigint or (only_defaults and current is not signal.SIG_DFL):
            continue
        previous[sig] = signal.signal(sig, _as_sigint)
    return previous


def restore(previous: dict[int, object]) -> None:
    if not _main_thread():
        return
    for sig, handler in previous.items():
        signal.signal(sig, handler)  # type: ignore[arg-type]


@contextlib.contextmanager
def first_stop_only() -> Iterator[None]:
    """While a slice is being made: the first stop signal (any of the three) goes down
    SIGINT's path and starts the undo; later ones are ignored, so that a second Ctrl-C
    (or a `timeout` that follows its TERM) cannot land between the first and the undo."""
    if not _main_thread():
        yield
        return
    first = signal.getsignal(signal.SIGINT)
    fired = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        if signum != signal.SIGINT:
            received.append(signum)
        if callable(first) and first is not _as_sigint:
            first(signal.SIGINT, frame)
            return
        if first is not signal.SIG_IGN:
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)  # type: ignore[arg-type]


@contextlib.contextmanager
def stop_signals_ignored() -> Iterator[None]:
    """While podctl undoes a creation, no second signal (of any of the three) may cut
    the undo short."""
    if not _main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def ignore_further_stops() -> None:
    """The stop was handled and podctl is on its way out: a second signal now must not
    kill it by the default action (Python's shutdown puts that back for every signal
    it had a handler for), which would lose the exit code that says what happened."""
    if _main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def exit_code(default: int = EXIT_INTERRUPTED) -> int:
    """128 + the signal that stopped the process (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + received[0] if received else default


def name_of_stop() -> str:
    return signal.Signals(received[0]).name if received else "SIGINT"
