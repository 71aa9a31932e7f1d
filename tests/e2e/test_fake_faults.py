"""The fake cloud's fault switches, each flipped through FakeAdmin (or `podctl fake
inject` on the daemon) and seen through the clients podctl uses: google-cloud-tpu
for node states, asyncssh for the hosts, podctl.cloud.storage (google-cloud-storage) for
GCS. What a process sees (a SIGTERM, a SIGKILL) it reports itself, in a file in its
host's home or an object in GCS.

Covered elsewhere: fail_calls, capacity and quota through TpuApi (test_api.py,
test_provision.py), drop_host and the plain preempt/delete kill (test_fake_hosts.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import tpu_v2

from podctl.base.errors import FakeCloudError
from podctl.base.retry import RetryPolicy
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage, StorageUnavailable
from tests.conftest import PARENT, PROJECT, ZONE
from tests.conftest import Podctl, assert_one_line_error
from tests.e2e.test_fake_hosts import _ssh_port  # noqa: F401 - the autouse fixture: the fake's SSH port
from tests.e2e.test_fake_hosts import alive, connect, eventually, make_node, new_key, ports, run

AGENT_DIR = Path(__file__).resolve().parents[2] / "podctl" / "host"

# Saves "a checkpoint" to GCS and leaves a marker when the preemption notice comes.
# A bare host has no google-cloud-storage: podctl's agent's own standard-library client.
ON_TERM = """
import os, signal, sys, time
sys.path.insert(0, AGENT_DIR)
import agent_gcs
bucket = agent_gcs.Bucket("podctl-fake")
worker = agent_gcs.metadata_get("instance/attributes/agent-worker-number")
def on_term(*_):
    bucket.upload("notice/host-%s" % worker, b"saved")
    open("got-term", "w").write("yes")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open("ready", "w").write("yes")
while True:
    time.sleep(0.1)
