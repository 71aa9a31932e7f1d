"""podctl's words for states, times and exit codes: each written once, here.

Standard library only, at the floor of the layers (ARCHITECTURE.md): every layer may use
it, and `tests/unit/test_vocabulary.py` fails when one of these literals is written again
elsewhere in podctl/.
"""

from __future__ import annotations

import math

# ---- a run (its record in GCS: jobs/run_files.py) ----
LIVE_RUN_STATES = frozenset({"starting", "running"})  # a run whose hosts may still be working

# ---- a slice (the Cloud TPU API's node and queued-resource states) ----
SERVING_STATES = frozenset({"READY", "ACTIVE"})  # a node READY, a queued resource ACTIVE

# ---- a host's agent ----
HEARTBEAT_SECONDS = 10.0  # the agent writes its heartbeat this often (host/agent_logs.py)
# No heartbeat for this long (nine beats missed) and no status: the host is lost. One value
# for every reader: a follower, `logs --follow`, the queue's tick and gc.
HOST_LOST_SECONDS = 90.0

# ---- a slice's hosts booting, and their watchers (jobs/channels/boot.py, host/host_watch.py) ----
# READY is not booted: on big slices hosts run their startup-script minutes after the node
# is READY. marin waits for its workers' bootstrap 300 s by default (marin-community/marin
# PR 4180), 900 s from 64 workers and 1,800 s from 256 (PR 4792, after "255/256 healthy").
# podctl's wait for a host's first word: the same points, joined by a square root of the
# slice's hosts (300 s up to 7 hosts, 900 s at 64, 1,800 s at 256, about 2,546 s at 512).
BOOT_WAIT_SECONDS = 300.0
BOOT_WAIT_PER_ROOT_HOST = 112.5


def boot_wait_seconds(hosts: int) -> float:
    """How long podctl waits for a host of a slice of HOSTS hosts to run its startup-script."""
    return max(BOOT_WAIT_SECONDS, BOOT_WAIT_PER_ROOT_HOST * math.sqrt(max(1, hosts)))


# A boot channel's pointer is signed to expire (jobs/pointer_sign.py; the watchers refuse it
# after, host_pin.py): the hosts' boot wait (a late host still takes it), plus this hour for
# the start itself and clocks a little off. A copy replayed later, or on another slice, is refused.
POINTER_VALID_SECONDS = 3600.0


def pointer_valid_seconds(hosts: int) -> float:
    """How long a pointer for a slice of HOSTS hosts is accepted after it is signed."""
    return boot_wait_seconds(hosts) + POINTER_VALID_SECONDS


WATCH_BEAT_SECONDS = 15.0  # a watcher writes podctl/beat this often (host_watch.BEAT_SECONDS)
# A beat older than this (three missed, a clock a few seconds off) is a dead watcher: said
# by `status` within a minute of the death, and by `run --via boot` when its next look, 10 s
# later, finds the same beat.
WATCH_DEAD_SECONDS = 45.0

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
