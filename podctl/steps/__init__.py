"""The steps layer: every operation the CLI, the Python API and the queue share, each
with one owner. A step is a plain async function over a Session. The CLI reaches
nothing below this door (an import-linter contract, pyproject.toml): what it shows of
a step comes back as the step's dataclasses, and where callers differ a step takes a
hook (a notice, a progress, the CLI's spinner or bar for a long wait).

    session.py       Session: settings, the slice provider, GCS, the SSH key, host-key pins;
                     Session.at: the same clients at another project, zone and bucket
    slices.py        up_request / budget_request / up / keep_budget, ask_slice (up with no
                     wait: the queue's) / creation_outcome, ready_slice, describe_slice /
                     slice_status, slices_in (a zone's, the queue's tick), to_delete / down
                     (by_owner=False: the queue's)
    slice_cost.py    slice_costs: each slice's $/hour, its cost so far, its budget (ls, cost)
    runs.py          RunOptions (RunSpec, the one shape of what runs, and how: detach;
                     once with a fixed run_id: the queue's), start_run /
                     run_started / ship_bundle (queue add's) / follow_run / stop_run / signal_stop, list_runs,
                     run_checkpoints / pull_checkpoint, exec_on_slice
    supervise.py     run_supervised: follow a run within its budget, recover it (--recover)
    recovery.py      run_recovering: relaunch from the latest checkpoint on a new slice
    replay.py        replay: a run's lines from GCS, every attempt in turn (`podctl logs`)
    run_cost.py      run_cost: what a run cost, its goodput, tokens and MFU; run_metrics
    goodput.py       run_goodput: where a run's chip-hours went
    profiles.py      take_profile / pull_profiles: a JAX profiler trace of a running run
    budget_check.py  check_budgets: `podctl budget check`
    collect.py       collect: `podctl gc`; reap_queue_leftovers: the queue tick's own
    lines.py         a host's line as callers print it (its label, progress or not)
    run_progress.py  run_progress / owner_stop / close_run: a detached run looked at from
                     GCS now and then (the queue's tick); load_run, follow_from_gcs, ask_stop
                     (the Python API's runs it did not start)
    preflight_env.py compile_env: the hosts' jax and libtpu for a preflight compile (their
                     locked environment, built here once per lock)

Below the steps: cloud/ (a SliceProvider: the Cloud TPU API), jobs/ (hosts, agents, a run's files in
GCS), cloud/storage.py, money/budget.py, money/cost.py, policy/gc.py, base/failures.py (what counts as the
infrastructure's fault). Above them: cli/, api.py, queue/ (which keeps its own state
machine and store, but makes and deletes slices, starts, looks at (run_progress.py)
and stops runs only through these steps, over a Session at each entry's project, zone
and bucket; where it differs from the CLI, by an option of the same step: no wait,
once-only with a fixed run id, by_owner=False; what it needs of cloud/ and money/cost.py is
named here: SliceInfo, CreationOutcome, the slice names and labels, slice_hourly_cost).
"""

from podctl.cloud.create import CreationOutcome
from podctl.cloud.names import ENTRY_LABEL, QUEUE_LABEL, owner, podctl_labels, validate_name
from podctl.cloud.placement import Placement
from podctl.cloud.types import SliceInfo
from podctl.jobs.run_files import StopRequest
from podctl.jobs.run_record import RunRecord, end_words
from podctl.steps.run_progress import (
    RunProgress,
    ask_stop,
    close_run,
    follow_from_gcs,
    load_run,
    owner_stop,
    run_progress,
)
from podctl.steps.runs import (
    LineSink,
    Notice,
    RunOptions,
    RunSpec,
    StopResult,
    check_via,
    exec_on_slice,
    follow_run,
    launch_job,
    list_runs,
    new_job,
    parse_env,
    pull_checkpoint,
    resume_checkpoint_dir,
    run_checkpoints,
    run_started,
    ship_bundle,
    signal_stop,
    start_run,
    stop_run,
    valid_run_id,
)
from podctl.steps.session import Session, fake_running, stop_fake
from podctl.steps.slice_cost import slice_hourly_cost, unknown_price
from podctl.steps.slices import (
    Budget,
    BudgetSet,
    SliceOptions,
    SliceStatus,
    ask_slice,
    budget_request,
    close_runs_of_deleted,
    creation_outcome,
    describe_slice,
    down,
    keep_budget,
    ready_slice,
    settings_for_slice,
    slice_status,
    slices_in,
    to_delete,
    up,
    up_request,
)

__all__ = [
    "ENTRY_LABEL", "QUEUE_LABEL", "CreationOutcome", "owner", "podctl_labels", "slice_hourly_cost",
    "unknown_price", "validate_name",
    "Budget", "BudgetSet", "LineSink", "Notice", "Placement", "RunOptions", "RunProgress",
    "RunRecord", "RunSpec", "Session", "SliceInfo", "SliceOptions", "SliceStatus",
    "StopRequest", "StopResult", "ask_slice", "ask_stop", "budget_request", "check_via", "close_run",
    "close_runs_of_deleted", "creation_outcome", "describe_slice", "down", "end_words", "exec_on_slice",
    "fake_running", "follow_from_gcs", "follow_run", "keep_budget", "launch_job", "list_runs",
    "load_run", "new_job", "owner_stop", "parse_env", "pull_checkpoint", "ready_slice", "settings_for_slice",
    "resume_checkpoint_dir", "run_checkpoints", "run_progress", "run_started", "ship_bundle",
    "signal_stop", "slice_status", "slices_in", "start_run", "stop_fake", "stop_run",
    "to_delete", "up", "up_request", "valid_run_id",
]