"""
# Ignores SIGTERM; says so (a file named by its pid, a line) once it does.
IGNORE_TERM = ('import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
               'open("ignoring-%d" % os.getpid(), "w").close(); print("ignoring", flush=True); '
               'time.sleep(300)')


def detach(command: str) -> str:
    return f"setsid nohup {command} >/dev/null 2>&1 </dev/null & echo $!"


@pytest.fixture
def node16(client):
    """A READY v5p-16 (2 hosts) with one fresh key; deleted at the end."""
    key, pub = new_key()
    node = make_node(client, "faults", "v5p-16", pub)
    yield node, key
    try:
        client.delete_node(name=node.name).result(timeout=30)
    except Exception:  # noqa: BLE001 - the test deleted it already
        pass


def home(fake, worker: int) -> Path:
    return Path(fake.describe()["hosts_root"]) / PROJECT / ZONE / "faults" / f"host-{worker:04d}" / "home" / "podctl"


def start_on_term(fake, node, key) -> None:
    """ON_TERM running detached on every host, its handler installed."""
    for worker, port in enumerate(ports(node)):
        run(port, key, "cat > on_term.py", input=ON_TERM.replace("AGENT_DIR", repr(str(AGENT_DIR))))
        run(port, key, detach("python3 on_term.py"))
    assert eventually(lambda: all((home(fake, w) / "ready").exists() for w in (0, 1)), 30)


def start_stubborn(fake, port: int, key, worker: int) -> int:
    pid = int(run(port, key, detach(f"python3 -c '{IGNORE_TERM}'")).stdout)
    assert eventually(lambda: (home(fake, worker) / f"ignoring-{pid}").exists(), 30)
    return pid


def storage(fake, attempts: int = 2) -> Storage:
    return Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url,
                           retry=RetryPolicy(attempts=attempts, initial=0.05, maximum=0.2,
                                             deadline=30, jitter=0))


def test_preemption_gives_notice_and_gcs_then_deletion_kills_at_once(client, fake, node16):
    node, key = node16
    start_on_term(fake, node, key)
    stubborn = start_stubborn(fake, ports(node)[1], key, 1)
    fake.admin.preempt("faults", grace=120)  # longer than this test: only deletion ends it
    assert client.get_node(name=node.name).state == tpu_v2.Node.State.PREEMPTED  # at once
    for port in ports(node):  # the hosts take no more SSH
        with pytest.raises(OSError):
            run(port, key, "true")
    # Each host's script got SIGTERM and, GCS still up, saved its "checkpoint".
    assert eventually(lambda: all((home(fake, w) / "got-term").exists() for w in (0, 1)), 30)
    gcs = storage(fake)
    assert asyncio.run(gcs.download_bytes("notice/host-1")) == b"saved"
    assert alive(stubborn)  # it ignores SIGTERM and its grace is not over
    assert fake.admin.hosts()["in_grace"] == [node.name]
    client.delete_node(name=node.name)  # deletion does not wait for the grace
    assert eventually(lambda: not alive(stubborn), 10)
    assert fake.admin.hosts()["in_grace"] == []


def test_after_the_grace_whatever_ignored_sigterm_is_killed(client, fake, node16):
    node, key = node16
    fake.admin.set_timings(preempt_grace=0.5)
    stubborn = [start_stubborn(fake, p, key, w) for w, p in enumerate(ports(node))]

    async def go():
        conn = await connect(ports(node)[0], key)
        busy = await conn.create_process(f"echo $$; exec python3 -c '{IGNORE_TERM}'")
        pid = int(await busy.stdout.readline())
        assert await busy.stdout.readline() == "ignoring\n"
        await asyncio.to_thread(fake.admin.preempt, "faults")
        await asyncio.wait_for(conn.wait_closed(), 5)  # the SSH session is cut at once
        return pid
    stubborn.append(asyncio.run(go()))
    assert eventually(lambda: not any(alive(pid) for pid in stubborn), 15)
    assert client.get_node(name=node.name).state == tpu_v2.Node.State.PREEMPTED  # still there
    assert fake.admin.hosts()["in_grace"] == []


def test_a_preempted_runs_agent_ships_its_status(client, fake, api, isolated, tmp_path):
    """The real job path: the agent passes the notice to the script and, in the grace,
    writes the host's status to GCS (a failure: podctl did not stop it)."""
    from podctl.cloud import terminate
    from podctl.cloud.sshkey import ensure_ssh_key
    from podctl.cloud.types import SliceSpec
    from podctl.cloud.up import UpRequest, up
    from tests.conftest import FAST
    from tests.e2e.test_jobs import make_job

    key = ensure_ssh_key(isolated / "config")
    info = asyncio.run(up(api, UpRequest(parent=PARENT, name="prem8", spec=SliceSpec.build("v5p-8"),
                                         ssh_keys=key.metadata_entry, owner="t", policy=FAST))).info
    try:
        job, lines = make_job(fake, info, key, tmp_path, "sleep_then_exit.py", "300")

        async def go():
            await job.start(await job.prepare())
            await job.close()
        asyncio.run(go())
        gcs = storage(fake)
        beat = f"podctl/runs/{job.run_id}/heartbeat/host-0000.json"

        def running() -> bool:
            if not asyncio.run(gcs.exists(beat)):
                return False
            return json.loads(asyncio.run(gcs.download_bytes(beat)))["phase"] == "running"
        assert eventually(running, 30)
        fake.admin.preempt("prem8")
        status = f"podctl/runs/{job.run_id}/status/host-0000.json"
        assert eventually(lambda: asyncio.run(gcs.exists(status)), 30)
        written = json.loads(asyncio.run(gcs.download_bytes(status)))
        assert written["exit_code"] == 128 + 15 and not written["stopped"]
    finally:
        asyncio.run(terminate.terminate(api, PARENT, "prem8", policy=FAST))


