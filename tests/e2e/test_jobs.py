"""The job layer end to end on the fake cloud, real clients all the way: the real
google-cloud-tpu client provisions, asyncssh reaches the fake hosts, the agent
ships logs through google-cloud-storage to the GCS emulator, and real multi-host
JAX runs across the fake hosts."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from podctl.cloud.sshkey import ensure_ssh_key
from podctl.cloud.up import UpRequest, up
from podctl.cloud.types import SliceSpec
from podctl.cloud import terminate
from podctl.base.errors import InvalidValueError
from podctl.jobs.job import Job, RunRequest, exec_on_hosts, parse_env, parse_hosts
from podctl.jobs.run_spec import RunSpec
from podctl.jobs import launch
from podctl.jobs.logs import LogReader
from podctl.jobs.ssh import HostPins
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage, fake_grant
from tests.conftest import FAST, PARENT

SCRIPTS = Path(__file__).parents[1] / "scripts"
JAX_HELLO = Path(__file__).parents[2] / "examples" / "jax_hello" / "hello.py"  # what users copy


class Lines:
    def __init__(self):
        self.by_host: dict[int, list[str]] = {}

    def __call__(self, host: int, line: str) -> None:
        self.by_host.setdefault(host, []).append(line)


@pytest.fixture
def slice16(api, fake, isolated):
    """A READY fake v5p-16 (2 hosts) with podctl's key; deleted at the end."""
    key = ensure_ssh_key(isolated / "config")
    result = asyncio.run(up(api, UpRequest(parent=PARENT, name="job16", spec=SliceSpec.build("v5p-16"),
                                           ssh_keys=key.metadata_entry, owner="t", policy=FAST)))
    yield result.info, key
    asyncio.run(terminate.terminate(api, PARENT, "job16", policy=FAST))


def make_job(fake, info, key, tmp: Path, script: str, *args: str, **request) -> tuple[Job, Lines]:
    lines = Lines()
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    spec = RunSpec(script=SCRIPTS / script, args=args,
                   **{k: request.pop(k) for k in ("env", "setup", "workdir") if k in request})
    # the fake's hosts, as steps.runs says them for the fake backend: CPU jax, and no CPython
    # shipped in the environment (a real client downloads one; the fake is offline)
    request.setdefault("grant", fake_grant)
    request.setdefault("ship_python", False)
    request.setdefault("host_jax_extra", "cpu")
    req = RunRequest(info=info, spec=spec, ssh_port=fake.hosts.ssh_port,
                     flush_seconds=request.pop("flush_seconds", 0.5), poll_seconds=0.2,
                     hosts=request.pop("hosts", None), **request)
    job = Job(storage, req, project="test-project", zone="us-central1-a", private_key=key.private_path,
              pins=HostPins(tmp / "pins.json"), sink=lines, notice=lambda text: None)
    return job, lines


def launch_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run_job(job: Job):
    try:
        await job.start(await job.prepare())
        return await job.follow()
    finally:
        await job.close()


@pytest.mark.host_env
def test_real_multihost_jax_on_a_fake_v5p_16(slice16, fake, tmp_path):
    info, key = slice16
    job, lines = make_job(fake, info, key, tmp_path, str(JAX_HELLO))
    result = asyncio.run(run_job(job))
    assert result.exit_code == 0, lines.by_host
    for host in (0, 1):
        assert f"process {host} of 2: devices 8, local 4, sum {2.0 * sum(range(32))}" in lines.by_host[host]


V6E_PARENT = PARENT.rsplit("/", 1)[0] + "/us-east5-b"  # a zone with v6e (generations.toml)


