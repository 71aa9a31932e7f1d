"""`queue add --num-slices K --elastic` on the in-process fake cloud (issue 39): the tick
asks for K single-slice queued resources, and a lost one is lost alone: the run goes on on
the survivors as a new attempt (none of --max-attempts used), the lost slice is asked for
again (`:reset`), and the run grows back when it serves; a re-ask whose window closes
(FAILED) is deleted, said in one line, and the run goes on on the rest. No JAX: the
steps script checkpoints on SIGTERM, as the template does (tests/e2e/test_elastic.py runs
the template). Bad input is refused in one line before anything starts."""

from __future__ import annotations

import pytest

from podctl.base._sync import run_sync
from tests.cli_in_process import nothing_started, podctl_here
from tests.conftest import Podctl, assert_one_line_error
from tests.queue_support import PROJECT, SCRIPTS, ZONE, Queue

PARENT = f"projects/{PROJECT}/locations/{ZONE}"


@pytest.fixture
def queue(fake, api, isolated) -> Queue:
    return Queue(fake, api, isolated)


def _members(queue: Queue, name: str) -> dict[str, str]:
    from podctl.cloud import describe

    return {m.name: m.state for m in run_sync(describe.describe(queue.api, PARENT, name)).members}


def _notes(queue: Queue) -> list[str]:
    return [ev["note"] for ev in queue.events() if ev["event"] == "elastic"]


def _printed(queue: Queue, run_id: str) -> list[str]:
    """What RUN_ID's hosts printed, host 0's (the steps script's leader) first, from GCS."""
    from podctl.jobs.logs import LogReader

    lines: list[str] = []
    run_sync(LogReader(queue.storage, run_id, 1, lambda host, line: lines.append(line)).follow(follow=False))
    return lines


def _running(queue: Queue, entry_id: int, attempt: int, what: str):
    """Tick until attempt ATTEMPT of the entry runs and its script has stepped."""
    return queue.until(lambda es: es[entry_id].state == "running" and es[entry_id].attempt == attempt
                       and len(_printed(queue, es[entry_id].run_id)) > 3, what)[entry_id]


def _lose(queue: Queue, fake, name: str) -> None:
    """Preempt slice 1 of NAME in a stockout: its re-ask waits."""
    fake.admin.inject("stockout")
    fake.admin.preempt(f"{name}-1")
    fake.admin.advance(100)


def test_an_elastic_entry_goes_on_on_the_survivors_and_grows_back(queue, fake):
    entry = queue.add("resumable_steps.py", "150", tier="spot", num_slices=3, elastic=True)
    e = _running(queue, entry.id, 1, "running on 3 slices")
    assert sorted(_members(queue, e.slice_name)) == [f"{e.slice_name}-{i}" for i in range(3)]
    try:
        _lose(queue, fake, e.slice_name)
        e = _running(queue, entry.id, 2, "running on the survivors")
        first, second = e.attempts
        assert (first["outcome"], first["kept"], second["slices"]) == ("shrunk", True, [0, 2])
        assert second["slice"] == first["slice"] == e.slice_name and e.max_attempts == 4
        queue.tick()
        assert _members(queue, e.slice_name)[f"{e.slice_name}-1"] == "WAITING_FOR_RESOURCES"
    finally:
        fake.admin.inject("capacity", "unlimited")
    fake.admin.advance(100)
    e = _running(queue, entry.id, 3, "grown back to 3 slices")
    assert e.attempts[1]["outcome"] == "grown" and e.attempts[2]["slices"] == [0, 1, 2]
    e = queue.settle()[entry.id]
    assert e.state == "succeeded" and [a["outcome"] for a in e.attempts] == ["shrunk", "grown", "succeeded"]
    # each relaunch starts where the run before it stopped: the survivors' checkpoint at
    # its SIGTERM (the grown-back slice gets that state, not an older one)
    printed = [_printed(queue, a["run_id"]) for a in e.attempts]
    for before, after in zip(printed, printed[1:]):  # host 0's lines first: the leader's
        saved = [line.removeprefix("checkpoint at ") for line in before if line.startswith("checkpoint at ")]
        assert len(saved) == 1 and int(saved[0]) > 0 and after[0] == f"start at {saved[0]}", (before, after[:3])
    notes = _notes(queue)
    assert any("going on on the 2 that serve (slice 0, 2)" in n for n in notes), notes
    assert any("asking for slice 1 of" in n for n in notes) and any("growing back to 3 of 3" in n for n in notes)


