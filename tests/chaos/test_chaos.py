"""Each fault the fake cloud can inject, in each phase of a job's life, with the
outcome a user must get: the run finishes with the right result, or fails with a
clear message; nothing billable is left (the `fake` fixture checks); no log line that
reached GCS is lost; a resumed run continues from its last complete checkpoint.

Phases: up, bundle (upload), launch, training, checkpoint (a save under way), down.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from podctl import steps
from podctl.cloud.wait import wait_deleted
from podctl.base.errors import SliceLostError, StockoutError
from podctl.host import metric_line
from podctl.steps import RunOptions, RunSpec
from podctl.steps.recovery import RecoveryPolicy, run_recovering
from tests.chaos.conftest import Kit, Record, run

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "train_pjit.py"
SCRIPTS = REPO / "tests" / "scripts"
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "32",
        "--seq-len", "16", "--batch", "8", "--lr", "1e-2"]
EVERY = 4  # --checkpoint-every
POLICY = RecoveryPolicy(recoveries=1, watch_seconds=1.0, notice_seconds=12.0, backoff_initial=0.5,
                        backoff_max=2.0, recreate_timeout=120)  # the fake's notice is 10 s


async def _up(kit: Kit, name: str, slice_type: str = "v5p-16") -> Any:
    request = steps.up_request(kit.session.settings, steps.SliceOptions(slice_type, name=name))
    return (await steps.up(kit.session, request)).info


async def _down(kit: Kit, name: str) -> None:
    from podctl.base.errors import NotFoundError

    try:
        await steps.down(kit.session, name)
    except NotFoundError:
        pass


def when_line(record: Record, test, action) -> None:
    """Call ACTION once, the first time a line passes TEST (as the follower reads it)."""
    def hook(host: int, line: str) -> None:
        if test(host, line):
            record.hooks.remove(hook)
            action()

    record.hooks.append(hook)


def at_step(step: int):
    return lambda host, line: host == 0 and (m := metric_line.parse(line)) is not None and \
        m["kind"] == "step" and m["step"] >= step


def at_checkpoint(step: int):
    return lambda host, line: host == 0 and (m := metric_line.parse(line)) is not None and \
        m["kind"] == "checkpoint" and m["step"] >= step


# Long enough that a fault set off by a line the follower reads (up to ~2 s after the
# host printed it) still lands while the script trains.
STEPS = 48


async def _train(kit: Kit, name: str, record: Record, *, steps: int = STEPS, recover: int = 1,
                 script: Path = TEMPLATE, args: list[str] | None = None) -> Any:
    options = RunOptions(RunSpec(
        script=script, args=tuple(args if args is not None else
                                  [*TINY, "--steps", str(steps), "--checkpoint-every", str(EVERY)])),
        hosts="all")
    return await run_recovering(kit.session, name, options,
                                RecoveryPolicy(**{**POLICY.__dict__, "recoveries": recover}),
                                sink=record.sink, notice=record.notice)


async def _check_logs(kit: Kit, record: Record, result: Any, num_hosts: int) -> None:
    """Every line the follower showed is in GCS, in order, and for an attempt that ran
    to its end, every line in GCS was shown."""
    for attempt in result.attempts:
        stored = await kit.stored_lines(attempt.run_id, num_hosts)
        shown = record.lines.get(attempt.run_id, [])
        for host in range(num_hosts):
            s = [line for h, line in stored if h == host]
            seen = [line for h, line in shown if h == host]
            assert seen == s[:len(seen)], f"host {host} of {attempt.run_id}: shown lines not as stored"
            if attempt.reason is None:
                assert seen == s, f"host {host} of {attempt.run_id}: a stored line was not shown"


def _check_resumed(result: Any) -> int:
    """A later attempt starts at a checkpoint step at or before where the last one got."""
    for before, after in zip(result.attempts, result.attempts[1:]):
        assert after.start_step is not None and after.start_step > 0, "resumed from step 0"
        assert before.last_step is None or after.start_step <= before.last_step + 1
        assert before.steps_lost is not None and before.steps_lost <= EVERY
    return result.steps_lost


def _outcome(result: Any) -> str:
    if result.exit_code != 0:
        return f"failed: exit {result.exit_code} ({result.attempts[-1].reason or 'the script'})"
    if result.recoveries:
        return f"finished after {result.recoveries} recovery, {result.steps_lost} steps lost"
    return "finished"


def _hosts_boot_after_the_case(kit: Kit) -> None:
    """Every host's startup-script due later than the case lives (the fake's `boot_late`,
    set through its admin API as tests/conftest.py's fake_booting_after_the_test does): for
    a case about the API calls of `up` and `down`, which never reaches a host, no watcher is
    started and ended per slice."""
    kit.admin.set_timings(boot_late=1e7)


# ---- up ---------------------------------------------------------------------------

@pytest.mark.parametrize("code,count", [("503", 2), ("429", 2), ("drop", 1), ("lose", 1)])
def test_up_survives_failing_calls(kit, code, count):
    _hosts_boot_after_the_case(kit)
    kit.admin.fail_calls(count, code=code, call="nodes.create")
    info = run(_up(kit, "chaos-up", "v5p-8"))
    assert info.ready and len(kit.admin.resources()["nodes"]) == 1  # one slice, not two
    run(_down(kit, "chaos-up"))
    kit.record("up", f"fail {count} x {code} on nodes.create", "finishes", "finished: 1 slice")


def test_up_in_a_stockout_fails_clearly_and_leaves_nothing(kit):
    kit.admin.capacity(0)
    with pytest.raises(StockoutError) as e:
        run(_up(kit, "chaos-stock", "v5p-8"))
    assert "capacity" in str(e.value).lower() or "stockout" in str(e.value).lower()
    assert kit.admin.is_empty()
    kit.record("up", "stockout", "fails", f"failed: {str(e.value)[:60]}")


def test_up_preempted_while_creating_fails_clearly_and_leaves_nothing(kit):
    kit.admin.set_timings(time_scale=5.0)  # creation takes a while: preempt inside it

    async def up_and_preempt() -> None:
        creating = asyncio.ensure_future(_up(kit, "chaos-pre", "v5p-8"))
        while not (await asyncio.to_thread(kit.admin.resources))["nodes"]:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(kit.admin.preempt, "chaos-pre")
        await creating

    with pytest.raises(SliceLostError, match="lost while creating") as e:
        run(up_and_preempt())
    # The failed `up` deleted what it had made: the deletion is under way.
    kit.admin.set_timings(time_scale=300.0)
    run(wait_deleted(kit.session.api, kit.session.settings.parent, "chaos-pre"))
    assert kit.admin.is_empty()
    kit.record("up", "preempt while creating", "fails", f"failed: {str(e.value)[:60]}")


# ---- bundle upload and launch -------------------------------------------------------

def test_gcs_outage_during_bundle_upload_is_ridden_out(kit, tmp_path):
    info = run(_up(kit, "chaos-bundle", "v5p-8"))
    record = Record()
    work = tmp_path / "work"
    work.mkdir()
    (work / "ticker.py").write_bytes((SCRIPTS / "ticker.py").read_bytes())
    (work / "blob.bin").write_bytes(b"x" * 3_000_000)  # an upload that takes a moment
    kit.admin.gcs_outage(3.0)
    result = run(_train(kit, "chaos-bundle", record, script=work / "ticker.py", args=["10", "0.05"],
                        recover=0))
    assert result.exit_code == 0
    run(_check_logs(kit, record, result, len(info.hosts)))
    run(_down(kit, "chaos-bundle"))
    kit.record("bundle", "gcs 503 for 3 s", "finishes", _outcome(result))


@pytest.mark.host_env
def test_preempted_before_launch_is_recovered(kit):
    run(_up(kit, "chaos-launch", "v5p-8"))  # the launch phase, no multi-host claim: one host's JAX
    record = Record()
    # The slice goes just as the run is being prepared: its start fails, then recovers.
    when_notice = [False]

    def on_notice(text: str) -> None:
        Record.notice(record, text)
        if text.startswith("bundle ") and not when_notice[0]:
            when_notice[0] = True
            kit.admin.preempt("chaos-launch", grace=0)

    record.notice = on_notice  # type: ignore[method-assign]
    result = run(_train(kit, "chaos-launch", record, steps=8))  # nothing to set off mid-way
    assert result.exit_code == 0 and result.recoveries == 1
    assert result.attempts[0].reason.startswith("slice ")
    run(_down(kit, "chaos-launch"))
    kit.record("launch", "preempt", "recovers", _outcome(result))


# ---- training -------------------------------------------------------------------------

@pytest.mark.host_env
@pytest.mark.slow  # the same path as test_recovery's preempted run, through the CLI
def test_preempted_mid_training_resumes_from_its_checkpoint(kit):
    run(_up(kit, "chaos-train"))
    record = Record()
    when_line(record, at_step(6), lambda: kit.admin.preempt("chaos-train"))
    result = run(_train(kit, "chaos-train", record))
    assert result.exit_code == 0 and result.recoveries == 1
    steps_lost = _check_resumed(result)
    assert steps_lost == 0  # the notice (SIGTERM) made a checkpoint at once
    run(_check_logs(kit, record, result, 2))
    run(_down(kit, "chaos-train"))
    kit.record("training", "preempt (10 s notice)", "recovers", _outcome(result))


@pytest.mark.host_env
@pytest.mark.slow
def test_preempted_mid_training_without_recover_fails_clearly(kit):
    run(_up(kit, "chaos-norec"))
    record = Record()
    when_line(record, at_step(4), lambda: kit.admin.preempt("chaos-norec"))
    result = run(_train(kit, "chaos-norec", record, recover=0))
    # The notice (SIGTERM) let the script checkpoint and exit 143, and the agent report it.
    assert result.exit_code == 143 and result.attempts[0].reason.startswith("slice ")
    assert any("no recoveries left" in n for n in record.notices)
    run(_check_logs(kit, record, result, 2))
    run(_down(kit, "chaos-norec"))
    kit.record("training", "preempt, no --recover", "fails", _outcome(result))


@pytest.mark.host_env
@pytest.mark.slow
def test_a_killed_process_is_relaunched_on_the_same_healthy_slice(kit):
    run(_up(kit, "chaos-kill"))
    record = Record()
    when_line(record, at_step(6), lambda: kit.admin.kill_host("chaos-kill", 1, signal="TERM"))
    result = run(_train(kit, "chaos-kill", record))
    assert result.exit_code == 0 and result.recoveries == 1
    assert any("is healthy; relaunching on it" in n for n in record.notices)
    _check_resumed(result)
    run(_down(kit, "chaos-kill"))
    kit.record("training", "kill host 1's processes (TERM)", "recovers", _outcome(result))


def test_gcs_outage_then_ssh_cut_mid_training_lose_no_line_and_do_not_disturb_the_run(kit):
    """Two runs on one v5p-16 (one slice made and deleted, not two): GCS answering 503 for
    4 s mid-training, then host 0's SSH cut mid-training (last: the cut stays)."""
    info = run(_up(kit, "chaos-train2", "v5p-16"))
    record = Record()
    when_line(record, lambda h, line: line.startswith("tick 3 "), lambda: kit.admin.gcs_outage(4.0))
    result = run(_train(kit, "chaos-train2", record, script=SCRIPTS / "ticker.py", args=["60", "0.1"],
                        recover=0))
    assert result.exit_code == 0
    run(_check_logs(kit, record, result, len(info.hosts)))
    assert sum(1 for h, line in record.lines[result.run_id] if line.startswith("tick ")) == 120
    kit.record("training", "gcs 503 for 4 s", "finishes", _outcome(result))

    record = Record()
    when_line(record, lambda h, line: line.startswith("tick 5 "),
              lambda: kit.admin.cut_ssh("chaos-train2", 0))
    result = run(_train(kit, "chaos-train2", record, script=SCRIPTS / "ticker.py", args=["30", "0.05"],
                        recover=0))
    assert result.exit_code == 0 and result.recoveries == 0  # the agents are detached
    run(_check_logs(kit, record, result, len(info.hosts)))
    assert sum(1 for h, line in record.lines[result.run_id] if line.startswith("tick ")) == 60
    run(_down(kit, "chaos-train2"))
    kit.record("training", "cut host 0's SSH", "finishes", _outcome(result))