@pytest.mark.parametrize("sig", ["TERM", "KILL"])
def test_kill_processes_leaves_the_host_up(fake, node16, sig):
    node, key = node16
    if sig == "TERM":
        start_on_term(fake, node, key)
    victims = [int(run(p, key, "sleep 300 >/dev/null 2>&1 </dev/null & echo $!").stdout) for p in ports(node)]

    async def go():
        async with connect(ports(node)[1], key) as conn:
            busy = await conn.create_process("echo go; exec sleep 300")
            assert await busy.stdout.readline() == "go\n"  # running: the kill finds it
            assert (await asyncio.to_thread(fake.admin.kill_host, "faults", 1, sig))["signalled"] >= 2
            done = await busy.wait(timeout=10)  # the session ends, its connection does not
            assert done.exit_signal[0] == sig
            return (await conn.run("echo still here")).stdout
    assert asyncio.run(go()) == "still here\n"
    assert eventually(lambda: not alive(victims[1])) and alive(victims[0])  # only worker 1
    if sig == "TERM":
        assert eventually(lambda: (home(fake, 1) / "got-term").exists(), 30)
        assert not (home(fake, 0) / "got-term").exists()
    assert run(ports(node)[1], key, "echo new").stdout == "new\n"


def test_cut_ssh_drops_a_running_session_and_new_ones_work(fake, node16):
    node, key = node16

    async def go():
        conn = await connect(ports(node)[0], key)
        other = await connect(ports(node)[1], key)
        busy = await conn.create_process("echo started; exec sleep 300")
        assert await busy.stdout.readline() == "started\n"
        assert (await asyncio.to_thread(fake.admin.cut_ssh, "faults", 0))["connections_cut"] == 1
        await asyncio.wait_for(conn.wait_closed(), 5)
        assert busy.exit_status is None  # no exit status: the connection dropped
        assert (await other.run("echo other")).stdout == "other\n"  # worker 1 untouched
        other.close()
        async with connect(ports(node)[0], key) as again:  # the listener stayed
            return (await again.run("echo back")).stdout
    assert asyncio.run(go()) == "back\n"


def test_gcs_outage_is_503_until_it_passes(fake):
    gcs = storage(fake)
    asyncio.run(gcs.upload_bytes("outage/before", b"x"))
    fake.admin.gcs_outage(600)
    for call in (gcs.upload_bytes("outage/during", b"y"), gcs.download_bytes("outage/before"),
                 gcs.list("outage/")):
        with pytest.raises(StorageUnavailable):
            asyncio.run(call)
    assert gcs.calls["upload"] == 1 + 2  # the one before; then tried twice, as a 503 deserves
    fake.admin.gcs_outage(0)
    assert asyncio.run(gcs.download_bytes("outage/before")) == b"x"
    # A short outage passes by itself; a patient client rides it out.
    fake.admin.gcs_outage(1)
    patient = storage(fake, attempts=30)
    asyncio.run(patient.upload_bytes("outage/after", b"z"))
    assert asyncio.run(patient.download_bytes("outage/after")) == b"z"
    assert patient.calls["upload"] > 1


BAD_REQUESTS = [
    (lambda a: a.preempt("nope"), "no node or queued resource named 'nope'"),
    (lambda a: a.preempt("faults", grace=-1), "grace must be 0 or more seconds"),
    (lambda a: a.preempt("faults", after=-5), "after must be"),
    (lambda a: a.kill_host("faults", 2), "workers 0 to 1, not 2"),
    (lambda a: a.kill_host("faults", -1), "worker must be a whole number"),
    (lambda a: a.kill_host("faults", 0, "HUP"), "signal must be TERM or KILL"),
    (lambda a: a.cut_ssh("nope", 0), "no node or queued resource"),
    (lambda a: a.drop_host("faults", 9), "workers 0 to 1"),
    (lambda a: a.gcs_outage(-1), "seconds must be"),
    (lambda a: a.inject("explode", "faults"), "no fault 'explode'"),
    (lambda a: a.kill_host("faults", 0, bogus=1), "kill-host takes no 'bogus'"),
    (lambda a: a.set_timings(preempt_grace=-1), "preempt_grace must be"),
    (lambda a: a.capacity(5, zone="mars-central1-a"), "no zone 'mars-central1-a'"),
]


