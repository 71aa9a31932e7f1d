"""The host's watcher (host_watch.py): what it reads of the pointer, the once-only marker,
the chips' owner, and a run started through it on a fake host, end to end: launch.json
and the agent's zip from GCS (hash-checked), the config 0600, the agent detached, and
that agent taking stop.json before its script, stacks.json and halt.json while it runs.

The watcher's loop waits on the metadata directory (`wait_for_change`); the fake hosts
learn directory waits in another change, so the end-to-end tests here call the step the
loop takes for each answer (`on_attributes`) on the host, over SSH, with a plain read."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import asyncssh
import pytest
from google.cloud import storage, tpu_v2
from google.protobuf import field_mask_pb2

from podctl.host import host_config, host_pin, host_watch, run_layout
from podctl.jobs import launch, owner, pointer_sign
from podctl.jobs.launch import JobSpec
from podctl.jobs.ssh import Target
from podctl.base.settings import FAKE_BUCKET
from tests.conftest import PARENT, user_credentials

SHA = "ab" * 32


def _pointer(**over) -> dict:
    p = {"run": "r-1", "bucket": "b", "launch": run_layout.launch_object("r-1"), "sha256": SHA,
         "agent_sha": SHA, "agent_object": run_layout.agent_object(SHA), "first_host": 2}
    p.update(over)
    return p


@pytest.fixture(scope="module")
def signer(tmp_path_factory) -> pointer_sign.Signer:
    """A client's signing key (made as podctl makes its own, in a config directory)."""
    return pointer_sign.Signer.load(tmp_path_factory.mktemp("config"))


# ---- pieces, without a host ------------------------------------------------------------

def test_the_watcher_uses_run_layouts_and_owners_names():
    assert (host_watch.RUN_POINTER_KEY, host_watch.BOOT_KEY, host_watch.GUEST_NAMESPACE) == (
        run_layout.RUN_POINTER_KEY, run_layout.BOOT_KEY, run_layout.GUEST_NAMESPACE)
    assert (host_watch.HOST_RUNS_DIR, host_watch.CONFIG_FILE, host_watch.STATUS_FILE) == (
        run_layout.HOST_RUNS_DIR, run_layout.CONFIG_FILE, run_layout.STATUS_FILE)
    assert (host_watch.CHIPS_DIR, host_watch.CHIPS_STOPPING) == (run_layout.CHIPS_DIR, run_layout.CHIPS_STOPPING)
    assert host_watch.LET_GO_SECONDS == owner.LET_GO_SECONDS
    from podctl.base import vocabulary
    assert host_watch.BEAT_SECONDS == vocabulary.WATCH_BEAT_SECONDS
    from podctl.jobs import identity
    assert host_watch.WRITE_SCOPES == identity.WRITE_SCOPES


def test_a_denial_word_fits_a_guest_attribute_and_reads_back_as_identitys_access():
    """What host 0 says in podctl/access reads back (boot_channel.denied_access) as what
    identity.py's check over SSH finds, the write scope kept first when the list is cut."""
    from podctl.jobs import identity
    from podctl.jobs.channels.boot import denied_access

    scopes = [identity.SCOPE_PREFIX + s for s in
              ("logging.write", "monitoring.write", "servicecontrol", "service.management.readonly",
               "trace.append", "devstorage.read_only", "userinfo.email", "cloud-platform")]
    email = "123456789012-compute@developer.gserviceaccount.com"
    word = host_watch.denial_word("r-1", ("write", 403, "storage.objects.create"), email, scopes)
    assert len(word) <= host_watch.MAX_GUEST_VALUE and word.startswith("r-1 write 403 ")
    access = denied_access(word[len("r-1 "):])
    assert (access.email, access.refused, access.status, access.permission) == (
        email, "write", 403, "storage.objects.create")
    assert access.can_write  # cloud-platform came first, so the cut kept it
    line = identity.refusal(access, bucket="b", slice_name="s", slice_type="v5p-8")
    assert line is not None and "roles/storage.objectAdmin" in line and email in line
    assert 'Path.home() / ".podctl" / "agents"' in launch.BOOT and host_watch.AGENTS_DIR == ".podctl/agents"