@pytest.mark.host_env
def test_real_multihost_jax_on_a_fake_v6e_16(api, fake, isolated, tmp_path):
    """v6e from its record alone: 4 hosts of 4 chips (so 4 CPU devices each), up, the
    same multi-host JAX script, down."""
    key = ensure_ssh_key(isolated / "config")
    spec = SliceSpec.build("v6e-16")
    assert spec.runtime_version == "v2-alpha-tpuv6e"
    result = asyncio.run(up(api, UpRequest(parent=V6E_PARENT, name="v6e16", spec=spec,
                                           ssh_keys=key.metadata_entry, owner="t", policy=FAST)))
    try:
        info = result.info
        assert (info.accelerator_type, info.topology, len(info.hosts), info.chips) == (
            "v6e-16", "4x4", 4, 16)
        assert info.runtime_version == "v2-alpha-tpuv6e"
        job, lines = make_job(fake, info, key, tmp_path, str(JAX_HELLO))
        done = asyncio.run(run_job(job))
        assert done.exit_code == 0, lines.by_host
        for host in range(4):
            assert f"process {host} of 4: devices 16, local 4, sum {2.0 * sum(range(64))}" in \
                lines.by_host[host]
    finally:
        asyncio.run(terminate.terminate(api, V6E_PARENT, "v6e16", policy=FAST))


def test_a_failing_host_fails_the_job_and_stops_the_others(slice16, fake, tmp_path):
    info, key = slice16
    job, lines = make_job(fake, info, key, tmp_path, "exit_on_host.py",
                          env={"FAIL_HOST": "1", "FAIL_CODE": "3"})
    started = time.monotonic()
    result = asyncio.run(run_job(job))
    assert result.exit_code == 3 and result.failed.host == 1
    assert result.statuses[0].stopped and result.statuses[0].exit_code != 0
    assert time.monotonic() - started < 60
    assert "should have been stopped" not in lines.by_host.get(0, [])


def test_every_line_arrives_once_in_order(slice16, fake, tmp_path):
    info, key = slice16
    job, lines = make_job(fake, info, key, tmp_path, "many_lines.py", "20000")
    result = asyncio.run(run_job(job))
    assert result.exit_code == 0
    for host in (0, 1):
        assert lines.by_host[host] == [f"{host} {i}" for i in range(20000)]


def test_env_values_arrive_literally_and_secrets_stay_out_of_records(slice16, fake, tmp_path):
    info, key = slice16
    pwned = tmp_path / "pwned"
    env = parse_env([f"TRICKY=$(touch {pwned}); `touch {pwned}` \"'", "API_TOKEN=s3cr3t-value"])
    job, lines = make_job(fake, info, key, tmp_path, "show_env.py", "TRICKY", "PODCTL_PROCESS_ID",
                          "TPU_WORKER_ID", "JAX_COORDINATOR_ADDRESS", env=env)
    result = asyncio.run(run_job(job))
    assert result.exit_code == 0
    seen = json.loads(lines.by_host[1][-1].removeprefix("ENV "))
    assert seen["TRICKY"] == env["TRICKY"] and not pwned.exists()
    assert (seen["PODCTL_PROCESS_ID"], seen["TPU_WORKER_ID"]) == ("1", "1")
    # host 0's own address, port 8476 (the one Google's TPU firewall opens), as on a TPU VM
    assert seen["JAX_COORDINATOR_ADDRESS"] == f"{info.hosts[0].ip}:8476" != "127.0.0.1:8476"
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    record = asyncio.run(storage.download_bytes(f"podctl/runs/{job.run_id}/run.json")).decode()
    assert "s3cr3t-value" not in record and "API_TOKEN" in record


def test_setup_runs_once_per_bundle(slice16, fake, tmp_path):
    info, key = slice16
    for attempt in range(2):
        job, lines = make_job(fake, info, key, tmp_path, "show_env.py", setup="echo setting-up-now")
        assert asyncio.run(run_job(job)).exit_code == 0
        text = "\n".join(lines.by_host[0])
        if attempt == 0:
            assert "setting-up-now" in text
        else:
            assert "setting-up-now" not in text and "setup already done" in text


def test_failed_setup_names_the_command(slice16, fake, tmp_path):
    info, key = slice16
    job, lines = make_job(fake, info, key, tmp_path, "show_env.py", setup="echo nope; exit 7")
    result = asyncio.run(run_job(job))
    assert result.exit_code == 125 and "setup `echo nope; exit 7` exited 7" in result.failed.error
    assert "nope" in result.failed.error


