"""A run's end named by its cause, one end state per run: JAX's coordination service's
abort read for the peer it names, the peers' heartbeats and statuses for the one that
stopped answering, and each end state said in one phrase (no fake cloud, no process)."""

from __future__ import annotations

from pathlib import Path

from podctl.base.failures import coordination_abort, hardware_cause, infrastructure_reason
from podctl.host.agent_logs import FATAL_LINES, LogShipper
from podctl.jobs.peer_cause import peer_cause
from podctl.jobs.run_record import HostStatus, RunRecord, end_words

# host 0's last words on a fake v5p-16 with host 1's script SIGSTOPped, jax 0.11.2
ABORT = [
    "F1207 04:38:43.871840     716 client.h:86] Terminating process because the JAX distributed "
    "service detected fatal errors. This most likely indicates that another task died; see the "
    "other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to "
    "see all the previous output. absl::Status: UNAVAILABLE: The following tasks are unhealthy "
    "(stopped sending heartbeats):",
    "1",
    "The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. "
    "preemption, eviction) to debug further.",
    "",
    "RPC: /xla.coordination.CoordinationService/PollForError [type.googleapis.com/tensorflow."
    "CoordinationServiceError='']",
]
STACK = ["*** Check failure stack trace: ***"] + [f"    @     0x7f341ab3d7{i:02d}  (unknown)" for i in range(30)]


def _aborted(host: int = 0, process: int | None = 0, ended: float = 100.0) -> HostStatus:
    return HostStatus(host=host, exit_code=134, ended=ended, process=process, fatal=tuple(ABORT),
                      tail=tuple(STACK[-20:]))


def test_the_coordination_services_abort_names_the_peers_in_every_form_xla_wrote():
    assert coordination_abort("\n".join(ABORT)) == (1,)
    older = ("UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n"
             "/job:jax_worker/replica:0/task:3\n/job:jax_worker/replica:0/task:5\n"
             "The tasks have crashed. Check the task logs")
    assert coordination_abort(older) == (3, 5)
    assert coordination_abort("UNAVAILABLE: Task /job:jax_worker/replica:0/task:2 heartbeat "
                              "timeout. This indicates that the remote task has failed") == (2,)
    # a host that lost the service itself: the service lives in the leader, task 0
    assert coordination_abort("Failed to send RPC to coordination service. Either the leader "
                              "task died/restarted unexpectedly or this task is experiencing "
                              "network issues.") == (0,)
    assert coordination_abort("Terminating process because the JAX distributed service "
                              "detected fatal errors. absl::Status: INTERNAL: boom") == ()
    assert coordination_abort("Traceback ...\nValueError: bad shape") is None
    assert coordination_abort(None) is None


def test_a_frozen_peer_is_named_from_its_status_not_the_host_jax_ended():
    """At the run's end host 1's agent had to SIGKILL its stopped script (fail-fast)."""
    frozen = HostStatus(host=1, exit_code=137, ended=130.0, stopped=True, process=1, killed_state="T")
    cause = peer_cause({0: _aborted(), 1: frozen}, None, 2, now=131.0)
    assert cause is not None and cause.host == 1 and cause.messenger.host == 0
    assert cause.describe() == (
        "host 0001 (JAX process 1) stopped answering (its script was stopped (process state T)); "
        "JAX's coordination service then ended host 0000 (JAX process 0) (exit 134)")
    assert cause.to_json()["ended_exit_code"] == 134


def test_the_peers_heartbeats_at_the_abort_say_who_stopped_answering():
    # host 1 wrote no status yet; its agent's beat (fresh) says its script is stopped
    beats = {0: {"time": 99.0, "process": {"state": "R"}, "process_index": 0},
             1: {"time": 95.0, "process": {"state": "T", "cpu_s": 3.2}, "process_index": 1}}
    cause = peer_cause({0: _aborted()}, beats, 2, now=100.0)
    assert cause is not None and (cause.host, cause.evidence) == (1, "its script was stopped (process state T)")
    # a whole host hung: its agent silent too
    beats[1] = {"time": 40.0, "process": {"state": "S"}}
    cause = peer_cause({0: _aborted()}, beats, 2, now=100.0)
    assert cause is not None and cause.evidence == "its agent silent: no heartbeat for 60 s"