@pytest.mark.host_env
@pytest.mark.slow
def test_a_lost_host_is_detected_and_the_slice_made_again(kit):
    """No SIGTERM, no status: the host simply vanishes. Found by its missing heartbeat
    (90 s), so this case is long."""
    run(_up(kit, "chaos-lost"))
    record = Record()
    when_line(record, at_step(6), lambda: kit.admin.drop_host("chaos-lost", 1))
    result = run(_train(kit, "chaos-lost", record))
    assert result.exit_code == 0 and result.recoveries == 1
    assert result.attempts[0].reason.startswith("host lost")
    _check_resumed(result)
    run(_down(kit, "chaos-lost"))
    kit.record("training", "drop host 1", "recovers", _outcome(result))


# ---- a checkpoint save under way -----------------------------------------------------

@pytest.mark.host_env
@pytest.mark.slow
def test_preempted_during_a_checkpoint_save_resumes_from_a_complete_one(kit):
    run(_up(kit, "chaos-ckpt"))
    record = Record()
    when_line(record, at_checkpoint(8), lambda: kit.admin.preempt("chaos-ckpt", grace=0))
    result = run(_train(kit, "chaos-ckpt", record))
    assert result.exit_code == 0 and result.recoveries == 1
    _check_resumed(result)  # from 4 or 8, whichever was complete: never a torn save
    run(_down(kit, "chaos-ckpt"))
    kit.record("checkpoint", "preempt, no notice", "recovers", _outcome(result))


