"""Print "tick I" every 0.2 s until stopped; on SIGTERM linger LINGER seconds (argv[1],
default 3), as a script saving a checkpoint does, then exit."""

import signal
import sys
import time

linger = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0


def on_term(signum: int, frame: object) -> None:
    print("stopping", flush=True)
    time.sleep(linger)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
for i in range(3000):
    print(f"tick {i}", flush=True)
    time.sleep(0.2)