def test_an_elastic_entrys_failed_request_is_deleted_and_the_run_goes_on_until_below_its_floor(queue, fake):
    """Slice 1's re-ask FAILED (its window closed in a stockout): deleted, said once, the
    run goes on on 2 (at --min-slices 2). Slice 2 lost then: its re-ask fails at once
    (the same window), so the floor can never be met: no wait to the deadline, the slice
    made again whole."""
    entry = queue.add("resumable_steps.py", "100", tier="spot", valid_for=3600, num_slices=3,
                      elastic=True, min_slices=2)
    e = _running(queue, entry.id, 1, "running on 3 slices")
    first = e.slice_name
    try:
        _lose(queue, fake, first)
        e = _running(queue, entry.id, 2, "running on the survivors")
        fake.admin.advance(7200)  # the window of the re-ask closes in the stockout: FAILED
        queue.until(lambda es: f"{first}-1" not in _members(queue, first), "request deleted")
        failed = [n for n in _notes(queue) if "failed" in n]
        assert len(failed) == 1 and f"deleting {first}-1, no longer asked for" in failed[0], failed
        assert queue.entry(entry.id).state == "running"  # on 2 of 3
        fake.admin.preempt(f"{first}-2")
        fake.admin.advance(100)
        e = queue.until(lambda es: es[entry.id].slice_name != first, "made again whole")[entry.id]
    finally:
        fake.admin.inject("capacity", "unlimited")
    assert e.attempts[2]["error"] == ("1 of 3 slices serve, below --min-slices 2, the request for "
                                    "slice 1, 2 failed: making all 3 again")
    e = queue.settle()[entry.id]
    assert e.state == "succeeded" and [a["outcome"] for a in e.attempts] == [
        "shrunk", "shrunk", "lost", "succeeded"]


def test_below_its_floor_an_elastic_entry_waits_with_no_run_then_goes_on(queue, fake):
    """Issue 39's check on the queue: 2 of 3 lost with --min-slices 2: no run on 1 slice;
    the entry goes on once a lost one is back."""
    entry = queue.add("resumable_steps.py", "60", tier="spot", num_slices=3, elastic=True, min_slices=2)
    e = _running(queue, entry.id, 1, "running on 3 slices")
    try:
        fake.admin.inject("stockout")
        for index in (1, 2):
            fake.admin.preempt(f"{e.slice_name}-{index}")
        fake.admin.advance(100)
        e = queue.until(lambda es: es[entry.id].attempt == 2, "below the floor")[entry.id]
        assert e.state == "starting" and e.attempts[-1]["waiting"] and e.attempts[-1]["slices"] == [0]
        for _ in range(3):  # no run while below the floor; the lost ones asked for again
            queue.tick()
        assert queue.entry(entry.id).state == "starting" and not _printed(queue, e.run_id)
        assert set(_members(queue, e.slice_name).values()) == {"ACTIVE", "WAITING_FOR_RESOURCES"}
    finally:
        fake.admin.inject("capacity", "unlimited")
    fake.admin.advance(100)
    e = queue.settle()[entry.id]
    assert e.state == "succeeded" and e.attempt == 2 and e.attempts[0]["outcome"] == "shrunk"
    assert len(e.attempts[-1]["slices"]) >= 2 and any("serve again: going on on slice" in n for n in _notes(queue))


@pytest.mark.parametrize("args, words", [
    (["--elastic"], ["--elastic", "--num-slices 2 or more"]),
    (["--num-slices", "2", "--min-slices", "2"], ["--min-slices goes with --elastic"]),
    (["--num-slices", "2", "--elastic", "--min-slices", "3"], ["--min-slices 3", "give 1 to 2"]),
    (["--num-slices", "2", "--elastic", "--grow-deadline", "soon"], ["--grow-deadline"]),
    (["--num-slices", "2", "--elastic", "--grow-deadline", ""], ["--grow-deadline"]),
    (["--num-slices", "0"], ["--num-slices"]),
])
def test_bad_elastic_queue_input_is_one_line(tmp_path, args, words):
    (tmp_path / "home").mkdir(exist_ok=True)
    done = podctl_here(tmp_path, "queue", "add", "--slice", "v5p-8", *args, str(SCRIPTS / "show_env.py"),
                       env=Podctl(tmp_path).env)
    assert_one_line_error(done, 2, *words)
    assert nothing_started(tmp_path)
