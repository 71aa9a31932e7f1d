"""One word per rule: the states, times and exit codes of podctl/base/vocabulary.py are written
there once; these tests fail when one is written again elsewhere in podctl/."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from podctl.base import vocabulary
from podctl.host.agent_logs import LogShipper

PODCTL = Path(vocabulary.__file__).parents[1]
# the fake cloud is a world of its own (its timings and address arithmetic are its own numbers)
OWN_WORLDS = (PODCTL / "fake",)
NUMBERS = {str(vocabulary.EXIT_INTERRUPTED), str(vocabulary.EXIT_TERMINATED), str(vocabulary.EXIT_KILLED),
           str(vocabulary.EXIT_HOST_LOST), "90", "90.0", "1800", "1800.0"}
STRINGS = {repr(vocabulary.DEFAULT_WAIT), f'"{vocabulary.DEFAULT_WAIT}"'}
SETS = [re.compile(r'[(\[{]\s*"starting",\s*"running"\s*[)\]}]'), re.compile(r'"READY",\s*"ACTIVE"')]


def _sources() -> list[Path]:
    return [p for p in sorted(PODCTL.rglob("*.py"))
            if p != Path(vocabulary.__file__) and not any(w in p.parents for w in OWN_WORLDS)]


def test_no_state_set_timeout_or_exit_code_is_written_twice():
    found = []
    for path in _sources():
        text = path.read_text()
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if ((token.type == tokenize.NUMBER and token.string in NUMBERS)
                    or (token.type == tokenize.STRING and token.string in STRINGS)):
                found.append(f"{path.relative_to(PODCTL)}:{token.start[0]}: {token.line.strip()}")
        for pattern in SETS:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(PODCTL)}:{line}: {match.group(0)}")
    assert not found, "use podctl/base/vocabulary.py:\n" + "\n".join(found)


def test_the_agent_beats_as_the_client_expects_even_without_being_told(tmp_path):
    """The agent is standalone on the host (standard library, its own zip): the client sends
    the heartbeat in its config, and the agent's own fallback is the same value."""
    shipper = LogShipper({"run_id": "r", "host": 0, "flush_seconds": 3600}, None, tmp_path)
    assert shipper.heartbeat_seconds == vocabulary.HEARTBEAT_SECONDS


def test_every_error_class_is_in_the_one_tree():
    """podctl's exceptions live in base/errors.py; the agent and the host watcher (standalone
    on the hosts) and the fake's wire errors are the exceptions its docstring names."""
    outside = []
    for path in _sources():
        if path.name.startswith("agent") or path.name in ("errors.py", "host_watch.py", "host_pin.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"class \w+\((\w+Error|Exception|PodctlError|StorageError)\)", line):
                outside.append(f"{path.relative_to(PODCTL)}:{number}: {line}")
    assert not outside, "define errors in podctl/base/errors.py:\n" + "\n".join(outside)