def test_a_roles_word_reads_back_with_its_time_and_as_identitys_access():
    """podctl/roles (each node's worker 0's standing check) -> boot.parse_roles: the time it
    was asked, and a denial read as podctl/access's; ok and unknown are no denial."""
    from podctl.jobs.channels.boot import denied_access, parse_roles

    email, scopes = "sa@p.iam.gserviceaccount.com", ["https://www.googleapis.com/auth/cloud-platform"]
    assert parse_roles(host_watch.roles_word("ok", 1700000000.7, "", [])) == (1700000000, None)
    assert parse_roles(host_watch.roles_word("unknown", 1700000000.0, "", [])) == (1700000000, None)
    word = host_watch.roles_word(("bucket", 403, "storage.buckets.get"), 1700000001.2, email, scopes)
    assert len(word) <= host_watch.MAX_GUEST_VALUE
    checked, denial = parse_roles(word)
    assert checked == 1700000001 and denial is not None
    access = denied_access(denial)
    assert (access.email, access.refused, access.status, access.permission) == (
        email, "bucket", 403, "storage.buckets.get")
    assert parse_roles("") is None and parse_roles("soon ok") is None


def test_the_watcher_imports_little_at_idle():
    code = ("import sys; before = set(sys.modules); sys.path.insert(0, sys.argv[1]); import host_watch; "
            "print(sorted(m for m in set(sys.modules) - before if not m.startswith('_')))")
    done = subprocess.run([sys.executable, "-S", "-c", code, str(Path(host_watch.__file__).parent)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = set(eval(done.stdout))
    assert "host_watch" in loaded
    # (http.client brings ssl and urllib.parse; the rest waits for a pointer)
    assert not loaded & {"hashlib", "zipfile", "subprocess", "urllib.request", "threading"}


def test_a_pointer_is_read_checked_and_placed(signer):
    p = _pointer()
    text = signer.pointer(p)
    parsed = host_watch.parse_pointer(text)
    assert parsed[host_watch.SIGNED] == (json.loads(text)["body"], json.loads(text)["sig"])
    assert {k: v for k, v in parsed.items() if k != host_watch.SIGNED} == p
    assert host_watch.parse_pointer(None) is None and host_watch.parse_pointer(" ") is None
    assert host_watch.host_index(p, {"agent-worker-number": "3"}) == 5
    unsigned = json.dumps({"v": 1, **p})  # the old, unsigned form: not read at all
    for bad in ("{", "[]", unsigned, json.dumps({"v": 2, "body": json.dumps(p)}),
                json.dumps({"v": 2, "body": "[]", "sig": ""}), signer.pointer(_pointer(run="../x")),
                signer.pointer(_pointer(run=".hidden")), signer.pointer(_pointer(run="a/b")),
                signer.pointer(_pointer(sha256="AB" * 32)), signer.pointer(_pointer(agent_sha="ab")),
                signer.pointer(_pointer(first_host=True)), signer.pointer(_pointer(first_host=-1)),
                signer.pointer(_pointer(bucket=""))):
        with pytest.raises(ValueError):
            host_watch.parse_pointer(bad)
    assert host_watch.on_attributes({"podctl-run": "not json"}) is None  # said, and ignored
    assert host_watch.on_attributes({}) is None


def test_a_run_is_claimed_once_and_never_after_its_end(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert host_watch.claim("r-1") is True
    d = tmp_path / run_layout.HOST_RUNS_DIR / "r-1"
    assert (d / "started").is_dir() and d.stat().st_mode & 0o777 == 0o700
    assert host_watch.claim("r-1") is False  # a second pointer, a rerun, a reboot
    (tmp_path / run_layout.HOST_RUNS_DIR / "r-2").mkdir()
    (tmp_path / run_layout.HOST_RUNS_DIR / "r-2" / run_layout.STATUS_FILE).write_text("{}")
    assert host_watch.claim("r-2") is False  # ended here (a marker lost with a disk is not enough)


def test_the_chips_rule_is_host_wide_and_the_watchers_read_it_as_podctl_over_ssh_does(tmp_path, monkeypatch):
    """A run's agent says in the host's /tmp that it holds the chips (agent_chips.py), so a
    run of root's (the watchers) and one of the login user's (SSH) see each other; the
    watcher's reader and owner.py's shell line read it alike."""
    from podctl.host import agent_chips

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))  # not where the rule lives
    other = tmp_path / "root" / run_layout.HOST_RUNS_DIR / "other"  # another user's home
    other.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(other)])
    # Popen may return (vfork) before the kernel shows the new argv in /proc/PID/cmdline
    deadline = time.monotonic() + 10
    while str(other).encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the stand-in agent never showed its command line"
        time.sleep(0.01)

    def over_ssh(run_id: str) -> dict[str, list[str]]:
        out = subprocess.run(["bash", "-c", owner.others_command(run_id)], capture_output=True, text=True,
                             check=True).stdout
        found: dict[str, list[str]] = {"live": [], "stopping": []}
        for line in out.splitlines():
            state, _, run = line.partition(" ")
            found[state].append(run)
        return found

    def both(run_id: str) -> dict[str, list[str]]:
        seen = host_watch.others(run_id)
        assert over_ssh(run_id) == seen
        return seen

    try:
        assert both("mine") == {"live": [], "stopping": []}  # nothing said yet
        agent_chips.claim("other", proc.pid)
        chips = tmp_path / "tmp" / run_layout.CHIPS_DIR
        assert chips.stat().st_mode & 0o7777 == 0o1777  # every user's, each file its owner's
        assert (chips / "other").stat().st_mode & 0o777 == 0o644 and (chips / "other").read_text() == \
            f"{proc.pid} live\n"
        assert both("mine") == {"live": ["other"], "stopping": []}
        assert both("other") == {"live": [], "stopping": []}  # itself
        assert host_watch.wait_for_the_chips("mine", let_go_seconds=5) == "other"  # at once
        agent_chips.claim("other", proc.pid, stopping=True)
        started = time.monotonic()
        assert host_watch.wait_for_the_chips("mine", let_go_seconds=0.3, poll=0.05) == "other"
        assert time.monotonic() - started >= 0.3
        agent_chips.claim("third", proc.pid)  # not its agent (its command line): ignored
        assert both("mine") == {"live": [], "stopping": ["other"]}
    finally:
        proc.kill()
        proc.wait()
    assert host_watch.wait_for_the_chips("mine", let_go_seconds=5) is None  # gone
    (chips / "other").write_text("12x live\n")
    assert both("mine") == {"live": [], "stopping": []}
    agent_chips.release("other")
    agent_chips.release("third")
    assert sorted(p.name for p in chips.iterdir()) == []


