"""Print "tick I of N" every INTERVAL seconds (argv: N, INTERVAL), then exit 0: a job
that is busy for a while and whose every line can be counted afterwards."""

import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
for i in range(1, n + 1):
    print(f"tick {i} of {n}", flush=True)
    time.sleep(interval)
