"""The steps layer: every operation the CLI, the Python API and the queue share, each
with one owner. A step is a plain async function over a Session.

    session.py    Session: settings, the Cloud TPU API, GCS, the SSH key, host-key pins
    slices.py     up_request / up / ready_slice / describe_slice / down
    runs.py       RunOptions, start_run / follow_run / stop_run, run_checkpoints
    supervise.py  run_supervised: follow a run within its budget, recover it (--recover)
    recovery.py   run_recovering: relaunch from the latest checkpoint on a new slice
    replay.py     replay: a run's lines from GCS, every attempt in turn (`podctl logs`)
    run_cost.py   run_cost: what a run cost, its goodput, tokens and MFU

Below the steps: cloud/ (the Cloud TPU API), jobs/ (hosts, agents, a run's files in
GCS), storage.py, budget.py, cost.py, failures.py (what counts as the infrastructure's
fault). Above them: cli/, api.py, queue/ (which keeps its own state machine and store
but opens its clients through a Session too).
"""

from podctl.steps.runs import (
    LineSink, Notice, RunOptions, StopResult, follow_run, launch_job, new_job, resume_checkpoint_dir,
    run_checkpoints, start_run, stop_run,
)
from podctl.steps.session import Session
from podctl.steps.slices import (
    SliceOptions, close_runs_of_deleted, describe_slice, down, ready_slice, up, up_request,
)

__all__ = [
    "LineSink", "Notice", "RunOptions", "Session", "SliceOptions", "StopResult",
    "close_runs_of_deleted", "describe_slice", "down", "follow_run", "launch_job", "new_job",
    "ready_slice", "resume_checkpoint_dir", "run_checkpoints", "start_run", "stop_run", "up",
    "up_request",
]
