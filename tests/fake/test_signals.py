"""podctl.base.signals' rules, in this process: a stop signal is decided by the signal that
arrived, not by what SIGINT is set to; one the parent ignored stays ignored; every
handler podctl set is put back. (tests/test_stop_signals.py: the same for real
commands, started as a shell, nohup and setsid start them.)"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest

from podctl.base import signals
from podctl.base._sync import run_sync

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def handlers_put_back() -> Iterator[None]:
    """Each test starts from Python's defaults and leaves this process as it found it."""
    before = {sig: signal.getsignal(sig) for sig in STOPS}
    received = list(signals.received)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)
    signals.received[:] = received


def _handlers() -> dict[int, object]:
    return {sig: signal.getsignal(sig) for sig in STOPS}


def test_sigterm_raises_keyboardinterrupt_when_the_parent_ignored_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell starts a background job
    signals.route_stop_signals()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before os.kill returns
    assert signals.received[-1] == signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # still ignored


def test_a_signal_the_parent_ignored_stays_ignored_through_every_handler_podctl_sets():
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a process
    signals.route_stop_signals()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    with signals.on_stop(lambda signum: None), signals.first_stop_only():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert callable(signal.getsignal(signal.SIGTERM))


def test_run_sync_cancels_its_coroutine_on_sigterm_with_sigint_ignored_and_puts_handlers_back():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signals.route_stop_signals()
    before = _handlers()
    cleaned: list[str] = []

    async def work() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # an undo that awaits, as up's does
            cleaned.append("undone")
            raise

    with pytest.raises(KeyboardInterrupt):
        run_sync(work())
    assert cleaned == ["undone"]
    assert _handlers() == before


def test_first_stop_only_takes_the_first_signal_and_ignores_the_next():
    signals.route_stop_signals()
    calls: list[int] = []
    with signals.on_stop(calls.append), signals.first_stop_only():
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGTERM)
    assert calls == [signal.SIGHUP]