def test_bad_fault_requests_are_refused(fake, node16):
    for call, words in BAD_REQUESTS:
        with pytest.raises(FakeCloudError, match=words):
            call(fake.admin)
    assert fake.admin.hosts()["nodes"][node16[0].name]["alive"] == 2  # nothing was done


def test_a_preempted_nodes_hosts_are_out_of_reach_and_a_reset_ends_the_grace(fake, node16):
    node, key = node16
    stubborn = start_stubborn(fake, ports(node)[0], key, 0)
    fake.admin.preempt("faults", grace=600)
    for fault in (fake.admin.cut_ssh, fake.admin.kill_host, fake.admin.drop_host):
        with pytest.raises(FakeCloudError, match="no live hosts"):
            fault("faults", 0)
    assert alive(stubborn)
    fake.admin.reset()  # as the `fake` fixture does between tests: nothing outlives it
    assert eventually(lambda: not alive(stubborn), 10)


# ---- podctl fake inject, on the daemon ----------------------------------------------------


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    yield from no_daemon_cli(tmp_path_factory)


def no_daemon_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One podctl home for a module's refusals, checked once at its end that none of them
    started the fake's daemon (a `fake status` after each case cost a podctl process each)."""
    from tests.conftest import _share_env_signing_key

    tmp = tmp_path_factory.mktemp("refusals")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    cli = Podctl(tmp)
    yield cli
    assert not json.loads(cli("fake", "status", "--json", check=False).stdout or "{}").get("running")


def test_inject_needs_a_running_fake(refusing):
    proc = refusing("fake", "inject", "cut-ssh", "x", "0", check=False)
    assert_one_line_error(proc, 1, "the fake cloud is not running; `podctl fake start`")


def test_inject_through_the_daemon(podctl):
    podctl("--backend", "fake", "up", "--slice", "v5p-8", "--name", "inj")
    assert "0 SSH connection(s) cut" in podctl("fake", "inject", "cut-ssh", "inj", "0").stdout
    assert "SIGTERM" in podctl("fake", "inject", "kill-host", "inj", "0", "--signal", "TERM").stdout
    assert "for 2 s" in podctl("fake", "inject", "gcs-outage", "2").stdout
    assert "outage ended" in podctl("fake", "inject", "gcs-outage", "0").stdout
    assert "stocked out" in podctl("fake", "inject", "stockout").stdout
    proc = podctl("--backend", "fake", "up", "--slice", "v5p-8", "--name", "more", check=False)
    assert proc.returncode != 0 and "capacity" in proc.stderr
    assert "8960 chips" in podctl("fake", "inject", "capacity", "unlimited").stdout
    podctl("fake", "inject", "fail-calls", "1", "--code", "503", "--call", "nodes.get")
    assert "READY" in podctl("--backend", "fake", "status", "inj").stdout  # retried through
    for args, words in [  # what only the daemon can check: one line, exit 1
        (["kill-host", "nope", "0"], "no node or queued resource named 'nope'"),
        (["kill-host", "inj", "1"], "workers 0 to 0, not 1"),
        (["fail-calls", "2", "--call", "nodes.explode"], "no call named 'nodes.explode'"),
        (["capacity", "8", "--zone", "mars-central1-a"], "no zone 'mars-central1-a'"),
    ]:
        assert_one_line_error(podctl("fake", "inject", *args, check=False), 1, words)
    started = podctl("--backend", "fake", "exec", "inj", "--", "bash", "-c",
                     detach(f"python3 -c '{IGNORE_TERM}'")).stdout
    stubborn = int(started.split()[-1])
    assert eventually(lambda: alive(stubborn) and any(
        (podctl.tmp / "state" / "fake" / "hosts").glob(f"*/*/inj/host-0000/home/podctl/ignoring-{stubborn}")), 30)
    assert "preempted now" in podctl("fake", "inject", "preempt", "inj", "--grace", "600").stdout
    assert "PREEMPTED" in podctl("--backend", "fake", "status", "inj").stdout
    assert alive(stubborn)  # in its grace
    podctl("fake", "stop")  # no grace outlives the daemon
    assert eventually(lambda: not alive(stubborn), 10)
    podctl("--backend", "fake", "down", "inj", "--yes")


