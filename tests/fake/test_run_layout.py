"""A run's GCS layout (podctl/host/run_layout.py): one module that both the host agent
and podctl's readers name every object with. Its names never change (runs already in
buckets must stay readable), chunk names parse back and read in number order however
GCS lists them, the agent's zip carries the module, and what the agent writes is what
the readers find."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from podctl.host import agent_control, run_layout
from podctl.jobs import launch, profiles, run_files
from podctl.host.agent import Agent
from podctl.host.agent_logs import LogShipper
from podctl.jobs.run_record import RunRecord
from podctl.cloud.storage import StorageNotFound

RUN = "my-slice-20261202-173000-ab12"


# ---- the names, byte for byte ----------------------------------------------------------

def test_every_name_is_the_one_runs_in_buckets_were_written_with():
    r = f"podctl/runs/{RUN}"
    sha = "ab" * 32
    assert run_layout.run_prefix(RUN) == r
    assert run_layout.record_object(RUN) == f"{r}/run.json"
    assert run_layout.index_object(RUN) == f"podctl/index/{RUN}.json"
    assert run_layout.index_prefix() == "podctl/index/"
    assert run_layout.log_prefix(RUN) == f"{r}/logs/"
    assert run_layout.log_prefix(RUN, 3) == f"{r}/logs/host-0003/"
    assert run_layout.chunk_object(RUN, 3, 12) == f"{r}/logs/host-0003/000012.log"
    assert run_layout.chunk_object(RUN, 12345, 1234567) == f"{r}/logs/host-12345/1234567.log"
    assert run_layout.heartbeat_prefix(RUN) == f"{r}/heartbeat/"
    assert run_layout.heartbeat_object(RUN, 0) == f"{r}/heartbeat/host-0000.json"
    assert run_layout.status_prefix(RUN) == f"{r}/status/"
    assert run_layout.status_object(RUN, 511) == f"{r}/status/host-0511.json"
    assert run_layout.stop_request_object(RUN) == f"{r}/control/stop.json"
    assert run_layout.halt_request_object(RUN) == f"{r}/control/halt.json"
    assert run_layout.stacks_request_object(RUN) == f"{r}/control/stacks.json"
    assert run_layout.launch_object(RUN) == f"{r}/launch.json"
    assert (run_layout.RUN_POINTER_KEY, run_layout.BOOT_KEY, run_layout.GUEST_NAMESPACE, run_layout.WATCH_DIR) == (
        "podctl-run", "podctl-boot", "podctl", ".podctl/watch")
    assert run_layout.profile_request_object(RUN) == f"{r}/control/profile.json"
    assert run_layout.profile_acks_prefix(RUN, "P1") == f"{r}/control/acks/P1/"
    assert run_layout.profile_ack_object(RUN, "P1", 2) == f"{r}/control/acks/P1/host-0002.json"
    assert run_layout.profiles_logdir(RUN) == f"{r}/profiles"
    assert (run_layout.profile_trace_object(RUN, "P1", 1, ".xplane.pb")
            == f"{r}/profiles/plugins/profile/P1/host-0001.xplane.pb")
    assert run_layout.stacks_prefix(RUN) == f"{r}/stacks/"
    assert (run_layout.stacks_object(RUN, "20261202T173000Z", 4)
            == f"{r}/stacks/20261202T173000Z/host-0004.txt")
    assert run_layout.xla_dump_prefix(RUN, 1) == f"{r}/xla_dump/host-0001/"
    assert run_layout.env_build_log_object(RUN) == f"{r}/env-build.log"
    assert run_layout.env_failed_object(RUN) == f"{r}/env-failed.txt"
    assert run_layout.requirements_lock_object(RUN) == f"{r}/requirements.lock"
    assert run_layout.identity_check_object(RUN) == f"{r}/identity-check"
    assert run_layout.checkpoints_prefix(RUN) == f"{r}/checkpoints/"
    assert run_layout.checkpoint_dir("bkt", RUN) == f"gs://bkt/{r}/checkpoints"
    assert run_layout.run_url("bkt", RUN) == f"gs://bkt/{r}"
    assert run_layout.bundle_object(sha) == f"podctl/bundles/{sha}.tar.gz"
    assert run_layout.agent_object(sha) == f"podctl/agents/{sha}.zip"
    assert run_layout.uv_tool_object(sha) == f"podctl/tools/uv-{sha}"
    assert run_layout.zstandard_tool_object(sha) == f"podctl/tools/zstandard-{sha}.zip"
    assert run_layout.env_archive_objects("k1", "s1") == ("podctl/envs/k1.s1.tar.gz", "podctl/envs/k1.s1.json")
    assert run_layout.env_client_archive_object("k1", "ab12") == "podctl/envs/k1/ab12.tar.zst"


def test_the_hosts_run_directory_is_the_one_agents_already_running_use():
    """An agent started by an earlier podctl still takes a stop by these names."""
    assert (run_layout.HOST_RUNS_DIR, run_layout.CONFIG_FILE, run_layout.PID_FILE, run_layout.STOP_FILE,
            run_layout.STATUS_FILE) == (".podctl/runs", "config.json", "agent.pid", "stop", "status.json")
    d = f'"$HOME"/.podctl/runs/{RUN}'
    assert launch.stop_command(RUN, 5) == (
        f'mkdir -p {d} && echo 5.0 > {d}/stop && if test -f {d}/agent.pid; then kill -TERM '
        f'"$(cat {d}/agent.pid)" 2>/dev/null; fi; true')
    assert launch.start_command(RUN).startswith(f"umask 077 && mkdir -p {d} && cat > {d}/config.json && ")
    assert 'cfg = json.loads((d / "config.json").read_text())' in launch.BOOT


# ---- chunks and hosts: round trips and order -------------------------------------------

@pytest.mark.parametrize("number", [1, 2, 9, 10, 99, 999, 1000, 123456, 999999, 1000000, 1234567])
def test_a_chunk_name_parses_back_to_its_number(number):
    name = run_layout.chunk_name(number)
    assert len(name) == max(6, len(str(number))) + len(".log")
    assert run_layout.chunk_number(name) == number
    assert run_layout.chunk_number(run_layout.chunk_object(RUN, 7, number)) == number
    assert run_layout.host_of(run_layout.chunk_object(RUN, 7, number)) == 7


@pytest.mark.parametrize("host", [0, 1, 42, 511, 9999, 10000])
def test_a_host_tag_parses_back_from_every_object_named_by_it(host):
    assert run_layout.host_tag(host) == f"host-{host:04d}"
    for name in (run_layout.status_object(RUN, host), run_layout.heartbeat_object(RUN, host),
                 run_layout.chunk_object(RUN, host, 5), run_layout.profile_ack_object(RUN, "P", host),
                 run_layout.profile_trace_object(RUN, "P", host, ".trace.json.gz"),
                 run_layout.stacks_object(RUN, "20261202T173000Z", host)):
        assert run_layout.host_of(name) == host, name


def test_chunks_listed_in_gcs_byte_order_are_read_in_number_order():
    """GCS lists names in byte order: number order while six digits last, not after."""
    numbers = [*range(1, 1201), *range(999990, 1000011)]
    names = [run_layout.chunk_object(RUN, h, n) for h in (0, 1, 12) for n in numbers]
    listed = sorted(names)  # as GCS lists them
    six_digits = [n for n in listed if run_layout.chunk_number(n) <= 999999]
    assert six_digits == sorted(six_digits, key=lambda n: (run_layout.host_of(n), run_layout.chunk_number(n)))
    assert run_layout.chunk_number(listed[0]) == 1
    random.Random(0).shuffle(listed)  # any order at all
    by_host = run_layout.chunks_by_host(listed)
    assert sorted(by_host) == [0, 1, 12]
    for host, chunks in by_host.items():
        assert [n for n, _ in chunks] == numbers
        assert all(run_layout.host_of(name) == host for _, name in chunks)
    # Read from the first: every chunk up to the first gap (1200 -> 999990), nothing after
    assert [n for n, _ in run_layout.unbroken(by_host[0])] == list(range(1, 1201))
    # Read on from where a reader stopped, and past 999999 into seven digits
    assert [n for n, _ in run_layout.unbroken(by_host[0], 999990)] == list(range(999990, 1000011))
    assert run_layout.unbroken(by_host[0], 1201) == []  # the gap: wait for chunk 1201
    assert [n for n, _ in run_layout.unbroken(by_host[0], 1199)] == [1199, 1200]


# ---- the agent's zip carries it -------------------------------------------------------

def test_the_agent_zip_carries_the_module_and_the_agent_imports_it_from_there(tmp_path):
    data, _sha = launch.agent_source()
    zip_path = tmp_path / "agent.zip"
    zip_path.write_bytes(data)
    with zipfile.ZipFile(zip_path) as z:
        assert z.read("run_layout.py") == Path(run_layout.__file__).read_bytes()
    assert "run_layout.py" in launch.AGENT_MODULES
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import agent, agent_control, agent_env, "
            "agent_logs, run_layout; "
            "assert agent.run_layout is agent_logs.run_layout is agent_control.run_layout "
            "is agent_env.run_layout is run_layout; "
            "print(run_layout.__file__); print(run_layout.chunk_object('r', 2, 3)); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'podctl'))")
    done = subprocess.run([sys.executable, "-s", "-c", code, str(zip_path)], capture_output=True,
                          text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    where, name, podctl_modules = done.stdout.splitlines()
    assert where.startswith(str(zip_path))
    assert name == "podctl/runs/r/logs/host-0002/000003.log"
    assert podctl_modules == "[]"


# ---- what the agent writes, the readers find ------------------------------------------

class Bucket:
    """One in-memory bucket with both faces: the agent's (agent_gcs.Bucket: upload, stat,
    download) and podctl's (storage.Storage: async list in GCS's byte order, download)."""

    def __init__(self):
        self.objects: dict[str, tuple[bytes, float, int]] = {}

    # the agent's face
    def upload(self, name: str, data: bytes, content_type: str = "") -> None:
        old = self.objects.get(name)
        self.objects[name] = (bytes(data), time.time(), (old[2] + 1) if old else 1)

    def stat(self, name: str) -> dict | None:
        got = self.objects.get(name)
        return {"name": name, "generation": str(got[2])} if got else None

    def download(self, name: str) -> bytes:
        return self.objects[name][0]

    # podctl's face
    bucket_name = "mem"

    async def upload_bytes(self, name: str, data: bytes, content_type: str = "") -> None:
        self.upload(name, data)

    async def download_bytes(self, name: str) -> bytes:
        if name not in self.objects:
            raise StorageNotFound(name)
        return self.objects[name][0]

    async def download_file(self, name: str, target: Path) -> None:
        Path(target).write_bytes(await self.download_bytes(name))

    async def list(self, prefix: str) -> list:
        return [SimpleNamespace(name=n, updated=t, size=len(d))
                for n, (d, t, _g) in sorted(self.objects.items()) if n.startswith(prefix)]


def _record(num_hosts: int = 2) -> RunRecord:
    return RunRecord(run_id=RUN, slice_name="my-slice", project="p", zone="z", num_hosts=num_hosts,
                     kind="script", script="train.py", args=[], env_keys=[], bundle_hash=None,
                     created=time.time(), state="running")


def test_the_lines_heartbeats_and_status_the_agent_writes_are_what_the_readers_read(tmp_path, monkeypatch):
    bucket = Bucket()
    monkeypatch.setattr(Agent, "preempted", staticmethod(lambda: False))  # no metadata server here
    for host in (0, 1):
        run_dir = tmp_path / f"h{host}"
        run_dir.mkdir()
        agent = Agent({"run_id": RUN, "host": host, "bucket": "mem", "flush_seconds": 3600}, run_dir)
        agent.bucket = agent.logs.bucket = bucket
        agent.logs.start()
        agent.logs.heartbeat(force=True)
        for i in range(25):
            agent.logs.line(f"host {host} line {i}")
            if i % 2:
                agent.logs.flush()
        agent.write_status(3 if host else 0)
    names = sorted(bucket.objects)
    assert run_layout.chunk_object(RUN, 1, 13) in names and run_layout.status_object(RUN, 0) in names
    storage = bucket

    chunks = asyncio.run(run_files.list_chunks(storage, RUN))
    assert sorted(chunks) == [0, 1] and [n for n, _ in chunks[1]] == list(range(1, 14))
    for host in (0, 1):
        lines = asyncio.run(run_files.read_host_lines(storage, RUN, host))
        assert lines == [f"host {host} line {i}" for i in range(25)]
        phases = asyncio.run(run_files.read_host_phases(storage, RUN, host))
        assert "starting" in phases
    statuses = asyncio.run(run_files.read_statuses(storage, RUN))
    assert {h: s.exit_code for h, s in statuses.items()} == {0: 0, 1: 3}
    assert sorted(asyncio.run(run_files.read_heartbeats(storage, RUN))) == [0, 1]

    from podctl.jobs.logs import LogReader

    seen: list[tuple[int, str]] = []
    reader = LogReader(storage, RUN, 2, lambda h, line: seen.append((h, line)))
    assert asyncio.run(reader.follow(follow=False)).keys() == {0, 1}
    assert [line for h, line in seen if h == 1] == [f"host 1 line {i}" for i in range(25)]


def test_the_stop_and_profile_requests_podctl_writes_are_what_the_agent_reads(tmp_path, monkeypatch):
    bucket = Bucket()
    storage = bucket
    asyncio.run(run_files.save_record(storage, _record()))
    run_dir = tmp_path / "h1"
    run_dir.mkdir()
    control = agent_control.Control({"run_id": RUN, "host": 1, "bucket": "mem"}, bucket, run_dir)
    control.dir.mkdir()

    # A profile: the request in, the trace and the answer out, found by `podctl profile`
    request = asyncio.run(profiles.request_profile(storage, RUN, 3, None))
    control.poll_profile()
    assert json.loads((control.dir / f"profile-{request.id}.json").read_text())["steps"] == 3
    trace = control.dir / f"profile-{request.id}" / "plugins" / "t1v-n-w-1.xplane.pb"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(b"xplane")
    (control.dir / f"profile-{request.id}.done").write_text("{}")
    control.ship_traces()
    acks = asyncio.run(profiles.read_acks(storage, request))
    assert list(acks) == [1]
    assert acks[1]["files"] == [run_layout.profile_trace_object(RUN, request.id, 1, ".xplane.pb")]
    pulled = asyncio.run(profiles.pull_profiles(storage, RUN, tmp_path / "pulled"))
    assert pulled == [tmp_path / "pulled" / "plugins" / "profile" / request.id / "host-0001.xplane.pb"]

    # The owner's stop: the agent stops the script as an SSH stop would
    signals: list[int] = []
    monkeypatch.setattr(agent_control.os, "kill", lambda pid, sig: signals.append(sig))
    control.poll_stop()
    assert not signals and not (run_dir / "stop").exists()  # nothing asked yet
    asyncio.run(run_files.request_stop(storage, [RUN], by="alice", grace_seconds=42.0))
    control.poll_stop()
    assert len(signals) == 1 and (run_dir / "stop").read_text().strip() == "42.0"
    stop = asyncio.run(run_files.read_stop_request(storage, RUN))
    assert stop is not None and stop.by == "alice"


def test_a_log_chunk_in_the_shippers_hands_is_named_as_the_reader_lists_it(tmp_path):
    shipper = LogShipper({"run_id": RUN, "host": 5, "flush_seconds": 3600}, Bucket(), tmp_path)
    shipper.line("x")
    shipper.flush()
    shipper.local.close()
    assert list(shipper.bucket.objects) == [f"podctl/runs/{RUN}/logs/host-0005/000001.log"]