def test_the_named_task_is_a_jax_process_index_not_a_host_number():
    """The TPU runtime assigns process indices: host 2 may be JAX process 1."""
    beats = {h: {"time": 99.0, "process": {"state": "S"}, "process_index": p}
             for h, p in ((0, 0), (1, 2), (2, 1))}
    cause = peer_cause({0: _aborted()}, beats, 3, now=100.0)
    assert cause is not None and (cause.host, cause.process, cause.evidence) == (2, 1, None)
    assert "(JAX's coordination service named it)" in cause.describe()


def test_what_is_seen_wins_over_what_is_named_and_a_peer_that_finished_is_never_blamed():
    beats = {1: {"time": 99.0, "process": {"state": "S"}}, 2: {"time": 99.0, "process": {"state": "T"}}}
    assert peer_cause({0: _aborted()}, beats, 3, now=100.0).host == 2
    done = HostStatus(host=1, exit_code=0, ended=90.0)
    assert peer_cause({0: _aborted(), 1: done}, {}, 2, now=100.0) is None


def test_no_abort_or_a_first_failure_of_its_own_is_not_a_peer_cause():
    own = HostStatus(host=1, exit_code=1, ended=50.0, tail=("ValueError: bad shape",))
    frozen_beat = {1: {"time": 99.0, "process": {"state": "T"}}}
    assert peer_cause({1: own, 0: _aborted(ended=100.0)}, frozen_beat, 2, now=100.0) is None
    assert peer_cause({0: HostStatus(host=0, exit_code=134, ended=1.0)}, frozen_beat, 2, now=100.0) is None


def test_the_host_jax_ended_is_not_counted_as_bad_hardware():
    said = _aborted().explanation()
    assert hardware_cause(134, said) is None
    assert hardware_cause(134, "*** Check failure stack trace: ***") == "crashed (SIGABRT)"
    assert infrastructure_reason(134, None, said) == (
        "JAX's coordination service ended it (JAX process 1 stopped answering)")


def test_the_agent_keeps_a_native_aborts_cause_however_long_the_stack_after_it(tmp_path: Path):
    shipper = LogShipper({"run_id": "r", "host": 0, "flush_seconds": 3600}, None, tmp_path)
    for line in ["step 1", "F-string is no glog line", *ABORT, *STACK, "F1207 04:38:44.1 9 x.cc:1] later"]:
        shipper.line(line)
    assert shipper.fatal[:len(ABORT)] == ABORT and len(shipper.fatal) == FATAL_LINES
    assert not any("heartbeats" in line for line in shipper.tail)  # the tail alone lost it
    shipper.local.close()


def _record(state: str, **extra: object) -> RunRecord:
    return RunRecord(run_id="r-20260101-000000-abcd", slice_name="s", project="p", zone="z",
                     num_hosts=2, kind="script", script="t.py", args=[], env_keys=[],
                     bundle_hash=None, created=0.0, state=state, exit_code=None if state == "running" else 143,
                     failed_host=1, extra=dict(extra))  # type: ignore[arg-type]


def test_each_end_state_is_one_phrase_with_its_why():
    assert end_words(_record("succeeded")) == "succeeded on 2 hosts"
    assert end_words(_record("stopped", stopped_by="podctl stop")) == "stopped by podctl stop"
    assert end_words(_record("stopped", stopped_by="budget")) == "stopped by budget"
    assert end_words(_record("failed", reason="could not start: busy")) == "failed: could not start: busy"
    assert end_words(_record("failed")) == "failed: host 0001 exited 143"  # an older record
    assert end_words(_record("lost", reason="slice preempted")) == "lost: slice preempted"
    assert end_words(_record("running")) == "is running"
