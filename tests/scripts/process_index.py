"""Names a JAX process index that differs from the host's worker number, as the TPU
runtime may assign it, without JAX: writes {"step": 0, "process": 1 - worker} to
$PODCTL_PROGRESS_FILE between two lines.

The first line must be logged before the file names the index (so it is labelled by
host only): the script waits until the agent has written it to its local log (the
output.log beside the progress file) before writing the file."""

import json
import os
import time
from pathlib import Path

worker = int(os.environ["TPU_WORKER_ID"])
progress = Path(os.environ["PODCTL_PROGRESS_FILE"])
print(f"worker {worker} before", flush=True)
local_log = progress.with_name("output.log")
deadline = time.monotonic() + 60
while f"worker {worker} before" not in local_log.read_text() and time.monotonic() < deadline:
    time.sleep(0.05)
tmp = progress.with_name(progress.name + ".tmp")
tmp.write_text(json.dumps({"step": 0, "t": time.time(), "process": 1 - worker}))
os.replace(tmp, progress)
print(f"worker {worker} after", flush=True)