def test_the_libtpu_lock_file_is_left_open_to_the_next_owner_whoever_it_is(tmp_path, monkeypatch):
    from podctl.host import agent_chips

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    lock = tmp_path / run_layout.LIBTPU_LOCKFILE
    old = os.umask(0o077)  # the agent's
    try:
        assert agent_chips.open_the_lock_to_all() is None
    finally:
        os.umask(old)
    assert lock.stat().st_mode & 0o777 == 0o666
    lock.chmod(0o644)  # as libtpu leaves it (root's, say)
    assert agent_chips.open_the_lock_to_all() is None and lock.stat().st_mode & 0o777 == 0o666


# ---- on a fake host ------------------------------------------------------------------

@pytest.fixture
def host(fake, api, signer):
    """A READY v5p-8 (one host) pinned to SIGNER's key, with the watcher's files (as the
    startup script writes them) in its user's home."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    pub = key.export_public_key().decode().strip()
    pin = pointer_sign.pin_metadata(signer, FAKE_BUCKET)
    node = tpu_v2.Node(accelerator_type="v5p-8", runtime_version="v2-alpha-tpuv5",
                       metadata={"ssh-keys": f"podctl:{pub} podctl", **pin})
    created = api.client.create_node(parent=PARENT, node_id="watch8", node=node).result(timeout=30)
    gcs = storage.Client(project="p", credentials=user_credentials(),
                         client_options={"api_endpoint": fake.gcs_url}).bucket(FAKE_BUCKET)
    h = Host(api.client, created, key, fake.hosts.ssh_port, gcs, signer)
    try:
        h.home = Path(h.sh("echo $HOME").strip())
        watch = h.home / run_layout.WATCH_DIR
        watch.mkdir(parents=True)
        for module in (host_watch, host_pin):
            (watch / Path(module.__file__).name).write_text(Path(module.__file__).read_text())
        yield h
    finally:
        api.client.delete_node(name=created.name).result(timeout=30)  # its processes die with it


class Host:
    def __init__(self, client, node, key, port, gcs, signer):
        self.client, self.node, self.key, self.port, self.gcs = client, node, key, port, gcs
        self.signer = signer
        self.home = Path()
        data, self.agent_sha = launch.agent_source()
        gcs.blob(run_layout.agent_object(self.agent_sha)).upload_from_string(data)

    def sh(self, command: str) -> str:
        async def go():
            ep = self.node.network_endpoints[0]
            async with asyncssh.connect(ep.ip_address, self.port, username="podctl", client_keys=[self.key],
                                        known_hosts=None, agent_path=None) as conn:
                return await conn.run(command, check=False)
        done = asyncio.run(go())
        assert done.exit_status == 0, f"{command[:60]}: {done.stderr}"
        return done.stdout

    def publish(self, run_id: str, command: tuple[str, ...], *, point: bool = True,
                **pointer) -> tuple[dict, dict]:
        """launch.json in GCS and (POINT) the pointer in the node's metadata -> (launch, pointer)."""
        ip = self.node.network_endpoints[0].ip_address
        spec = JobSpec(run_id=run_id, bucket=FAKE_BUCKET, project="test-project", command=command,
                       env={"SECRET": "s3cret"}, flush_seconds=0.2)
        cfg = launch.launch_config(spec, [Target(0, 0, 0, ip, 22, ip)], self.agent_sha)
        data = json.dumps(cfg).encode()
        self.gcs.blob(run_layout.launch_object(run_id)).upload_from_string(data)
        pin = pointer_sign.pin_of(dict(self.node.metadata))
        p = {"run": run_id, "bucket": FAKE_BUCKET, "launch": run_layout.launch_object(run_id),
             "sha256": hashlib.sha256(data).hexdigest(), "agent_sha": self.agent_sha,
             "agent_object": run_layout.agent_object(self.agent_sha), "first_host": 0,
             "node": "watch8", "pin": pin["id"], "expires": int(time.time()) + 600, **pointer}
        if point:
            self.point(self.signer.pointer(p))
        return cfg, p

    def point(self, pointer: str) -> None:
        """POINTER (the `podctl-run` value) into the node's metadata, as one patch."""
        metadata = {**dict(self.node.metadata), run_layout.RUN_POINTER_KEY: pointer}
        self.client.update_node(node=tpu_v2.Node(name=self.node.name, metadata=metadata),
                                update_mask=field_mask_pb2.FieldMask(paths=["metadata"])).result(timeout=30)

    def step(self, run_id: str) -> str:
        """On the host: once the pointer for RUN_ID shows in its metadata, the loop's step."""
        code = ("import json, sys, time; sys.path.insert(0, sys.argv[1]); import host_watch as w\n"
                "for _ in range(200):\n"
                "    attrs, _ = w.attributes(wait=False)\n"
                "    p = attrs.get('podctl-run')\n"
                "    if p and json.loads(json.loads(p)['body'])['run'] == sys.argv[2]: break\n"
                "    time.sleep(0.05)\n"
                "print(w.on_attributes(attrs))\n")
        return self.sh(f"python3 -c {shlex.quote(code)} ~/{run_layout.WATCH_DIR} {run_id}").strip()

    def run_dir(self, run_id: str) -> Path:
        return self.home / run_layout.HOST_RUNS_DIR / run_id

    def status(self, run_id: str, seconds: float = 60.0) -> dict:
        blob = self.gcs.blob(run_layout.status_object(run_id, 0))
        deadline = time.monotonic() + seconds
        while not blob.exists():
            assert time.monotonic() < deadline, f"no status for {run_id}"
            time.sleep(0.2)
        return json.loads(blob.download_as_bytes())

    def lines(self, run_id: str) -> str:
        return "".join(b.download_as_bytes().decode() for b in
                       self.gcs.client.list_blobs(FAKE_BUCKET, prefix=run_layout.log_prefix(run_id, 0)))

    def guest(self, key: str) -> str:
        found = self.client.get_guest_attributes(request={"name": self.node.name, "query_path": "podctl/"})
        return {i.key: i.value for g in found.guest_attributes for i in g.query_value.items}.get(key, "")


