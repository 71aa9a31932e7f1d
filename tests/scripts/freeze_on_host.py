"""Host FREEZE_HOST stops itself at once (SIGSTOP: frozen before its first step, as a
host hung in its runtime's start); host FAIL_HOST (if set) exits FAIL_CODE after
FAIL_AFTER seconds; the others wait, "initializing", and print no step."""

import os
import signal
import sys
import time

me = int(os.environ["PODCTL_PROCESS_ID"])
print(f"host {me} started", flush=True)
if me == int(os.environ.get("FREEZE_HOST", "1")):
    print(f"host {me} freezing", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    print(f"host {me} continued", flush=True)
if me == int(os.environ.get("FAIL_HOST", "-1")):
    time.sleep(float(os.environ.get("FAIL_AFTER", "5")))
    print(f"host {me} failing", flush=True)
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
time.sleep(600)
print("should have been stopped", flush=True)