@pytest.mark.host_env
@pytest.mark.slow
def test_gcs_outage_during_a_checkpoint_save(kit):
    run(_up(kit, "chaos-ckgcs"))
    record = Record()
    when_line(record, at_checkpoint(4), lambda: kit.admin.gcs_outage(3.0))
    result = run(_train(kit, "chaos-ckgcs", record, recover=0))
    # tensorstore and gcsfs retry 503s: the save goes through and the run ends well.
    assert result.exit_code == 0, record.lines
    run(_down(kit, "chaos-ckgcs"))
    kit.record("checkpoint", "gcs 503 for 3 s", "finishes", _outcome(result))


# ---- down -----------------------------------------------------------------------------

@pytest.mark.parametrize("code,count", [("503", 2), ("drop", 1), ("lose", 1)])
def test_down_survives_failing_calls(kit, code, count):
    _hosts_boot_after_the_case(kit)
    run(_up(kit, "chaos-down", "v5p-8"))
    kit.admin.fail_calls(count, code=code, call="nodes.delete")
    run(steps.down(kit.session, "chaos-down"))
    assert kit.admin.is_empty()
    kit.record("down", f"fail {count} x {code} on nodes.delete", "finishes", "finished: deleted")


def test_down_of_a_preempted_slice(kit):
    _hosts_boot_after_the_case(kit)
    run(_up(kit, "chaos-dp", "v5p-8"))
    kit.admin.preempt("chaos-dp", grace=0)
    run(steps.down(kit.session, "chaos-dp"))
    assert kit.admin.is_empty()
    kit.record("down", "preempt just before", "finishes", "finished: deleted")


