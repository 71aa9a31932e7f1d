"""Print, on process 0, metric lines no reader may crash on (a 5,000-deep JSON line,
mistyped fields) among a few good ones, and write a 5,000-deep progress file: the run
must succeed, the bad lines shown as text."""

import json
import os
import sys

DEEP = '{"kind": "step", "x": ' + "[" * 5000 + "]" * 5000 + "}"

progress = os.environ.get("PODCTL_PROGRESS_FILE")
if progress:
    with open(progress, "w") as f:
        f.write(DEEP)
if os.environ["PODCTL_PROCESS_ID"] == "0":
    lines = [json.dumps({"kind": "config", "platform": "cpu", "start_step": 0, "batch": 2, "seq_len": 4}),
             DEEP,
             '{"kind": "config", "start_step": "x"}',
             '{"kind": "config", "start_step": [1]}',
             '{"kind": "config", "start_step": Infinity, "batch": 1e999}',
             json.dumps({"kind": "step", "step": 1, "loss": 2.0, "step_time_s": 0.5, "tokens_per_s": 16.0,
                         "compile": True}),
             '{"kind": "step", "step": "x", "loss": "low"}',
             json.dumps({"kind": "step", "step": 2, "loss": 1.5, "step_time_s": 0.5, "tokens_per_s": 16.0}),
             '{"kind": "checkpoint", "step": [2]}',
             json.dumps({"kind": "done", "step": 2, "loss": None})]
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()