def test_logs_replay_from_gcs_after_the_fact(slice16, fake, tmp_path):
    info, key = slice16
    job, _ = make_job(fake, info, key, tmp_path, "many_lines.py", "500")
    result = asyncio.run(run_job(job))
    replay = Lines()
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    reader = LogReader(storage, result.run_id, 2, replay, None)
    asyncio.run(reader.follow(follow=False))
    assert replay.by_host[1] == [f"1 {i}" for i in range(500)]


def test_exec_streams_and_returns_exit_codes(slice16, fake, tmp_path):
    info, key = slice16
    targets = launch.targets_for(info, fake.hosts.ssh_port)
    lines = Lines()
    codes = asyncio.run(exec_on_hosts(targets, key.private_path, HostPins(tmp_path / "p.json"),
                                      ["python3", "-c", "import sys; print(sys.executable)"],
                                      lines, None))
    python3 = str(fake.hosts.image.bin_dir / "python3")  # the image's (fake/vm/image_python.py)
    assert codes == {0: 0, 1: 0} and lines.by_host == {0: [python3], 1: [python3]}
    codes = asyncio.run(exec_on_hosts(targets, key.private_path, HostPins(tmp_path / "p.json"),
                                      ["bash", "-c", "exit ${HOSTNAME##*-w-}"], Lines(), {1}))
    assert codes == {1: 1}


def test_a_changed_host_key_is_refused(slice16, fake, tmp_path):
    info, key = slice16
    targets = launch.targets_for(info, fake.hosts.ssh_port)
    pins = tmp_path / "pins.json"
    asyncio.run(exec_on_hosts(targets, key.private_path, HostPins(pins), ["true"], Lines(), None))
    tampered = {k: v.replace(v.split()[1], v.split()[1][::-1]) for k, v in json.loads(pins.read_text()).items()}
    pins.write_text(json.dumps(tampered))
    from podctl.base.errors import HostKeyError

    with pytest.raises(HostKeyError, match="different SSH host key"):
        asyncio.run(exec_on_hosts(targets, key.private_path, HostPins(pins), ["true"], Lines(), None))


def test_bad_env_and_hosts_are_refused():
    for bad in (["1BAD=x"], ["=x"], ["A B=x"]):
        with pytest.raises(InvalidValueError, match="KEY=VALUE"):
            parse_env(bad)
    with pytest.raises(InvalidValueError, match="NOEQUALS is not set in podctl's environment"):
        parse_env(["NOEQUALS"], environ={})
    assert parse_env(["A=b=c", "E=", "FROM_ENV"], environ={"FROM_ENV": "v"}) == {
        "A": "b=c", "E": "", "FROM_ENV": "v"}
    assert parse_hosts("all", 4) is None and parse_hosts("0,3", 4) == {0, 3}
    for bad in ("4", "x", "", "-1"):
        with pytest.raises(InvalidValueError):
            parse_hosts(bad, 4)


def test_missing_script_is_refused(slice16, fake, tmp_path):
    info, key = slice16
    job, _ = make_job(fake, info, key, tmp_path, "does_not_exist.py")
    with pytest.raises(InvalidValueError, match="no script"):  # bad input: exit 2
        asyncio.run(job.prepare())


def test_100k_lines_per_host_on_8_hosts_arrive_once_in_order(api, fake, isolated, tmp_path):
    key = ensure_ssh_key(isolated / "config")
    info = asyncio.run(up(api, UpRequest(parent=PARENT, name="job64", spec=SliceSpec.build("v5p-64"),
                                         ssh_keys=key.metadata_entry, owner="t", policy=FAST))).info
    try:
        job, lines = make_job(fake, info, key, tmp_path, "many_lines.py", "100000", flush_seconds=2.0)
        result = asyncio.run(run_job(job))
        assert result.exit_code == 0 and len(result.statuses) == 8
        for host in range(8):
            got = lines.by_host[host]
            assert len(got) == 100000 and got == [f"{host} {i}" for i in range(100000)]
    finally:
        asyncio.run(terminate.terminate(api, PARENT, "job64", policy=FAST))


