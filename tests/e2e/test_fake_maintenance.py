"""The fake's maintenance and host health, seen as podctl and a host see them: each
host's metadata server (over SSH, as a script on the host reads it), google-cloud-tpu's
v2 client (health, symptoms) and v2alpha1 client (upcomingMaintenance,
simulateMaintenanceEvent); and the agent's watcher reading a metadata server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import urllib.request

from google.cloud import tpu_v2

from podctl.base.errors import FakeCloudError
from tests.conftest import TIME_SCALE, assert_one_line_error
from podctl.host import agent_maintenance
from tests.e2e.test_fake_hosts import _ssh_port  # noqa: F401 - the autouse fixture: the fake's SSH port
from tests.e2e.test_fake_faults import no_daemon_cli
from tests.e2e.test_fake_hosts import eventually, make_node, new_key, ports, run

# What a script on the host reads: status code and body of one metadata key.
READ = ("python3 -c \"import os, urllib.request as u, urllib.error as e, sys\n"
        "r = u.Request('http://' + os.environ['GCE_METADATA_HOST'] + '/computeMetadata/v1/' + sys.argv[1],"
        " headers={'Metadata-Flavor': 'Google'})\n"
        "try:\n  print(200, u.urlopen(r, timeout=30).read().decode())\n"
        "except e.HTTPError as x:\n  print(x.code)\" ")


@pytest.fixture
def node16(fake, client):
    key, pub = new_key()
    node = make_node(client, "maint", "v5p-16", pub)
    yield node, key
    fake.admin.set_timings(time_scale=TIME_SCALE)  # a test may have slowed the clock
    try:
        client.delete_node(name=node.name).result(timeout=30)
    except Exception:  # noqa: BLE001 - gone already
        pass


def read(node, key, worker: int, path: str) -> tuple[int, str]:
    code, _, body = run(ports(node)[worker], key, READ + path).stdout.strip().partition(" ")
    return int(code), body


def alpha(fake, method: str, path: str, body: dict | None = None) -> dict:
    """One v2alpha1 call on the REST wire (google-cloud-tpu's v2alpha1 client has only gRPC)."""
    request = urllib.request.Request(f"{fake.tpu_api_url}/v2alpha1/{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_maintenance_is_announced_then_takes_the_hosts_down_and_back(fake, client, node16):
    node, key = node16
    assert read(node, key, 1, "instance/upcoming-maintenance")[0] == 404  # none planned
    assert read(node, key, 1, "instance/maintenance-event") == (200, "NONE")
    # Real time from here: simulated seconds pass at 300x under the fixture's scale, and
    # a notice of 60 simulated seconds would be over before an SSH command reads it.
    scale = fake.admin.set_timings(time_scale=1)["time_scale"]
    fake.admin.maintenance("maint", after=3600, workers=[1], window=600)  # an hour away
    code, body = read(node, key, 1, "instance/upcoming-maintenance")
    planned = json.loads(body)
    assert code == 200 and planned["maintenance_status"] == "PENDING" and planned["type"] == "SCHEDULED"
    start = agent_maintenance.parse_time(planned["window_start_time"])
    assert abs(start - (time.time() + 3600 / scale)) < 5
    assert read(node, key, 0, "instance/upcoming-maintenance")[0] == 404  # worker 1 only
    assert read(node, key, 1, "instance/maintenance-event") == (200, "NONE")  # not within 60 s yet
    # The v2 API has no upcomingMaintenance; v2alpha1's Node has it.
    shown = alpha(fake, "GET", node.name)
    assert shown["upcomingMaintenance"]["maintenanceStatus"] == "PENDING"
    assert agent_maintenance.parse_time(shown["upcomingMaintenance"]["windowStartTime"]) == pytest.approx(start, abs=1)
    assert "upcomingMaintenance" not in tpu_v2.Node.to_dict(client.get_node(name=node.name))
    fake.admin.advance(3600 - 30)  # within the 60-s notice
    assert read(node, key, 1, "instance/maintenance-event") == (200, "TERMINATE_ON_HOST_MAINTENANCE")
    fake.admin.advance(60)  # the window: every host down, health says why
    assert client.get_node(name=node.name).health == tpu_v2.Node.Health.UNHEALTHY_MAINTENANCE
    assert client.get_node(name=node.name).state == tpu_v2.Node.State.READY
    assert node.name not in fake.admin.hosts()["nodes"]
    with pytest.raises(OSError):
        run(ports(node)[0], key, "true")
    fake.admin.advance(600)  # over: back, same homes
    assert client.get_node(name=node.name).health == tpu_v2.Node.Health.HEALTHY
    back = client.get_node(name=node.name)
    assert eventually(lambda: fake.admin.hosts()["nodes"].get(node.name, {}).get("alive") == 2, 10)
    assert read(back, key, 1, "instance/upcoming-maintenance")[0] == 404


def test_simulate_maintenance_event_on_v2alpha1(fake, client, node16):
    node, key = node16
    fake.admin.set_timings(time_scale=1)  # the 60-s notice in real time
    op = alpha(fake, "POST", f"{node.name}:simulateMaintenanceEvent", {"workerIds": ["1", "0"]})
    assert op["metadata"]["verb"] == "simulateMaintenanceEvent" and not op.get("done")
    assert read(node, key, 1, "instance/maintenance-event")[1] == "TERMINATE_ON_HOST_MAINTENANCE"
    assert read(node, key, 0, "instance/upcoming-maintenance")[0] == 404  # only the first worker
    fake.admin.set_timings(time_scale=1)
    fake.admin.advance(61)
    assert client.get_operation({"name": op["name"]}).done  # done once the maintenance started
    assert client.get_node(name=node.name).health == tpu_v2.Node.Health.UNHEALTHY_MAINTENANCE


def test_an_unhealthy_node_shows_health_and_symptoms(fake, client, node16):
    node, _ = node16
    fake.admin.unhealthy("maint", health="UNHEALTHY_TENSORFLOW", symptom="HBM_OUT_OF_MEMORY", worker=1)
    seen = client.get_node(name=node.name)
    assert seen.health == tpu_v2.Node.Health.UNHEALTHY_TENSORFLOW
    assert [(s.symptom_type, s.worker_id) for s in seen.symptoms] == [
        (tpu_v2.Symptom.SymptomType.HBM_OUT_OF_MEMORY, "1")]
    fake.admin.unhealthy("maint", health="HEALTHY")
    seen = client.get_node(name=node.name)
    assert seen.health == tpu_v2.Node.Health.HEALTHY and not seen.symptoms


def test_bad_host_fault_requests_are_refused(fake, node16):
    """Every refusal against one v5p-16 (it was one v5p-16 made per refusal)."""
    for call, words in [
        (lambda a: a.maintenance("maint", workers=[2]), "workers 0 to 1, not 2"),
        (lambda a: a.maintenance("maint", after=-1), "after must be 0 or more seconds"),
        (lambda a: a.unhealthy("maint", health="SICK"), "health must be one of"),
        (lambda a: a.unhealthy("maint", symptom="FLU"), "symptom must be one of"),
        (lambda a: a.slow("maint", 0, factor=0.5), "factor must be a number from 1"),
        (lambda a: a.crash_loop("maint", 5), "workers 0 to 1, not 5"),
    ]:
        with pytest.raises(FakeCloudError, match=words):
            call(fake.admin)
    # refused, nothing changed: the node is as it was made
    assert fake.admin.hosts()["nodes"][node16[0].name]["alive"] == 2


def test_slow_and_crash_looping_hosts(fake, node16):
    node, key = node16
    # slow: a busy loop gets a third of the wall clock
    fake.admin.slow("maint", 0, factor=3)
    counted = run(ports(node)[0], key, "python3 -c \"import time\nt=time.time(); c=time.process_time()\n"
                  "time.sleep(0)\nwhile time.time() - t < 3: pass\nprint(time.process_time() - c)\"").stdout
    fake.admin.slow("maint", 0, factor=1)
    assert float(counted) < 2.0  # a full-speed loop would use about 3 s of CPU
    # crash-loop: only what podctl's agent runs is killed; an SSH command is left alone
    fake.admin.crash_loop("maint", 1, after=0.5)
    assert run(ports(node)[1], key, "sleep 1; echo alive").stdout == "alive\n"
    fake.admin.crash_loop("maint", 1, off="yes")


@pytest.mark.parametrize("end", ["input", "sigterm"])
def test_the_throttle_slows_its_processes_and_lets_them_go_when_it_ends(end):
    """fake/vm/throttle.py: a busy process gets about 1/FACTOR of the CPU; however the
    throttle ends (its input closed: the fault cleared; or a signal), nothing is left
    stopped."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    throttle = subprocess.Popen([sys.executable, "-m", "podctl.fake.vm.throttle", "4"],
                                stdin=subprocess.PIPE, text=True)
    try:
        throttle.stdin.write(f"{busy.pid}\n")
        throttle.stdin.flush()
        time.sleep(0.5)
        used = _cpu_seconds(busy.pid)
        time.sleep(2)
        used = _cpu_seconds(busy.pid) - used
        assert used < 1.2  # a full-speed busy loop: about 2 s of CPU in 2 s
        if end == "input":
            throttle.stdin.close()
        else:
            throttle.send_signal(signal.SIGTERM)
        assert throttle.wait(timeout=10) == 0
        time.sleep(0.2)
        assert _state(busy.pid) != "T"  # running, not stopped
    finally:
        busy.kill()
        busy.wait()
        if throttle.poll() is None:
            throttle.kill()
            throttle.wait()


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_the_agents_watcher_sees_maintenance_within_its_lead():
    now = time.time()

    def metadata(upcoming: dict | None, event: str = "NONE"):
        import urllib.error

        def get(path: str, timeout: float = 0) -> str:
            if path.endswith("maintenance-event"):
                return event
            if upcoming is None:
                raise urllib.error.HTTPError(path, 404, "Not Found", {}, None)  # type: ignore[arg-type]
            return json.dumps(upcoming)
        return get

    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".5Z"  # noqa: E731
    assert agent_maintenance.read(metadata(None)) is None
    far = agent_maintenance.read(metadata({"window_start_time": stamp(now + 3600)}))
    assert not agent_maintenance.due(far, 300, now)
    near = agent_maintenance.read(metadata({"windowStartTime": stamp(now + 100)}))  # camelCase too
    assert agent_maintenance.due(near, 300, now) and abs(near["window_start"] - (now + 100.5)) < 1.1
    assert agent_maintenance.due(agent_maintenance.read(metadata(None, "TERMINATE_ON_HOST_MAINTENANCE")),
                                 300, now)


def _status_shows_pending_maintenance_health_and_symptoms(podctl, name: str) -> None:
    """NAME is a fake v5p-16 (workers 0 and 1) nothing runs on any more."""
    said = podctl("fake", "inject", "maintenance", name, "--in", "10h", "--window", "1h",
                  "--workers", "0").stdout
    assert said.startswith(f"{name}: maintenance of worker(s) 0 from ")
    said = podctl("fake", "inject", "unhealthy", name, "--symptom", "MESH_BUILD_FAIL", "--worker", "0").stdout
    assert "health UNHEALTHY_TENSORFLOW; MESH_BUILD_FAIL on worker 0" in said
    shown = podctl("status", name).stdout
    assert "UNHEALTHY_TENSORFLOW" in shown and "MESH_BUILD_FAIL on worker 0" in shown
    assert "PENDING SCHEDULED" in shown
    as_json = podctl.json("status", name)
    assert as_json["maintenance"][name]["maintenanceStatus"] == "PENDING"
    assert as_json["nodes"][0]["symptoms"][0].startswith("MESH_BUILD_FAIL on worker 0")


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory):
    yield from no_daemon_cli(tmp_path_factory)


@pytest.mark.parametrize("args, words", [
    (["maintenance", "st", "--in", "soon"], "--in must be 0 or more seconds"),
    (["maintenance", "st", "--workers", "0,x"], "--workers must be a whole number"),
    (["unhealthy", "st", "--health", "SICK"], "--health must be one of HEALTHY"),
    (["slow", "st", "0", "--factor", "0"], "--factor must be a number from 1"),
    (["crash-loop", "st", "-1"], "WORKER must be a whole number"),
])
def test_host_fault_bad_input_is_one_line_before_the_daemon_is_asked(refusing, args, words):
    assert_one_line_error(refusing("fake", "inject", *args, check=False), 2, words)



@pytest.mark.timeout(900)  # three scenarios, each making the slice again once
def test_a_crash_looping_host_is_named_and_recovery_leaves_its_hardware(tmp_path):
    """Through podctl run: the script podctl's agent starts on worker 1 crashes (SIGSEGV,
    exit 139) a second after each start. Without --recover the run fails naming host
    0001. With --recover the first crash is relaunched in place; the second on the same
    worker is a bad host, so the slice is made again, and on the new hardware the run
    succeeds; the record names the bad worker.

    Then, on that slice and daemon (one made, not three): a node turned unhealthy, its run
    recovered on new hardware; and `status` showing pending maintenance, health and symptoms."""
    from pathlib import Path

    from tests.conftest import Podctl, slice_on_daemon

    script = Path(__file__).parents[1] / "scripts" / "sleep_then_exit.py"
    with slice_on_daemon(Podctl(tmp_path), "v5p-16", "loop") as podctl:
        said = podctl("fake", "inject", "crash-loop", "loop", "1", "--after", "1").stdout
        assert "SIGSEGV 1 s after each start" in said
        proc = podctl("run", "loop", "--json", str(script), "6", check=False)
        assert proc.returncode == 139, proc.stderr[-2000:]
        result = json.loads(proc.stdout)
        assert result["failed_host"] == 1 and result["hosts"]["1"] == 139
        before = podctl.json("status", "loop")["created"]
        proc = podctl("run", "loop", "--recover", "2", "--json", str(script), "6", check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout)
        first, second, third = result["attempts"]
        assert first["failed_worker"] == 1 and first["hardware"] == "crashed (SIGSEGV)"
        assert second["failed_worker"] == 1 and third["exit_code"] == 0
        assert "slice loop is healthy; relaunching on it" in proc.stderr  # the first time
        assert ("worker 1 failed twice (crashed (SIGSEGV); crashed (SIGSEGV)): a bad host; "
                "making loop again on other hardware") in proc.stderr
        assert podctl.json("status", "loop")["created"] > before  # new hardware
        record = next(r for r in podctl.json("runs") if r["run_id"] == result["run_id"])
        assert record["extra"]["bad_hosts"] == [1]
        _a_node_turned_unhealthy_is_shown_and_its_run_recovered_on_new_hardware(podctl, script, "loop")
        _status_shows_pending_maintenance_health_and_symptoms(podctl, "loop")


def _a_node_turned_unhealthy_is_shown_and_its_run_recovered_on_new_hardware(podctl, script, sick: str) -> None:
    """A node that reports UNHEALTHY_TENSORFLOW with a symptom, and whose worker's script
    then dies (SIGKILL): `status` shows the health and symptom, and `--recover` makes the
    slice again instead of relaunching on the sick node; the run then succeeds."""
    before = podctl.json("status", sick)["created"]
    proc = subprocess.Popen([sys.executable, "-m", "podctl", "run", sick, "--recover", "1",
                             "--json", str(script), "8"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=podctl.env, cwd=podctl.tmp)
    try:
        podctl("fake", "inject", "unhealthy", sick, "--health", "UNHEALTHY_TENSORFLOW",
               "--symptom", "HBM_OUT_OF_MEMORY", "--worker", "1")
        shown = podctl.json("status", sick)
        assert shown["health"] == "UNHEALTHY_TENSORFLOW"
        assert any("HBM_OUT_OF_MEMORY" in s for n in shown["nodes"] for s in n["symptoms"])
        # worker 1's script (not its agent) dies, as an OOM kill does
        podctl("fake", "inject", "crash-loop", sick, "1", "--after", "1", "--signal", "KILL")
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert f"node {sick} is UNHEALTHY_TENSORFLOW" in err and f"making {sick} again" in err, err
    assert json.loads(out)["recoveries"] == 1
    after = podctl.json("status", sick)
    assert after["created"] > before and after["health"] in (None, "HEALTHY")
