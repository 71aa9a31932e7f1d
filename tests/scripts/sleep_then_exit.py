"""Sleep SECONDS (argv[1], default 2), print a line, exit with CODE (argv[2], default 0)."""

import sys
import time

time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
print("slept", flush=True)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
