"""The Python API (`import podctl`) on the fake cloud's daemon, the way a notebook uses
it: inside a running event loop, with context managers that always tear down."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

import podctl
from podctl.fake.admin import daemon

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parents[1] / "scripts"


def test_public_surface_is_what_the_docs_say():
    """__all__, the names the Python API guide lists, and what resolves agree."""
    section = (REPO / "docs" / "guides" / "python-api.md").read_text()
    documented = re.search(r"Public names:\s*(.+?)\.\s", section, re.S).group(1)
    assert sorted(n.strip(" `") for n in documented.split(",")) == sorted(podctl.__all__)
    for name in podctl.__all__:
        assert getattr(podctl, name) is not None
    with pytest.raises(AttributeError):
        podctl.no_such_name  # noqa: B018


def test_import_podctl_is_light():
    code = ("import sys, podctl\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('google', 'asyncssh', 'jax')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lifecycle_inside_a_running_event_loop(fake_dir, capsys):
    """As in a Jupyter kernel: every call made from a coroutine of a running loop."""
    seen: dict = {}

    async def notebook() -> None:
        with podctl.connect(backend="fake") as cloud:
            assert daemon.status(fake_dir)["running"]
            seen["cloud"] = repr(cloud)
            with cloud.up("v5p-16", name="nb-slice") as slice_:
                seen["slice"] = repr(slice_)
                seen["html"] = slice_._repr_html_()
                assert [s.name for s in cloud.slices()] == ["nb-slice"]
                run = slice_.run(SCRIPTS / "many_lines.py", args=["5"])
                seen["code"] = run.wait()
                seen["run"] = repr(run)
                run.logs(hosts="all")
                assert run.checkpoints() == []
                again = cloud.run(run.run_id)  # the same run, read back from GCS
                assert again.wait() == 0
                seen["runs"] = [r.run_id for r in cloud.runs()]
                # a script that names its JAX process index (1 - worker): labelled by both
                named = slice_.run(SCRIPTS / "process_index.py")
                assert named.wait() == 0
                named.logs(hosts="all")
            seen["after_with"] = [s.name for s in cloud.slices()]
        seen["daemon_after"] = daemon.status(fake_dir)["running"]

    asyncio.run(notebook())
    out = capsys.readouterr()
    assert seen["code"] == 0
    assert seen["cloud"].startswith("<podctl.Cloud fake project=fake-project")
    assert "nb-slice v5p-16 READY: 2 hosts, 8 chips" in seen["slice"]
    assert "<table>" in seen["html"] and "nb-slice" in seen["html"]
    assert "succeeded" in seen["run"]
    assert seen["after_with"] == []  # the slice's `with` deleted it
    assert seen["daemon_after"] is False  # the connection stopped the fake it started
    assert "[host 0000] 0 4" in out.out and "[host 0001] 1 4" in out.out
    assert "[host 0000] worker 0 before\n" in out.out and "[host 0001 p0] worker 1 after\n" in out.out
    assert len(seen["runs"]) == 1
    # Progress is a few status lines, not one per poll.
    assert len([line for line in out.err.splitlines() if "run " in line]) <= 6


def test_failed_run_and_close_tears_down(fake_dir):
    cloud = podctl.connect(backend="fake")
    try:
        slice_ = cloud.up("v5p-16", name="nb-fail")  # no `with`: close() must delete it
        run = slice_.run(SCRIPTS / "exit_on_host.py", env={"FAIL_HOST": "1", "FAIL_CODE": "7"})
        assert run.wait() == 7
        failing = slice_.run(SCRIPTS / "exit_on_host.py", env={"FAIL_HOST": "0", "FAIL_CODE": "4"})
        with pytest.raises(podctl.PodctlError, match="exit code 4"):
            failing.wait(check=True)
        with pytest.raises(podctl.PodctlError, match="no script"):
            slice_.run(SCRIPTS / "missing.py")
    finally:
        cloud.close()
    assert not daemon.status(fake_dir)["running"]


def test_a_running_fake_is_left_running(fake_dir):
    """connect() stops only a fake cloud it started itself."""
    from podctl.base import settings

    daemon.start(fake_dir, project=settings.FAKE_PROJECT, zone=settings.FAKE_ZONE)
    with podctl.connect(backend="fake") as cloud:
        slice_ = cloud.up("v5p-8", name="nb-keep")
        run = slice_.run(SCRIPTS / "exit_on_host.py", env={"FAIL_HOST": "0", "FAIL_CODE": "0"})
        assert run.wait() == 0
    assert daemon.status(fake_dir)["running"]
    # ...but the slice it created is gone.
    with podctl.connect(backend="fake") as cloud:
        assert list(cloud.slices()) == []


def test_recover_cost_and_every_attempt_from_python(fake_dir, capsys):
    """`slice.run(..., recover=1)`: a preempted run is made again and relaunched, as
    `podctl run --recover 1` does; `Run.logs()` replays both attempts and `Run.cost()`
    bills the run as `podctl cost RUN_ID` does."""
    from podctl.fake.admin.admin_client import FakeAdmin

    with podctl.connect(backend="fake") as cloud:
        admin = FakeAdmin(daemon.status(fake_dir)["admin"])
        with pytest.raises(podctl.PodctlError, match="retry_errors=True goes with recover=N"):
            cloud.up("v5p-8", name="nb-rec").run(SCRIPTS / "sleep_then_exit.py", retry_errors=True)
        slice_ = cloud.slice("nb-rec")
        run = slice_.run(SCRIPTS / "sleep_then_exit.py", args=["6"], recover=1)
        admin.preempt("nb-rec")  # the first attempt has started: SIGTERM to its script
        assert run.wait() == 0
        assert run.recovered.recoveries == 1
        first, second = run.recovered.attempts
        assert first.reason.startswith("slice ") and second.reason is None
        capsys.readouterr()
        run.logs()
        out = capsys.readouterr().out
        assert f"attempt 2 of 2: run {second.run_id}" in out
        assert out.count("[host 0000] slept") == 1  # the first attempt was cut short
        bill = run.cost()
        assert bill.run_id == run.run_id and bill.chips == 4 and bill.billed_seconds > 0
        assert bill.cost_usd is not None and bill.cost_usd > 0
        assert cloud.run(run.run_id).cost().run_id == run.run_id  # read back from GCS
        slice_.down()


def test_run_stop_marks_the_run_stopped_by_its_owner_where_every_process_sees_it(fake_dir):
    """`Run.stop()` of a run under recover=N: stopped here, and its stop request is in
    GCS, so that no follower anywhere relaunches it."""
    from podctl.jobs.run_files import read_record, read_stop_request

    with podctl.connect(backend="fake") as cloud:
        slice_ = cloud.up("v5p-8", name="nb-stop")
        run = slice_.run(SCRIPTS / "ticker.py", args=["100000", "0.2"], recover=2)
        run.stop()
        storage = cloud.session.storage
        stop = cloud._run(read_stop_request(storage, run.run_id))
        assert stop is not None and stop.by == "Run.stop()"
        assert cloud._run(read_record(storage, run.run_id)).state == "stopped"
        slice_.down()