def test_a_member_without_an_email_and_an_unknown_project_are_refused_as_google_would(podctl):
    podctl("fake", "start")
    proc = podctl("fake", "grant", "user:bob", "roles/storage.objectAdmin", check=False)
    assert_one_line_error(proc, 1, "Invalid member: 'user:bob'", "user:EMAIL", "user:bob@example.com")
    proc = podctl("fake", "inject", "os-login", "--project", "unknown-project", check=False)
    assert_one_line_error(proc, 1, "'compute.projects.setCommonInstanceMetadata' denied",
                          "projects/unknown-project", "the fake cloud's projects: bench, fake-project")
    # what Google takes is still taken
    assert "granted" in podctl("fake", "grant", "user:bob@example.com", "roles/storage.objectAdmin").stdout
    assert "project test-project: OS Login on" in podctl(
        "fake", "inject", "os-login", "--project", "test-project").stdout


@pytest.mark.parametrize("args, words", [
    (["kill-host", "inj", "0", "--signal", "HUP"], "TERM or KILL"),
    (["cut-ssh", "inj", "-1"], "WORKER must be a whole number"),
    (["drop-host", "inj", "x"], "WORKER must be a whole number"),
    (["gcs-outage", "-3"], "0 or more seconds"),
    (["gcs-outage", "1e308"], "at most 30 days"),
    (["preempt", "inj", "--grace", "soon"], "--grace must be 0 or more seconds"),
    (["preempt", "inj", "--after", "-5"], "0 or more seconds"),
    (["fail-calls", "2", "--code", "500"], "--code must be one of"),
    (["fail-calls", "-2"], "COUNT must be a whole number"),
    (["fail-calls", "9" * 31], "COUNT must be a whole number from 0 to 1,000,000,000"),
    (["fail-calls", "\u00b2"], "COUNT must be a whole number"),
    (["capacity", "lots"], "CHIPS"),
    (["os-login", "--project", ""], "--project must be a non-empty name"),
])
def test_inject_bad_input_is_one_line_before_the_daemon_is_asked(refusing, args, words):
    assert_one_line_error(refusing("fake", "inject", *args, check=False), 2, words)


def test_one_table_drives_the_admin_api_its_client_and_the_cli(fake):
    """Every fault of podctl/fake/admin/faults.py is a route, a FakeAdmin method and a subcommand,
    all by one name; nothing else lists them."""
    from podctl.cli.fake_inject import inject
    from podctl.fake.admin import faults
    from podctl.fake.admin.admin_client import FakeAdmin

    names = [f.name for f in faults.FAULTS]
    assert [f["name"] for f in fake.admin.faults()] == names
    assert sorted(inject.commands) == sorted(names)
    for fault in faults.FAULTS:
        assert callable(getattr(FakeAdmin, fault.method))
        assert [p.name for p in inject.commands[fault.name].params] == [a.name for a in fault.args]


@pytest.mark.parametrize("value", ["1e308", 1e308, "2592001", "31d", "721h"])
def test_a_fault_duration_past_30_days_is_refused(value):
    from podctl.fake.admin.fault_args import seconds

    with pytest.raises(ValueError, match="at most 30 days"):
        seconds(value, "SECONDS")
    assert seconds("30d", "SECONDS") == 30 * 86400.0
