"""Say "waiting" on process 0, wait for the file $GO_FILE (the test makes it once it has
set up its fault), then print N numbered lines and exit at once: lines that the agent
has still to ship as the run ends."""

import os
import sys
import time

if os.environ["PODCTL_PROCESS_ID"] == "0":
    print("waiting", flush=True)
    deadline = time.time() + 300
    while not os.path.exists(os.environ["GO_FILE"]) and time.time() < deadline:
        time.sleep(0.1)
    for i in range(int(sys.argv[1])):
        print(f"line {i}", flush=True)