def test_a_host_terminated_mid_run_fails_the_job_fast(slice16, fake, tmp_path):
    """A SIGTERM that podctl did not send (a TPU VM's preemption notice, here sent to
    host 1's agent by hand) is a failure, so the other hosts are stopped instead of
    running on alone."""
    info, key = slice16
    job, lines = make_job(fake, info, key, tmp_path, "exit_on_host.py", env={"FAIL_HOST": "99"})

    async def go():
        await job.start(await job.prepare())
        follow = asyncio.create_task(job.follow())
        await asyncio.sleep(2)
        notice = f"kill -TERM $(cat $HOME/.podctl/runs/{job.run_id}/agent.pid)"
        await exec_on_hosts(job.targets, key.private_path, HostPins(tmp_path / "pins.json"),
                            ["bash", "-c", notice], Lines(), {1})
        try:
            return await asyncio.wait_for(follow, 60)
        finally:
            await job.close()

    result = asyncio.run(go())
    assert result.exit_code != 0 and result.failed.host == 1 and not result.failed.stopped
    assert result.statuses[0].stopped  # podctl stopped host 0 (fail-fast)
    assert "should have been stopped" not in "\n".join(lines.by_host.get(0, []))


def test_a_failed_host_ends_the_run_fast_while_another_is_frozen(slice16, fake, tmp_path):
    """Host 1 frozen (SIGSTOP) before its first step, host 0 fails: fail-fast ends the
    run from host 0's own status without waiting for host 1, whose script (deaf to the
    SIGTERM while stopped) its agent SIGKILLs after the fail-fast grace."""
    from podctl.jobs import run_files
    from podctl.jobs.job import FAIL_FAST_GRACE_SECONDS, FAIL_FAST_WAIT_SECONDS

    info, key = slice16
    job, lines = make_job(fake, info, key, tmp_path, "freeze_on_host.py",
                          env={"FREEZE_HOST": "1", "FAIL_HOST": "0", "FAIL_AFTER": "8"}, hosts=None)

    async def go():
        try:
            await job.start(await job.prepare())
            # Before the fix the agent of the frozen host waited its 600 s stop grace.
            return await asyncio.wait_for(job.follow(), 8 + FAIL_FAST_WAIT_SECONDS + 60)
        finally:
            await job.close()

    result = asyncio.run(go())
    assert result.exit_code == 3 and result.failed.host == 0 and not result.failed.stopped
    assert "host 1 freezing" in lines.by_host.get(1, [])
    assert "should have been stopped" not in "\n".join(lines.by_host.get(1, []))

    async def host_1_ended():  # its agent killed the frozen script: nothing left running
        deadline = time.monotonic() + FAIL_FAST_GRACE_SECONDS + 60
        while time.monotonic() < deadline:
            statuses = await run_files.read_statuses(job.storage, job.run_id)
            if 1 in statuses:
                return statuses[1]
            await asyncio.sleep(1)
        raise AssertionError("host 1's script was never ended")

    status = asyncio.run(host_1_ended())
    assert status.exit_code == 137 and status.stopped


def test_a_failed_chunk_upload_leaves_no_gap(tmp_path):
    """A chunk that cannot be uploaded keeps its lines for the next flush under the
    same number: the reader, which reads chunks in unbroken order, misses nothing."""
    from podctl.host.agent_logs import LogShipper

    class Bucket:  # agent_gcs.Bucket's upload, failing when told to
        fail, objects = 0, {}

        def upload(self, name, data, content_type=None):
            if self.fail:
                self.fail -= 1
                raise ConnectionError("GCS away")
            self.objects[name] = data.decode()

    bucket = Bucket()
    shipper = LogShipper({"run_id": "r", "host": 0, "flush_seconds": 3600}, bucket, tmp_path)
    shipper.line("a")
    bucket.fail = 1
    shipper.flush(attempts=1)  # fails: nothing numbered yet
    shipper.line("b")
    shipper.flush(attempts=1)
    shipper.line("c")
    shipper.flush(attempts=1)
    assert sorted(bucket.objects) == ["podctl/runs/r/logs/host-0000/000001.log",
                                      "podctl/runs/r/logs/host-0000/000002.log"]
    assert "".join(bucket.objects[k] for k in sorted(bucket.objects)) == "a\nb\nc\n"
    shipper.local.close()