def _eventually(check, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.2)
    return value


def test_a_pointer_starts_the_agent_once_detached_which_takes_stacks_and_halt_requests(host):
    run = "watch-run-1"
    cfg, _ = host.publish(run, ("bash", "-c", "echo up; sleep 120"))
    assert host.step(run) == f"{run} started"
    assert host.guest("run") == f"{run} started"
    d = host.run_dir(run)
    config = d / run_layout.CONFIG_FILE
    assert config.stat().st_mode & 0o777 == 0o600
    assert json.loads(config.read_text()) == host_config.for_host(cfg, 0)
    pid = int(_eventually(lambda: (d / run_layout.PID_FILE).exists() and (d / run_layout.PID_FILE).read_text()))
    assert os.getsid(pid) == pid  # a session of its own, nobody's child: it outlives the watcher
    assert _eventually(lambda: "up" in host.lines(run).splitlines())
    assert host.step(run) == "None"  # the same pointer again: once only
    assert (host.home / host_watch.AGENTS_DIR / f"{host.agent_sha}.zip").exists()  # cached

    # stacks.json: a capture, as SIGUSR1 asks for one (within the control poll)
    host.gcs.blob(run_layout.stacks_request_object(run)).upload_from_string(json.dumps({"id": "s1"}))
    stacks = _eventually(lambda: list(host.gcs.client.list_blobs(FAKE_BUCKET,
                                                                 prefix=run_layout.stacks_prefix(run))))
    assert stacks[0].name.endswith("/host-0000.txt") and b"script pid" in stacks[0].download_as_bytes()

    # halt.json: the script stops as an SSH stop stops it, grace from the request
    host.gcs.blob(run_layout.halt_request_object(run)).upload_from_string(
        json.dumps({"grace": 7, "by": "stall watch"}))
    status = host.status(run)
    assert status["exit_code"] == 143 and status["stopped"] is True
    assert (d / run_layout.STOP_FILE).read_text().strip() == "7.0"
    assert "halt asked through GCS by stall watch" in host.lines(run)