def test_every_phase_and_fault_kind_is_covered():
    """The table's rows, CI subset included, span every phase and every kind of fault."""
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    for phase in ('"up"', '"bundle"', '"launch"', '"training"', '"checkpoint"', '"down"'):
        assert f"kit.record({phase}" in source
    for fault in ("fail_calls", "capacity", "preempt", "kill_host", "cut_ssh",
                  "gcs_outage", "drop_host"):
        assert f"kit.admin.{fault}(" in source


# ---- recovery: faults while a lost slice is being made again ---------------------------

def _on_recreate(kit: Kit, record: Record, name: str, action) -> None:
    """When recovery starts making NAME again, hold the new node in CREATING and call
    ACTION once it exists (from a helper thread: the recovering loop goes on)."""
    import threading

    fired = [False]

    def hold_then_act() -> None:
        import time as _time

        while name not in " ".join(kit.admin.resources()["nodes"]):
            _time.sleep(0.05)
        action()

    def on_notice(text: str) -> None:
        Record.notice(record, text)
        if text.startswith(f"creating {name} again") and not fired[0]:
            fired[0] = True
            kit.admin.set_timings(node_create=1e6)
            threading.Thread(target=hold_then_act, daemon=True).start()

    record.notice = on_notice  # type: ignore[method-assign]


