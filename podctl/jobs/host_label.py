"""How a host's line is labelled where podctl shows it: `[host 0003 p5] text`.

A host's number (its place in the slice, `host-NNNN` in GCS) and its JAX process index
(`jax.process_index()`, which the TPU runtime assigns) are usually equal but need not
be, and a traceback names the process. The agent learns the index from the script's
progress file and logs a mark line (agent_logs.process_mark) into the host's own
stream; the log reader (ProcessMarks, one per attempt, as process indexes may change
between attempts) hands every later line of that host on as a HostLine carrying the
index (the others as plain str). Lines before the mark, and every line of a script that never names its index
(not JAX, or not writing the file), are labelled by host only: `[host 0003] text`.

A HostLine is a str, so every sink that takes (host, line) works unchanged; those
that print use `label()`.
"""

from __future__ import annotations

import re

# agent_logs.process_mark's line (the agent is stdlib-only and standalone, so the
# format is written there and parsed here; tests/fake/test_labels.py keeps them in step)
_MARK = re.compile(r"\[podctl\] host-(\d{4,}) is JAX process (\d+)")


class HostLine(str):
    """A host's line as shipped, with the JAX process index its host had named by then
    (None: not known yet, or never)."""

    process: int | None

    def __new__(cls, text: str, process: int | None = None) -> HostLine:
        line = super().__new__(cls, text)
        line.process = process
        return line


def process_of(line: str) -> int | None:
    """LINE's JAX process index, when it came from a log reader that knew it."""
    return getattr(line, "process", None)


def label(host: int, process: int | None = None) -> str:
    """`host 0003 p5`, or `host 0003` when the process index is not known."""
    return f"host {host:04d}" if process is None else f"host {host:04d} p{process}"


def host_name(host: int, process: int | None = None) -> str:
    """`host 0003 (JAX process 5)`, or `host 0003`: a host in podctl's notices."""
    return f"host {host:04d}" if process is None else f"host {host:04d} (JAX process {process})"


def parse_mark(host: int, line: str) -> int | None:
    """The process index LINE announces for HOST, when it is the agent's mark for it."""
    m = _MARK.fullmatch(line) if line.startswith("[podctl] host-") else None
    return int(m.group(2)) if m and int(m.group(1)) == host else None


class ProcessMarks:
    """Per host, the process index its stream has announced so far (one per reader:
    a new attempt's hosts start unknown again)."""

    def __init__(self) -> None:
        self.processes: dict[int, int] = {}

    def line(self, host: int, text: str) -> str:
        """TEXT as a HostLine once HOST's index is known, else as it is (process_of: None)."""
        index = parse_mark(host, text)
        if index is not None:
            self.processes[host] = index
        process = self.processes.get(host)
        return text if process is None else HostLine(text, process)