def test_a_stop_asked_before_the_agent_started_ends_the_run_before_its_script(host):
    run = "watch-run-2"
    host.gcs.blob(run_layout.stop_request_object(run)).upload_from_string(
        json.dumps({"by": "alice", "grace_seconds": 5}))
    host.publish(run, ("bash", "-c", "echo SCRIPT-RAN"))
    assert host.step(run) == f"{run} started"
    status = host.status(run)
    assert status["exit_code"] == 143 and status["stopped"] is True
    lines = host.lines(run)
    assert "SCRIPT-RAN" not in lines and "stop asked through GCS by alice" in lines


def test_a_hash_mismatch_or_a_busy_host_is_refused_and_said(host):
    run = "watch-run-3"
    host.publish(run, ("true",), sha256="0" * 64)
    assert host.step(run) == f"{run} refused launch.json does not match the pointer's sha256"
    assert host.guest("run") == f"{run} refused launch.json does not match the pointer's sha256"
    assert not (host.run_dir(run) / run_layout.CONFIG_FILE).exists()

    # a launch.json and pointer that agree on an agent hash the zip's bytes do not have
    run = "watch-run-5"
    data = b"not the agent"
    host.gcs.blob(run_layout.agent_object("f" * 64)).upload_from_string(data)
    # not pointed at until it is changed: a watcher that saw a first pointer for the run
    # would compare the changed launch.json against it (a race that said the sha256 instead)
    cfg, p = host.publish(run, ("true",), point=False)
    cfg["agent_sha"], cfg["agent_object"] = "f" * 64, run_layout.agent_object("f" * 64)
    launch_data = json.dumps(cfg).encode()
    host.gcs.blob(run_layout.launch_object(run)).upload_from_string(launch_data)
    bad = {**p, "agent_sha": "f" * 64, "agent_object": run_layout.agent_object("f" * 64),
           "sha256": hashlib.sha256(launch_data).hexdigest()}
    host.point(host.signer.pointer(bad))  # signed by the pinned key: only the zip's hash is wrong
    assert host.step(run) == f"{run} refused the agent's zip does not match the pointer's agent_sha"

    # another run's live agent holds the chips, as it says in the host's /tmp: refused, naming it
    other = host.run_dir("other-run")
    chips = f"$TMPDIR/{run_layout.CHIPS_DIR}"
    host.sh(f"mkdir -p {other} {chips} && cd {other} && "
            "(setsid python3 -c 'import time; time.sleep(300)' \"$PWD\" > /dev/null 2>&1 < /dev/null & "
            f"echo \"$! {run_layout.CHIPS_LIVE}\" > {chips}/other-run)")
    run = "watch-run-6"
    host.publish(run, ("bash", "-c", "echo SCRIPT-RAN"))
    assert host.step(run) == f"{run} busy other-run"
    assert host.guest("run") == f"{run} busy other-run"
    assert not (host.run_dir(run) / run_layout.CONFIG_FILE).exists()


