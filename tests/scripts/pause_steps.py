"""Host 0 prints STEPS step lines, pauses PAUSE seconds (an evaluation pass, a slow
save) and prints STEPS more; it registers no SIGUSR1 handler (SIGUSR1 would end it)."""

import json
import os
import time

steps, pause = int(os.environ.get("STEPS", "5")), float(os.environ.get("PAUSE", "20"))
for step in range(1, 2 * steps + 1):
    if os.environ["PODCTL_PROCESS_ID"] == "0":
        print(json.dumps({"kind": "step", "step": step, "step_time_s": 0.1}), flush=True)
    time.sleep(pause if step == steps else 0.1)
print("done", flush=True)
