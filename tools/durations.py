"""tests/durations.txt from a pytest `--durations=0` log: each case's setup, call and
teardown summed, the cases of at least MIN seconds, longest first.

    python -m pytest -q -n 3 tests --ignore=tests/unit --durations=0 > /tmp/dur.log
    python tools/durations.py /tmp/dur.log > tests/durations.txt

tests/schedule.py hands these out first (longest first); a case not listed runs after
them, in collection order.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_LINE = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+)$")
MIN_SECONDS = 3.0


def case_seconds(log: str) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for line in log.splitlines():
        found = _LINE.match(line.strip())
        if found:
            nodeid = found.group(3).split("@", 1)[0]  # an xdist_group suffix, where xdist adds one
            seconds[nodeid] = seconds.get(nodeid, 0.0) + float(found.group(1))
    return seconds


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tools/durations.py DURATIONS_LOG > tests/durations.txt", file=sys.stderr)
        return 2
    seconds = case_seconds(Path(argv[1]).read_text(errors="replace"))
    print(f"# seconds per case (setup + call + teardown), >= {MIN_SECONDS:.0f} s: tools/durations.py")
    for nodeid, value in sorted(seconds.items(), key=lambda kv: -kv[1]):
        if value >= MIN_SECONDS:
            print(f"{value:.0f} {nodeid}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
