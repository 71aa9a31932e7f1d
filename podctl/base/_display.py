"""One line of progress that updates in place: in a notebook cell (an IPython display
updated by id), on a terminal (a carriage return), else a plain line per change at
most every few seconds, so that neither a cell nor a log file floods."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

PLAIN_EVERY_SECONDS = 5.0


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except Exception:  # an IPython without a shell
        return False
    return ip is not None and getattr(ip, "kernel", None) is not None


class StatusLine:
    def __init__(self, prefix: str, *, stream: Any = None):
        self.prefix = prefix
        self.stream = stream or sys.stderr
        self.notebook = _in_notebook()
        self.tty = not self.notebook and getattr(self.stream, "isatty", lambda: False)()
        self._handle: Any = None
        self._last_text: str | None = None
        self._last_plain = 0.0
        self._pending: str | None = None
        self._owner = threading.current_thread()
        self.started = time.monotonic()

    def _line(self, text: str) -> str:
        return f"{self.prefix}: {text} ({time.monotonic() - self.started:.0f}s)"

    def update(self, text: str, *, force: bool = False) -> None:
        """Show TEXT; from another thread (podctl's loop) it is only kept, and shown by
        the next `render()` in the thread that made this line."""
        self._pending = text
        if threading.current_thread() is not self._owner:
            return
        self.render(force=force)

    def render(self, *, force: bool = False) -> None:
        text = self._pending
        if text is None or (text == self._last_text and not force):
            return
        self._last_text = text
        line = self._line(text)
        if self.notebook:
            from IPython.display import display

            if self._handle is None:
                self._handle = display({"text/plain": line}, raw=True, display_id=True)
            else:
                self._handle.update({"text/plain": line}, raw=True)
        elif self.tty:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
        elif force or time.monotonic() - self._last_plain >= PLAIN_EVERY_SECONDS:
            self._last_plain = time.monotonic()
            self.stream.write(line + "\n")
            self.stream.flush()

    def done(self, text: str) -> None:
        self.update(text, force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    __call__ = update  # usable as a progress callback
