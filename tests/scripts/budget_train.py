"""Prints metric lines as the training template does, until SIGTERM; then it
'checkpoints' and stops as the template does (exit 143)."""

import json
import signal
import sys
import time

step = 0


def emit(kind, **fields):
    sys.stdout.write(json.dumps({"kind": kind, **fields}) + "\n")
    sys.stdout.flush()


def on_term(signum, frame):
    emit("checkpoint", step=step)
    emit("preempted", step=step)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
emit("config", params=1000, devices=4, processes=1, platform="cpu", batch=2, seq_len=8,
     peak_flops_per_s=None, start_step=0)
while step < 100000:
    time.sleep(0.1)
    step += 1
    emit("step", step=step, loss=1.0 / step, step_time_s=0.1, tokens_per_s=160.0, mfu=None)