def test_preempted_while_recovery_makes_the_slice_again_is_retried_within_its_recoveries(kit):
    run(_up(kit, "chaos-rpre", "v5p-8"))
    record = Record()

    def preempt_the_new_one() -> None:
        kit.admin.preempt("chaos-rpre", grace=0)
        kit.admin.set_timings(node_create=90.0)  # the next try gets its slice

    _on_recreate(kit, record, "chaos-rpre", preempt_the_new_one)
    when_line(record, lambda h, line: line.startswith("tick 1 "), lambda: kit.admin.preempt("chaos-rpre", grace=0))
    result = run(_train(kit, "chaos-rpre", record, script=SCRIPTS / "ticker.py", args=["60", "0.05"],
                        recover=2))
    assert result.exit_code == 0, record.notices
    assert any("lost while being made again" in n for n in record.notices)
    run(_down(kit, "chaos-rpre"))
    kit.record("recovery", "preempt the re-created slice while creating", "recovers",
               _outcome(result))


def test_a_slice_deleted_by_its_owner_during_recovery_is_not_made_again(kit):
    from podctl.base.errors import SliceDeletedError

    run(_up(kit, "chaos-rdel", "v5p-8"))
    record = Record()

    def owner_deletes() -> None:  # `podctl down` in another terminal
        session = steps.Session(settings=kit.session.settings, ports=kit.session.ports, api=api_for(kit),
                                    storages=kit.session.storages)  # this fake's GCS, no daemon
        asyncio.run(steps.down(session, "chaos-rdel", wait=False))
        session.api.close()  # the GCS client is the kit's own

    _on_recreate(kit, record, "chaos-rdel", owner_deletes)
    when_line(record, lambda h, line: line.startswith("tick 1 "),
              lambda: kit.admin.preempt("chaos-rdel", grace=0))
    with pytest.raises(SliceDeletedError, match="not making it again") as e:
        run(_train(kit, "chaos-rdel", record, script=SCRIPTS / "ticker.py", args=["60", "0.05"],
                   recover=3))
    kit.admin.set_timings(node_create=90.0)
    run(wait_deleted(kit.session.api, kit.session.settings.parent, "chaos-rdel"))
    assert kit.admin.is_empty()
    kit.record("recovery", "owner's `down` while re-creating", "stops", f"stopped: {str(e.value)[:60]}")