def test_a_pointer_outside_the_pin_kept_at_first_sight_is_refused_said_once_and_nothing_made(host, tmp_path):
    """The pin is the metadata's at the watcher's first look (here: the first pointer),
    kept 0600 and never replaced: a metadata writer's own pin and key, a copy of the
    client's pointer for another slice of the same name, an expired or another node's
    pointer are refused in podctl/run and leave nothing on the host."""
    run = "watch-pin-1"
    host.publish(run, ("true",))
    assert host.step(run) == f"{run} started"
    kept = host.home / run_layout.WATCH_DIR / host_pin.PIN_FILE
    ours = dict(host.node.metadata)[host_pin.PIN_KEY]
    assert kept.read_text() == ours and kept.stat().st_mode & 0o777 == 0o600

    marker, ours_id = "watch-pin-PWNED", json.loads(ours)["id"]
    evil = pointer_sign.Signer.load(tmp_path / "evil")
    theirs = pointer_sign.pin_metadata(evil, None)
    host.node = host.client.update_node(  # their pin, then their signed pointer: one patch each
        node=tpu_v2.Node(name=host.node.name, metadata={**dict(host.node.metadata), **theirs}),
        update_mask=field_mask_pb2.FieldMask(paths=["metadata"])).result(timeout=30)
    cases = [("watch-pin-2", evil, {}, "the pointer is signed by no key pinned at the slice's creation"),
             ("watch-pin-3", host.signer, {"pin": "0" * 32}, "the pointer was signed for another slice"),
             ("watch-pin-4", host.signer, {"node": "other8", "pin": ours_id}, "the pointer was signed for node 'other8'"),
             ("watch-pin-5", host.signer, {"expires": int(time.time()) - 5, "pin": ours_id},
              "the pointer has expired")]
    for run, key, over, why in cases:
        host.signer = key
        host.publish(run, ("bash", "-c", f"touch $TMPDIR/{marker}"), **over)
        said = host.step(run)
        assert said.startswith(f"{run} refused {why}"), said
        assert host.guest("run") == said
        assert not host.run_dir(run).exists()  # nothing made: the run id is not claimed
    assert kept.read_text() == ours  # the metadata's pin never replaced the first
    assert host.sh(f"ls $TMPDIR; test -e $TMPDIR/{marker} && echo RAN || true").count("RAN") == 0


def test_worker_0_says_the_nodes_roles_on_the_pinned_bucket_and_leaves_no_object(host):
    """check_roles on the host: the four calls with the node's own token, on the bucket the
    pin holds, said as `TIME ok`; the object it wrote is gone; it asks again soon only
    while denied."""
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); import host_watch as w\n"
            "w.PIN_DIR = sys.argv[1]\n"
            "attrs, _ = w.attributes(wait=False)\n"
            "print(w.check_roles(attrs))\n")
    began = int(time.time())
    again = host.sh(f"python3 -c {shlex.quote(code)} ~/{run_layout.WATCH_DIR}").strip()
    assert float(again) == host_watch.ROLES_OK_SECONDS
    checked, verdict = host.guest("roles").split(" ", 1)
    assert verdict == "ok" and int(checked) >= began
    assert not list(host.gcs.client.list_blobs(FAKE_BUCKET, prefix=f"{run_layout.ROOT}/watch/"))


def test_a_token_the_metadata_server_did_not_give_is_asked_again_and_a_4xx_refuses(monkeypatch):
    """512 watchers starting at once met a metadata server slow to answer: a timeout or a
    5xx is asked again; a 4xx (no service account on the node) is a refusal at once."""
    import http.server
    import threading

    answers = [503, 503, 200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            code = answers.pop(0) if answers else 404
            body = json.dumps({"access_token": "tok"}).encode() if code == 200 else b"no"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{server.server_address[1]}")
        assert host_watch._token() == "tok" and answers == []  # two 503s, then the token
        with pytest.raises(host_watch.Refused, match=r"no token from the metadata server \(404\)"):
            host_watch._token()  # at once: no pause after a 4xx
    finally:
        server.shutdown()
        server.server_close()
