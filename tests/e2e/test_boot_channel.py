"""A run started through the slice's watchers (`run --via boot`): one nodes.patch per node,
no SSH at all, against the fake daemon, whose hosts run every node's startup-script at boot
(the watcher) and whose `no-ssh` fault closes port 22 as OS Login without a key or an
internal-IPs-only slice does."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import replace
from collections.abc import Iterator
from pathlib import Path

import pytest

from podctl.cloud.types import Host, NodeInfo, SliceInfo
from podctl.base.errors import InvalidValueError
from podctl.base import vocabulary
from podctl.jobs import boot_script, launch
from podctl.host import run_layout
from podctl.jobs.channels.boot import first_hosts
from podctl.jobs.owner import busy_line
from podctl.jobs import channels
from tests import boot_support as boot
from tests.conftest import (Podctl, _share_env_signing_key, assert_one_line_error, slice_on_daemon,
                            stop_fake_and_check)

SCRIPTS = Path(__file__).parents[1] / "scripts"
NAME = "boot16"


def _node_metadata(cli: Podctl) -> dict[str, str]:
    """The node's whole metadata map, as anyone with tpu.nodes.get reads it."""
    return dict(boot.tpu_api(cli).client.get_node(name=f"{boot.parent(cli)}/nodes/{NAME}").metadata)


