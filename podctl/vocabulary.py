"""podctl's words for states, times and exit codes: each written once, here.

Standard library only, at the floor of the layers (ARCHITECTURE.md): every layer may use
it, and `tests/test_vocabulary.py` fails when one of these literals is written again
elsewhere in podctl/.
"""

from __future__ import annotations

# ---- a run (its record in GCS: jobs/run_files.py) ----
LIVE_RUN_STATES = frozenset({"starting", "running"})  # a run whose hosts may still be working

# ---- a slice (the Cloud TPU API's node and queued-resource states) ----
SERVING_STATES = frozenset({"READY", "ACTIVE"})  # a node READY, a queued resource ACTIVE

# ---- a host's agent ----
HEARTBEAT_SECONDS = 10.0  # the agent writes its heartbeat this often (jobs/agent_logs.py)
# No heartbeat for this long (nine beats missed) and no status: the host is lost. One value
# for every reader: a follower, `logs --follow`, the queue's tick and gc.
HOST_LOST_SECONDS = 90.0

# ---- exit codes (128 + the signal, as a shell reports them) ----
EXIT_INTERRUPTED = 130  # SIGINT: Ctrl-C
EXIT_TERMINATED = 143  # SIGTERM: a stop (podctl stop, a preemption notice, a supervisor)
EXIT_KILLED = 137  # SIGKILL
EXIT_HOST_LOST = 255  # a host that stopped beating, or ssh's own failure

# ---- default waits ----
DEFAULT_WAIT = "30m"  # `up`/`down`'s --timeout: a slice's creation or deletion
DEFAULT_WAIT_SECONDS = 1800.0
PREFLIGHT_TIMEOUT_SECONDS = 1800.0  # `podctl preflight`: one compile on the client
# building the hosts' environment on the client (uv installing the lock, maybe a CPython)
ENV_BUILD_TIMEOUT_SECONDS = PREFLIGHT_TIMEOUT_SECONDS