def test_a_slice_deleted_under_a_recovering_run_is_not_made_again(kit):
    run(_up(kit, "chaos-tdel", "v5p-8"))
    record = Record()

    def owner_deletes() -> None:
        import threading

        def down() -> None:
            session = steps.Session(settings=kit.session.settings, ports=kit.session.ports, api=api_for(kit),
                                        storages=kit.session.storages)
            asyncio.run(steps.down(session, "chaos-tdel", wait=False))
            session.api.close()

        threading.Thread(target=down, daemon=True).start()

    when_line(record, lambda h, line: line.startswith("tick 3 "), owner_deletes)
    result = run(_train(kit, "chaos-tdel", record, script=SCRIPTS / "ticker.py", args=["400", "0.05"],
                        recover=3))
    assert result.stopped == "slice deleted" and result.recoveries == 0, record.notices
    assert any("not making it again" in n for n in record.notices)
    run(wait_deleted(kit.session.api, kit.session.settings.parent, "chaos-tdel"))
    assert kit.admin.is_empty()
    kit.record("training", "owner's `down` under run --recover", "stops", "stopped: slice deleted")


def api_for(kit: Kit) -> Any:
    from podctl.cloud.connect import api_for_endpoint
    from tests.conftest import FAST_RETRY

    return api_for_endpoint(kit.fake.tpu_api_url, retry=FAST_RETRY)


# ---- up, told to stop: SIGINT, SIGTERM, SIGHUP in each phase ---------------------------

_UP_CHILD = """
import asyncio, os, sys
from pathlib import Path
from podctl import steps
from podctl.base import signals
from podctl.cloud.connect import api_for_endpoint
from podctl.base.settings import Settings

signals.route_stop_signals()  # as `podctl` itself does at start
print(os.getpid(), flush=True)  # its parent may be a shell that started it as a job
url, tmp = sys.argv[1], Path(sys.argv[2])
settings = Settings(backend="fake", project="test-project", zone="us-central1-a",
                    config_dir=tmp / "config", state_dir=tmp / "state", bucket=None)
session = steps.Session(settings=settings, api=api_for_endpoint(url))
request = steps.up_request(settings, steps.SliceOptions("v5p-8", name="chaos-sig"))
try:
    asyncio.run(steps.up(session, request, progress=lambda s: print(s, file=sys.stderr, flush=True)))
except KeyboardInterrupt:
    sys.exit(signals.exit_code())
"""


@pytest.mark.parametrize("started", ["foreground", "background job"])
@pytest.mark.parametrize("phase", ["create request", "wait"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", pytest.param("SIGINT", marks=pytest.mark.slow)])
def test_up_told_to_stop_deletes_what_it_created(kit, tmp_path, sig, phase, started):
    import os
    import signal as signals_mod
    import subprocess
    import sys
    import time as _time

    if started == "background job" and sig == "SIGINT":
        pytest.skip("a shell's background job ignores SIGINT (tests/test_stop_signals.py)")
    number = getattr(signals_mod, sig)
    kit.admin.set_timings(node_create=1e6)  # CREATING until told otherwise
    kit.admin.reset_stats()
    if phase == "create request":
        kit.admin.latency(1.0)
    argv = [sys.executable, "-c", _UP_CHILD, kit.fake.tpu_api_url, str(tmp_path)]
    if started == "background job":  # a script's `up &`: SIGINT ignored from the start
        argv = ["bash", "-c", '"$@" & wait $!', "bash", *argv]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    pid = int(child.stdout.readline())
    call = "nodes.create" if phase == "create request" else "operations.get"
    while kit.admin.stats()["by_call"].get(call, 0) < 1:
        assert child.poll() is None, child.communicate()
        _time.sleep(0.05)
    os.kill(pid, number)
    os.kill(pid, number)  # a second one must not cut the undo short
    _, err = child.communicate(timeout=60)
    kit.admin.latency(0)
    assert child.returncode == 128 + number, err
    assert kit.admin.stats()["by_call"].get("nodes.delete", 0) == 1, err
    kit.admin.set_timings(node_create=90.0)
    run(wait_deleted(kit.session.api, kit.session.settings.parent, "chaos-sig"))
    assert kit.admin.is_empty()
    as_job = " (a background job)" if started == "background job" else ""
    kit.record("up", f"{sig} during the {phase}{as_job}", "undoes", "undone: the slice up made deleted")