@pytest.fixture(scope="module")
def _boot16(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One daemon and v5p-16 for the cases that run through its watchers (a daemon and a
    v5p-16 made, booted and deleted per case cost seconds of CPU each on 2 cores). Each
    case leaves it as it found it: SSH open (`podctl` below), no run live (each stops its
    own), the pin its own (the attack's case puts it back); the fresh slice's own checks
    (each host booted once, both watchers ready) are made here, once."""
    tmp = tmp_path_factory.mktemp("boot16")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    with slice_on_daemon(Podctl(tmp), "v5p-16", NAME) as cli:
        admin = boot.admin(cli)
        assert boot.eventually(lambda: [h["boots"] for h in admin.host_stats(NAME)] == [1, 1], every=0.2)
        # each host's watcher says it is ready (guest attribute podctl/watch)
        assert boot.eventually(lambda: boot.watchers(cli, NAME) == ["ready", "ready"], every=0.2), \
            boot.watchers(cli, NAME)
        yield cli
        assert not [r for r, state in boot.run_states(cli).items() if state == "running"]  # none left running


@pytest.fixture
def podctl(_boot16: Podctl) -> Iterator[Podctl]:
    yield _boot16
    boot.admin(_boot16).inject("no-ssh", NAME, off=True)  # the next case finds SSH open


def test_a_run_with_ssh_closed_starts_with_one_patch_per_node_and_no_ssh_and_keeps_secrets_out_of_metadata(
        podctl):
    admin = boot.admin(podctl)
    metadata = _node_metadata(podctl)
    assert metadata[run_layout.BOOT_KEY] == boot_script.BOOT_VERSION  # every slice podctl makes
    assert "startup-script" in metadata
    # each host's watcher says it is ready (each host booted once: the fixture), as `status` says it
    assert "watchers  2/2 ready" in podctl("status", NAME).stdout.splitlines()
    podctl("fake", "inject", "no-ssh", NAME)
    # over SSH, the run cannot start; the line says which path can
    refused = podctl("run", NAME, "--via", "ssh", str(SCRIPTS / "show_env.py"), check=False)
    assert_one_line_error(refused, 1, "cannot reach host 000", "over SSH", f"podctl run {NAME} --via boot")
    before = [(h["ssh_total"], h["sessions_total"]) for h in admin.host_stats(NAME)]
    admin.reset_stats()
    secret = "s3cr3t-" + secrets.token_hex(8)
    proc = podctl("run", NAME, "--via", "boot", "--hosts", "all", "--env", f"TOKEN={secret}",
                  str(SCRIPTS / "show_env.py"), "TOKEN", "TPU_WORKER_ID", timeout=240)
    assert f'[host 0000] ENV {{"TOKEN": "{secret}", "TPU_WORKER_ID": "0"}}' in proc.stdout, proc.stderr
    assert f'[host 0001] ENV {{"TOKEN": "{secret}", "TPU_WORKER_ID": "1"}}' in proc.stdout, proc.stderr
    assert secret not in proc.stderr
    # one nodes.patch for the node, and not one SSH connection to either host
    calls = admin.stats()["by_call"]
    assert calls.get("nodes.patch", 0) == 1, calls
    assert [(h["ssh_total"], h["sessions_total"]) for h in admin.host_stats(NAME)] == before
    # the secret is in no metadata value, nor in what the hosts publish
    metadata = _node_metadata(podctl)
    pointer = json.loads(json.loads(metadata[run_layout.RUN_POINTER_KEY])["body"])  # what the client signed
    assert all(secret not in value for value in metadata.values())
    status = podctl.json("status", NAME)
    assert secret not in json.dumps(status)
    assert status["watchers"] == {NAME: [f"ready, {pointer['run']} started"] * 2}
    runs = podctl.json("runs")
    assert runs[0]["run_id"] == pointer["run"] and runs[0]["state"] == "succeeded"
    # `logs` reads it back from GCS as for any run
    logs = podctl("logs", pointer["run"], "--host", "1")
    assert '"TPU_WORKER_ID": "1"' in logs.stdout


def test_stop_and_a_killed_client_under_no_ssh(podctl):
    boot.admin(podctl).no_ssh(NAME)  # the fault as test 1 sets it, through the admin (no `podctl` for it)
    earlier = boot.run_states(podctl)  # the shared slice's runs before this case's
    # a client killed after the start leaves the run going; `logs --follow` re-attaches (20 s of
    # ticks: the client takes seconds to start on a loaded machine, and the run must be seen running)
    client = subprocess.Popen([sys.executable, "-m", "podctl", "run", NAME, "--via", "boot", "--hosts", "all",
                               str(SCRIPTS / "ticker.py"), "40", "0.5"],
                              env=podctl.env, cwd=podctl.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        # started (its record in GCS, read in this process: done counts too)
        assert boot.eventually(lambda: any(state in ("running", "succeeded")
                                           for r, state in boot.run_states(podctl).items() if r not in earlier),
                               120, every=0.5)
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait(30)
    (run_id,) = [r for r in boot.run_states(podctl) if r not in earlier]  # the killed client's run
    follow = podctl("logs", run_id, "--follow", "--host", "1", timeout=120)
    assert "tick 40 of 40" in follow.stdout
    assert boot.run_states(podctl)[run_id] in ("running", "succeeded")
    # `podctl stop` of a run started through the watchers: through GCS, no SSH tried
    detached = podctl("run", NAME, "--via", "boot", "--detach", "--hosts", "all",
                      str(SCRIPTS / "ticker.py"), "600", "0.5", timeout=240)
    run_id = next(w for w in detached.stdout.split() if w.startswith(NAME + "-"))
    # another run meanwhile: the watchers say busy, and podctl says it as the SSH path does
    second = podctl("run", NAME, "--via", "boot", str(SCRIPTS / "show_env.py"), check=False, timeout=120)
    assert second.returncode == 1, second.stderr
    last = second.stderr.strip().splitlines()[-1]
    assert last == (f"podctl: error: slice {NAME} is busy with run {run_id} (one TPU owner per host): "
                    f"wait for it, or `podctl stop {run_id}` first."), second.stderr
    # refused before anything was recorded (the watchers' podctl/chips named the run), or,
    # where the start came first, recorded failed with why (was: stopped)
    refused = podctl.json("runs")[0]
    if refused["run_id"] != run_id:
        assert refused["state"] == "failed", refused
        assert refused["extra"]["reason"].startswith(f"could not start: slice {NAME} is busy"), refused
    stopped = podctl("stop", run_id, timeout=180)
    assert "SSH" not in stopped.stderr, stopped.stderr
    assert boot.run_states(podctl)[run_id] == "stopped"


def test_a_run_started_through_the_watchers_while_the_last_one_stops_waits_for_it_to_let_go(podctl):
    """As over SSH (test_jobs_cli): each host's watcher waits for the stopping run to end
    (saying `letting-go` meanwhile), then starts the new one; no other run on any host."""
    first = podctl("run", NAME, "--via", "boot", "--detach", "--hosts", "all",
                   str(SCRIPTS / "linger_on_stop.py"), "3").stdout.strip()
    assert boot.eventually(lambda: "tick 1" in boot.logged(podctl, first), 60, every=0.5), \
        "the first run never started"
    podctl("stop", first, "--no-wait")  # the script lingers 3 s, as one saving a checkpoint
    proc = podctl("run", NAME, "--via", "boot", "--hosts", "all", str(SCRIPTS / "others_on_host.py"),
                  "linger_on_stop.py", timeout=240)
    assert sorted(proc.stdout.splitlines()) == ["[host 0000] OTHERS 0", "[host 0001] OTHERS 0"]


def test_one_owner_of_the_chips_whoever_started_the_run_boot_then_ssh_and_ssh_then_boot(podctl):
    """Runs through the watchers are root's, runs over SSH the login user's: each is refused
    as busy while the other lives (the rule is the host's, not a home's), and starts once
    it has ended, its JAX-like start finding libtpu's lock file open to it (a root-owned
    0600 file would say "in use by another process probably owned by another user")."""
    def busy(proc: subprocess.CompletedProcess, other: str) -> None:
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == f"podctl: error: {busy_line(NAME, other)}", proc.stderr

    for first_via, then_via in (("boot", "ssh"), ("ssh", "boot")):
        first = podctl("run", NAME, "--via", first_via, "--detach", "--hosts", "all",
                       str(SCRIPTS / "hold_chips.py"), "600", timeout=240).stdout
        run_id = next(w for w in first.split() if w.startswith(NAME + "-"))
        assert boot.eventually(lambda: boot.logged(podctl, run_id).count("CHIPS taken") == 2, 120, every=0.5), \
            podctl("logs", run_id, "--host", "all").stdout
        busy(podctl("run", NAME, "--via", then_via, str(SCRIPTS / "hold_chips.py"), check=False, timeout=120),
             run_id)
        podctl("stop", run_id, timeout=180)
        after = podctl("run", NAME, "--via", then_via, "--hosts", "all", str(SCRIPTS / "hold_chips.py"),
                       timeout=240)
        assert sorted(after.stdout.splitlines()) == ["[host 0000] CHIPS taken", "[host 0001] CHIPS taken"], \
            after.stdout + after.stderr


def _slice(*boot_versions: str | None) -> SliceInfo:
    nodes = tuple(
        NodeInfo(name=f"n{k}", state="READY", health=None, accelerator_type="v5p-16", topology="2x2x2",
                 hosts=(Host(k, 0, f"10.0.{k}.2", 22), Host(k, 1, f"10.0.{k}.3", 22)), spot=False, created=0.0,
                 labels={}, queued_resource=None,
                 metadata={} if v is None else {run_layout.BOOT_KEY: v})
        for k, v in enumerate(boot_versions))
    return SliceInfo(name="s", project="p", zone="z", kind="node", state="READY", accelerator_type="v5p-16",
                     topology="2x2x2", num_slices=len(nodes), tier="on-demand", created=0.0, labels={}, nodes=nodes)


def _patch_metadata(cli: Podctl, metadata: dict[str, str]) -> None:
    """One `PATCH ?updateMask=metadata` of the node, as anyone with tpu.nodes.update sends it."""
    from google.cloud import tpu_v2
    from google.protobuf import field_mask_pb2

    name = f"{boot.parent(cli)}/nodes/{NAME}"
    boot.tpu_api(cli).client.update_node(node=tpu_v2.Node(name=name, metadata=metadata),
                       update_mask=field_mask_pb2.FieldMask(paths=["metadata"])).result(timeout=60)


def _refused_on_both(cli: Podctl, run_id: str, *, by_cli: bool = True) -> str:
    """`podctl status`'s watchers line once both hosts' watchers refused RUN_ID's pointer;
    not BY_CLI: the same line made in this process, by the code `podctl status` says it with
    (the CLI's own rendering of it is checked once, by the first call)."""
    def refused() -> bool:
        said = boot.watchers(cli, NAME)
        return len(said) == 2 and all(s.startswith(f"ready, {run_id} refused ") for s in said)

    assert boot.eventually(refused, 90, every=0.5), boot.watchers(cli, NAME)
    if not by_cli:
        from podctl.steps.slices import SliceStatus

        info = asyncio.run(boot.tpu_api(cli).describe(boot.parent(cli), NAME))
        return f"watchers  {SliceStatus(info, {}, {NAME: boot.watchers(cli, NAME)}).watchers_said()}"
    return next(line for line in cli("status", NAME).stdout.splitlines() if line.startswith("watchers"))


def test_a_bucket_and_metadata_writer_cannot_make_the_watchers_run_anything_across_a_reboot(podctl, tmp_path):
    """Issue 37's attack: an old launch.json copied under another prefix with another command
    and one metadata PATCH (the copied pointer changed to name it); then the writer's own
    pin and key, a reboot between. Both refused by every watcher (its pin is the one it kept
    at first boot), said by `status` in one line; nothing runs; podctl's own runs still do."""
    from podctl.jobs import pointer_sign

    ok = podctl("run", NAME, "--via", "boot", "--hosts", "all", str(SCRIPTS / "show_env.py"), "TPU_WORKER_ID",
                timeout=240)
    assert '[host 0001] ENV {"TPU_WORKER_ID": "1"}' in ok.stdout, ok.stderr
    metadata = _node_metadata(podctl)
    pointer = json.loads(metadata[run_layout.RUN_POINTER_KEY])
    body = json.loads(pointer["body"])
    assert body["node"] == NAME and body["pin"] == json.loads(metadata[pointer_sign.PIN_KEY])["id"]
    store = boot.store(podctl)
    marker = "$TMPDIR/PWNED-" + secrets.token_hex(4)

    # 1. launch.json copied under another prefix, its command changed; the pointer's body
    # changed to name it (the client's signature kept: the writer has no key)
    launch_json = json.loads(asyncio.run(store.download_bytes(body["launch"])))
    launch_json.update(run_id="evil-1", command=["bash", "-c", f"touch {marker}"], script=None)
    data = json.dumps(launch_json).encode()
    asyncio.run(store.upload_bytes("evil/runs/evil-1/launch.json", data, content_type="application/json"))
    forged = {**body, "run": "evil-1", "launch": "evil/runs/evil-1/launch.json",
              "sha256": hashlib.sha256(data).hexdigest()}
    _patch_metadata(podctl, {**metadata, run_layout.RUN_POINTER_KEY: json.dumps({**pointer, "body": json.dumps(forged)})})
    line = _refused_on_both(podctl, "evil-1")
    assert line.endswith("pointer refused on worker 0, worker 1: evil-1 refused the pointer is signed by no key "
                         "pinned at the slice's creation"), line

    # 2. the writer's own pin and key, and a pointer signed with it: one PATCH; then a reboot
    # (the startup script runs again, the watchers start afresh): the pin kept at first boot stands
    evil = pointer_sign.Signer.load(tmp_path / "evil")
    theirs = pointer_sign.pin_metadata(evil, None)
    signed = evil.pointer({**forged, "run": "evil-2", "pin": json.loads(theirs[pointer_sign.PIN_KEY])["id"],
                           "expires": int(time.time()) + 3600})
    _patch_metadata(podctl, {**metadata, **theirs, run_layout.RUN_POINTER_KEY: signed})
    assert "evil-2 refused the pointer is signed by no key pinned" in _refused_on_both(podctl, "evil-2",
                                                                                         by_cli=False)
    booted = [h["boots"] for h in boot.admin(podctl).host_stats(NAME)]
    boot.admin(podctl).reboot(NAME)
    assert boot.eventually(lambda: [h["boots"] for h in boot.admin(podctl).host_stats(NAME)]
                           == [b + 1 for b in booted], every=0.5)
    assert "evil-2 refused the pointer is signed by no key pinned" in _refused_on_both(podctl, "evil-2",
                                                                                         by_cli=False)
    left = podctl("exec", NAME, "--hosts", "all", "--", f"test -e {marker} && echo RAN || echo CLEAN")
    assert left.stdout.count("CLEAN") == 2 and "RAN" not in left.stdout, left.stdout  # nothing ran

    # podctl reads the pin from the metadata: a replaced one is said before anything is sent
    refused = podctl("run", NAME, "--via", "boot", str(SCRIPTS / "show_env.py"), check=False, timeout=120)
    assert_one_line_error(refused, 1, "pin", "does not hold this podctl's key", "--via ssh", "--trust-key")
    # the owner puts the pin back: podctl's own runs start as before
    _patch_metadata(podctl, {**metadata, run_layout.RUN_POINTER_KEY: signed})
    again = podctl("run", NAME, "--via", "boot", "--hosts", "all", str(SCRIPTS / "show_env.py"), "TPU_WORKER_ID",
                   timeout=240)
    assert '[host 0001] ENV {"TPU_WORKER_ID": "1"}' in again.stdout, again.stderr


def test_up_refuses_a_trust_key_that_is_no_rsa_public_key_in_one_line_before_anything(tmp_path):
    cli = Podctl(tmp_path)
    cli.env["PODCTL_BACKEND"] = "fake"
    (tmp_path / "notakey.pem").write_text("hello\n")
    for path in (tmp_path / "notakey.pem", tmp_path / "missing.pem"):
        refused = cli("up", "--slice", "v5p-8", "--name", "trusty", "--trust-key", str(path), check=False)
        assert_one_line_error(refused, 2, f"--trust-key {path}: ")
    status = cli("fake", "status", "--json", check=False)
    assert not json.loads(status.stdout or "{}").get("running")  # no daemon started, nothing made


def _paths(info: SliceInfo, asked: str | None, configured: str | None, **kw) -> list[str]:
    return [kind.name for kind in channels.candidates(info, asked, configured, **kw)]


def test_which_path_a_run_takes():
    ours, old, none = boot_script.BOOT_VERSION, "0123456789ab", None
    assert _paths(_slice(ours), None, "ssh") == ["ssh"]
    assert channels.DEFAULT == "auto" and _paths(_slice(ours), None, None) == ["boot", "ssh"]
    assert _paths(_slice(ours), "boot", "ssh") == ["boot"]
    # auto: the watchers first where every node has one this podctl knows (multislice too),
    # and only when they answer (channels.choose); SSH last
    assert _paths(_slice(ours, ours), None, "auto") == ["boot", "ssh"]
    assert _paths(_slice(ours, none), "auto", "ssh") == ["ssh"]
    assert _paths(_slice(old), None, "auto") == ["ssh"]
    assert _paths(_slice(none), "ssh", "boot") == ["ssh"]
    assert _paths(_slice(ours), "auto", None, signing_key=True) == ["ssh"]  # --build-on host: SSH only
    assert _paths(_slice(ours), "auto", None, secrets=True) == ["ssh"]  # --env values stay out of GCS
    assert _paths(_slice(ours), "boot", None, secrets=True) == ["boot"]  # ...unless boot is asked for
    with pytest.raises(InvalidValueError, match="--via ssh"):
        _paths(_slice(old), "boot", "ssh")
    with pytest.raises(InvalidValueError, match="--via ssh"):
        _paths(_slice(ours, none), None, "boot")
    # a Compute Engine MIG: its watchers take the pointer from each VM's own metadata
    # (cloud/providers/compute_metadata.py), so it goes the same ways as a Cloud TPU node
    assert _paths(replace(_slice(ours), api="compute"), "boot", None) == ["boot"]
    assert _paths(replace(_slice(ours), api="compute"), None, None) == ["boot", "ssh"]
    with pytest.raises(InvalidValueError, match="--via ssh"):
        _paths(replace(_slice(old), api="compute"), "boot", None)
    with pytest.raises(InvalidValueError, match="--build-on host needs --via ssh"):
        _paths(_slice(ours), "boot", None, signing_key=True)
    with pytest.raises(InvalidValueError, match="PODCTL_VIA 'pigeon'.*auto, boot or ssh"):
        _paths(_slice(ours), None, "pigeon")
    # the default on a slice made before the watchers (or by another podctl): SSH, said in
    # one line; a run whose --env values auto keeps over SSH says nothing (documented)
    from podctl.jobs.channels.base import Reach

    said: list[str] = []
    reach = Reach(api=None, storage=None, parent="p", info=_slice(old), access=None,  # type: ignore[arg-type]
                  notice=said.append)
    assert asyncio.run(channels.choose(reach, None, None)).name == "ssh"
    assert len(said) == 1 and said[0].startswith("starting over ssh; not --via boot: slice ")
    assert "carries no podctl watcher this version knows" in said[0]
    said.clear()
    assert asyncio.run(channels.choose(replace(reach, info=_slice(ours)), None, None, secrets=True)).name == "ssh"
    assert asyncio.run(channels.choose(reach, "ssh", None)).name == "ssh" and said == []


def test_each_node_knows_its_first_host():
    info = _slice(boot_script.BOOT_VERSION, boot_script.BOOT_VERSION)
    targets = launch.targets_for(info, 22)
    assert [(n.name, first) for n, first in first_hosts(info, targets)] == [("n0", 0), ("n1", 2)]


def test_bad_via_is_refused_in_one_line(tmp_path):
    """Refused before the cloud is asked: no slice is needed, and no fake is started."""
    podctl = Podctl(tmp_path)
    podctl.env["PODCTL_BACKEND"] = "fake"
    proc = podctl("run", NAME, "--via", "bogus", str(SCRIPTS / "show_env.py"), check=False)
    assert_one_line_error(proc, 2, "bogus")
    proc = podctl("run", NAME, str(SCRIPTS / "show_env.py"), env={"PODCTL_VIA": "carrier-pigeon"}, check=False)
    assert_one_line_error(proc, 2, "PODCTL_VIA", "auto, boot or ssh")
    assert not json.loads(podctl("fake", "status", "--json", check=False).stdout or "{}").get("running")


@pytest.mark.host_env
def test_a_multi_host_jax_run_with_ssh_closed_survives_preemption_through_the_new_slices_watchers(tmp_path):
    """The issue's check: a multi-host JAX program started through the watchers on a no-ssh
    slice, preempted, recovered onto a slice made again, whose watchers come up by
    themselves; no SSH session on either slice's hosts."""
    from tests.e2e.test_recovery import TEMPLATE, TINY, run_with_fault

    cli = Podctl(tmp_path)
    cli.env["PODCTL_BACKEND"] = "fake"
    down = False
    try:
        cli.fake_status = json.loads(cli("fake", "start", "--json").stdout)  # type: ignore[attr-defined]
        admin = boot.admin(cli)
        cli("up", "--slice", "v5p-16", "--name", "brec")
        admin.no_ssh("brec")

        def preempt(err):
            assert sum(h["ssh_total"] for h in admin.host_stats("brec")) == 0
            admin.preempt("brec")

        code, log, out = run_with_fault(
            cli, ["run", "brec", "--via", "boot", "--recover", "1", "--json", str(TEMPLATE), *TINY,
                  "--steps", "16", "--checkpoint-every", "4"], '"kind": "checkpoint", "step": 4', preempt)
        assert code == 0, log[-4000:]
        result = json.loads(out)
        first, second = result["attempts"]
        assert result["recoveries"] == 1 and second["last_step"] == 16 and second["start_step"] >= 4
        assert "creating brec again" in log
        # the slice made again carries the watcher, and its run came through it
        assert [h["boots"] for h in admin.host_stats("brec")] == [1, 1]
        assert sum(h["ssh_total"] for h in admin.host_stats("brec")) == 0
        cli("down", "brec", "--yes")
        down = True
    finally:
        if not down:
            cli("down", "brec", "--yes", check=False)
        stop_fake_and_check(cli)


def test_a_queued_run_starts_through_the_channel_its_entry_names(tmp_path):
    """`queue add --via boot`, kept with the entry: the tick starts its run with one
    nodes.patch though the ticker's own PODCTL_VIA says ssh; the run's record says boot.
    A --via no registry line names is refused in one line before anything is bundled."""
    from tests.e2e.test_queue import TERMINAL, QueueCli

    def settle(limit: float) -> list[dict]:
        """QueueCli.settle, its fake's admin read once (not a `podctl fake status` per look),
        a second between ticks (each tick and each `queue ls` is a `podctl` process)."""
        admin = boot.admin(q)
        deadline = time.monotonic() + limit
        while True:
            q("queue", "tick")
            entries = q.entries()
            if all(e["state"] in TERMINAL and all(a.get("cleaned") for a in e["attempts"])
                   for e in entries) and admin.is_empty():
                return entries
            assert time.monotonic() < deadline, entries
            time.sleep(1.0)

    q = QueueCli(tmp_path)
    q.env.update(PODCTL_BACKEND="fake", PODCTL_VIA="ssh")
    try:
        bad = q("queue", "add", "--slice", "v5p-8", "--via", "pigeon", str(SCRIPTS / "show_env.py"), check=False)
        assert_one_line_error(bad, 2, "queue add --via 'pigeon'", "auto, boot or ssh")
        added = json.loads(q("queue", "add", "--slice", "v5p-8", "--via", "boot", "--json",
                             str(SCRIPTS / "show_env.py"), "TPU_WORKER_ID").stdout)
        assert added["via"] == "boot"
        q.fake_status = json.loads(q("fake", "start", "--json").stdout)  # its admin, for settle
        entries = settle(limit=180)
        (entry,) = [e for e in entries if e["id"] == added["id"]]
        assert entry["state"] == "succeeded", entry
        assert boot.admin(q).stats()["by_call"].get("nodes.patch", 0) == 1
        run_id = entry["attempts"][-1]["run_id"]
        assert '"TPU_WORKER_ID": "0"' in q("logs", run_id).stdout
        (record,) = [r for r in q.json("runs") if r["run_id"] == run_id]
        assert record["extra"]["via"] == "boot"
    finally:
        stop_fake_and_check(q)


def test_a_start_that_does_not_come_up_is_said_per_host_from_the_watchers_words():
    from podctl.cloud.types import GuestEntry
    from podctl.jobs.channels.boot import FATAL, _explain

    def said(**kv: str) -> list[GuestEntry]:
        return [GuestEntry(run_layout.GUEST_NAMESPACE, k, v) for k, v in kv.items()]

    def kind(*args):
        return _explain(*args)[0]

    def text(*args):
        return _explain(*args)[1]

    assert kind("r1", []) == "booting" and "has not run its startup-script" in text("r1", [])
    assert kind("r1", said(watch="ready abc")) == "waiting"
    assert text("r1", said(watch="ready abc")).startswith("waiting (watcher ready abc")
    assert kind("r1", said(watch="ready abc", run="r0 started")) == "waiting"  # an older run's
    assert _explain("r1", said(watch="ready", run="r1 refused GCS answered 403 for gs://b/x")) == (
        "refused", "refused GCS answered 403 for gs://b/x")
    assert kind("r1", said(watch="ready", run="r1 busy r0")) == "busy"
    assert text("r1", said(watch="ready", run="r1 busy r0")) == "r0"  # said as owner.busy_line
    # a host whose agent was started, but is slow to write (512 agents on a busy machine), is no failure
    assert kind("r1", said(watch="ready", run="r1 started")) == "started"
    assert _explain("r1", said(watch="ready", run="r1 letting-go r0")) == (
        "letting-go", "waiting for run r0 to let go of its chips (it was asked to stop)")
    assert {"denied", "refused", "busy", "failed", "dead"} == set(FATAL)
    # the watcher's own state: its beat's age against the reader's clock, its start's failure
    now = 1_000_000.0
    fresh, stale = str(int(now - 10)), str(int(now - 60))
    assert kind("r1", said(watch="ready abc", beat=fresh), now) == "waiting"
    assert _explain("r1", said(watch="ready abc", beat=stale), now)[0] == "dead"
    assert "its watcher is dead (its last beat 60 s ago" in text("r1", said(watch="ready", beat=stale), now)
    assert kind("r1", said(watch="ready", beat=stale, run="r1 started"), now) == "started"  # it did its part
    assert _explain("r1", said(watch="failed OSError: [Errno 28] No space left on device: '/h'")) == (
        "failed", "its watcher could not start: OSError: [Errno 28] No space left on device: '/h'")
    assert kind("r1", said(beat=fresh), now) == "waiting"  # beat first, then ready: a watcher starting
    assert _explain("r1", said(watch="ready", access="r1 write 403 storage.objects.create sa@p -")) == (
        "denied", "write 403 storage.objects.create sa@p -")
    assert kind("r1", said(watch="ready", access="r0 write 403 p sa@p -")) == "waiting"  # an older run's


def test_a_start_whose_hosts_never_boot_waits_naming_them_then_fails_saying_so(fake, api, tmp_path):
    """A slice that says it carries the watcher (its podctl-boot version) but whose hosts
    never ran it (no startup-script: as an image without the guest environment's script
    runner, or a host that never boots) is booting, named while podctl waits, until the
    boot wait (here cut short), then fails naming each host and what to do; never "no
    watcher"."""
    import asyncio

    from google.cloud import tpu_v2

    from podctl.cloud.convert import slice_from_node
    from podctl.base.errors import JobError
    from podctl.jobs import pointer_sign
    from podctl.jobs.channels.boot import BootChannel, usable_on
    from podctl.base.settings import FAKE_BUCKET
    from podctl.cloud.storage import RetryPolicy as StorageRetry, Storage
    from tests.conftest import PARENT

    node = tpu_v2.Node(accelerator_type="v5p-16", runtime_version="v2-alpha-tpuv5",
                       metadata={run_layout.BOOT_KEY: boot_script.BOOT_VERSION, "enable-guest-attributes": "TRUE"})
    created = api.client.create_node(parent=PARENT, node_id="nowatch", node=node).result(timeout=30)
    try:
        info = slice_from_node(created)
        assert usable_on(info) and len(info.hosts) == 2
        storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url,
                                  retry=StorageRetry(attempts=2, initial=0.01, maximum=0.02, jitter=0.01))
        notices: list[str] = []
        channel = BootChannel(api, storage, parent=PARENT, info=info, targets=launch.targets_for(info, 22),
                              signer=pointer_sign.Signer.load(tmp_path), notice=notices.append)
        assert channel.boot_seconds == vocabulary.boot_wait_seconds(2) == 300.0
        channel.first_check_seconds, channel.guest_check_seconds, channel.boot_seconds = 0.2, 0.5, 2.0
        channel.start_seconds = 120.0
        began = time.monotonic()
        with pytest.raises(JobError) as failed:
            asyncio.run(channel._wait_started("nowatch-r1"))
        assert time.monotonic() - began < channel.start_seconds  # ended at the boot wait, not later
        assert notices and notices[0].startswith("waiting for 2 of 2 hosts to boot (host 0000, host 0001): "
                                                 "their startup-script has not run yet"), notices
        said = str(failed.value)
        assert "did not start on 2 of 2 hosts" in said and "make the slice again" in said, said
        assert "host 0000: booting" in said and "host 0001: booting" in said and "no watcher" not in said, said
    finally:
        api.client.delete_node(name=created.name).result(timeout=30)


def test_a_nodes_answer_that_leaves_out_the_silent_hosts_is_placed_by_the_watchers_worker_words():
    """getGuestAttributes names no worker and leaves out the hosts that said nothing (those
    still booting): each watcher's podctl/worker word places its entries."""
    from podctl.cloud.types import GuestEntry
    from podctl.jobs.channels.boot import _placed

    def said(**kv: str) -> list[GuestEntry]:
        return [GuestEntry(run_layout.GUEST_NAMESPACE, k, v) for k, v in kv.items()]

    assert _placed([said(worker="2", watch="ready a"), said(worker="0", watch="ready b")], 4) == [
        {"worker": "0", "watch": "ready b"}, {}, {"worker": "2", "watch": "ready a"}, {}]
    assert _placed([], 3) == [{}, {}, {}]  # nobody has booted yet
    assert _placed([said(watch="x"), said(watch="y")], 2) == [{"watch": "x"}, {"watch": "y"}]  # one per worker
    assert _placed([said(watch="failed no python3")], 2) is None  # says no worker: asked one by one
    assert _placed([said(worker="1"), said(worker="1")], 3) is None
    assert _placed([said(worker="5")], 3) is None
