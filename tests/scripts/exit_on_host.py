"""Host FAIL_HOST exits with FAIL_CODE; every other host waits to be stopped."""

import os
import sys
import time

me = int(os.environ["PODCTL_PROCESS_ID"])
print(f"host {me} started", flush=True)
if me == int(os.environ.get("FAIL_HOST", "1")):
    time.sleep(0.5)
    print(f"host {me} failing", flush=True)
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
time.sleep(300)
print("should have been stopped", flush=True)
