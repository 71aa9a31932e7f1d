"""Security review, as tests through the real paths: `podctl` processes on the fake
cloud's daemon, a fake v5p-8, its agent, the GCS emulator.

Covered elsewhere, not repeated here:
  - an --env value with $(...) and backticks arrives literally, run.json keeps the key
    only: test_jobs.py::test_env_values_arrive_literally_and_secrets_stay_out_of_records
  - the SSH key is 0600 in a 0700 dir: test_cli.py::test_ssh_key_is_made_once_and_private,
    test_sshkey.py; world.json is 0600: test_cli.py::test_daemon_keeps_slices_across_its_restart
  - a changed host key is refused by the library (HostKeyError): test_jobs.py::
    test_a_changed_host_key_is_refused
  - the fake cloud's API server refuses non-loopback hosts: test_fake_cloud.py::
    test_the_fake_binds_loopback_only
  - packing refuses absolute and escaping symlinks, unpacking refuses '..', absolute
    names, links out, devices: test_bundle.py
  - the queue keeps --env values out of `queue ls/show`, its JSON and its tick log, and
    its db is 0600: test_queue.py::test_add_ls_show_keep_env_values_to_themselves,
    test_queue_tick.py::test_env_values_never_reach_the_log_or_the_json
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from podctl.base.errors import FakeCloudError
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage
from tests.conftest import Podctl, assert_one_line_error, stop_fake_and_check

SECRET = "s3cr3t-VALUE-7f3a9"

# Prints what it was given as one JSON line: its argv, its file name, TRICKY, and what
# the setup saw of TRICKY (written to a file by the setup, before the script runs).
SHOW = """
import json, os, sys
saw = open("setup-saw.bin", "rb").read().decode() if os.path.exists("setup-saw.bin") else None
print("RESULT " + json.dumps({"argv": sys.argv[1:], "file": os.path.basename(__file__),
                              "tricky": os.environ.get("TRICKY"), "setup": saw}), flush=True)
"""
# Proves it got the secret without printing it.
USE_SECRET = """
import hashlib, os
print("digest", hashlib.sha256(os.environ["SECRET"].encode()).hexdigest(), flush=True)
"""


def _sec(tmp: Path) -> Iterator[Podctl]:
    """podctl with a v5p-8 on the fake daemon, its directories under paths with spaces
    (the fake hosts' HOME is then one too); everything deleted and stopped at the end."""
    cli = Podctl(tmp)
    cli.env.update({"PODCTL_BACKEND": "fake", "PODCTL_STATE_DIR": str(tmp / "st ate"),
                    "PODCTL_CONFIG_DIR": str(tmp / "con fig")})
    try:
        cli("up", "--slice", "v5p-8", "--name", "sec")
        yield cli
    finally:
        cli("down", "sec", "--yes", check=False)
        stop_fake_and_check(cli)


@pytest.fixture(scope="module")
def _shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One daemon and v5p-8 for the cases below that leave nothing behind but what
    `podctl` below puts back (a daemon and a slice made and deleted per case cost four
    `podctl` processes and the daemon's own start, on 2 cores)."""
    tmp = tmp_path_factory.mktemp("sec")
    (tmp / "home").mkdir()
    yield from _sec(tmp)


@pytest.fixture
def podctl(_shared: Podctl) -> Iterator[Podctl]:
    """The shared v5p-8; the host-key pins a case damages or changes are put back after it."""
    pins = Path(_shared.env["PODCTL_CONFIG_DIR"]) / "known_hosts"
    kept = {path: path.read_bytes() for path in pins.glob("*.json")} if pins.exists() else {}
    yield _shared
    for path, data in kept.items():
        path.write_bytes(data)


@pytest.fixture
def own_podctl(tmp_path: Path) -> Iterator[Podctl]:
    """A daemon and v5p-8 of the case's own, in its tmp_path (the case stops and starts the
    daemon, and reads every file under tmp_path)."""
    yield from _sec(tmp_path)


def job_script(tmp_path: Path, text: str) -> Path:
    """A script in its own workdir (tmp_path also holds podctl's config and state)."""
    work = tmp_path / "job"
    work.mkdir(exist_ok=True)
    (work / "use_secret.py").write_text(text)
    return work / "use_secret.py"


def fake_dir(cli: Podctl) -> Path:
    return Path(cli.env["PODCTL_STATE_DIR"]) / "fake"


def host_home(cli: Podctl) -> Path:
    return next(fake_dir(cli).glob("hosts/*/*/sec/host-0000/home/podctl"))  # podctl's own user


def test_hostile_names_args_env_and_setup_reach_the_script_byte_exact(podctl, tmp_path):
    pwned = tmp_path / "pwned"
    hostile = [f"$(touch {pwned})", f"`touch {pwned}`", f"; touch {pwned}; #", f"'; touch {pwned}; '",
               'it\'s "quoted"', "new\nline", "  spaced  out  ", "--env", "-rf", "", "\\ back\\slash",
               "*", "~", "$HOME", "a\tb"]
    tricky = f"$(touch {pwned}) `touch {pwned}`; touch {pwned} 'q' \"dq\"\nline2 $HOME *"
    work = tmp_path / "work dir; $(touch pwned) 'q'"
    work.mkdir()
    script = work / "odd $(touch pwned) name; 'q'.py"
    script.write_text(SHOW)
    setup = 'printf %s "$TRICKY" > setup-saw.bin'  # the setup is a shell line by design; its $TRICKY is data
    proc = podctl("run", "sec", "--env", f"TRICKY={tricky}", "--setup", setup, str(script), "--", *hostile)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("[host 0000] RESULT "))
    seen = json.loads(line.removeprefix("[host 0000] RESULT "))
    assert seen == {"argv": hostile, "file": script.name, "tricky": tricky, "setup": tricky}
    # `podctl exec` quotes each word for the host's shell
    show_argv = "import json, sys; print('ARGV ' + json.dumps(sys.argv[1:]))"
    out = podctl("exec", "sec", "--", "python3", "-c", show_argv, *hostile).stdout
    line = next(x for x in out.splitlines() if x.startswith("[host 0000] ARGV "))
    assert json.loads(line.removeprefix("[host 0000] ARGV ")) == hostile
    # no shell ran any of it, here or on the host
    assert not pwned.exists()
    assert not [p for p in tmp_path.rglob("pwned*")], "a hostile value was run by a shell"
    assert not [p for p in podctl.tmp.rglob("pwned*")], "a hostile value was run by a shell"  # the hosts' homes


def test_env_secrets_never_leave_the_config_that_carries_them(own_podctl, tmp_path):
    podctl = own_podctl
    script = job_script(tmp_path, USE_SECRET)
    proc = podctl("run", "sec", "--env", f"SECRET={SECRET}", "--json", str(script))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    run_id = result["run_id"]
    assert hashlib.sha256(SECRET.encode()).hexdigest() in proc.stderr  # the script had it
    said = proc.stdout + proc.stderr
    for cmd in (["runs"], ["runs", "--json"], ["logs", run_id], ["status", "sec"]):
        out = podctl(*cmd)
        said += out.stdout + out.stderr
    assert SECRET not in said and "SECRET" in podctl("runs", "--json").stdout
    bad = podctl("run", "sec", "--env", f"1SECRET={SECRET}", str(script), check=False)
    assert bad.returncode == 2 and "1SECRET" in bad.stderr and SECRET not in bad.stderr

    # Everything in GCS: the run's prefix, bundles, agents.
    status = json.loads(podctl("fake", "status", "--json").stdout)
    gcs = Storage.connect(FAKE_BUCKET, endpoint=status["gcs"])
    objects = asyncio.run(gcs.list(""))
    assert any(o.name.startswith(f"podctl/runs/{run_id}/") for o in objects)
    for obj in objects:
        assert SECRET.encode() not in asyncio.run(gcs.download_bytes(obj.name)), obj.name

    # Every file on this machine: podctl's config and state, the daemon's log and world,
    # the emulator's files, the host's home. Only the host's config.json holds the value
    # (the agent needs it; 0600 in a 0700 directory), and nothing else.
    podctl("fake", "stop")  # the emulator and the world write out what they hold
    carriers = []
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink() and SECRET.encode() in path.read_bytes():
            carriers.append(path)
    config = host_home(podctl) / ".podctl" / "runs" / run_id / "config.json"
    assert carriers == [config]
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    podctl("fake", "start")


def test_state_files_and_keys_are_private(podctl, tmp_path):
    podctl("exec", "sec", "--", "true")  # pins the host key
    config = Path(podctl.env["PODCTL_CONFIG_DIR"])
    state = fake_dir(podctl)
    private = [config / "ssh" / "podctl_ed25519", *(config / "known_hosts").glob("*.json"),
               config / "keys" / "pointer_rsa3072.pem",  # signs runs through the watchers (made by `up`)
               state / "daemon.json", state / "world.json", state / "daemon.log", state / "lock"]
    assert len(private) == 7
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for directory in (config / "ssh", config / "known_hosts", config / "keys", state, state / "hosts", state / "gcs",
                      host_home(podctl), host_home(podctl).parents[1]):  # the home, the host
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    node_dir = host_home(podctl).parents[2]  # NODE/host-0000/home/podctl
    assert stat.S_IMODE((node_dir / ".ssh_host_ed25519_key").stat().st_mode) == 0o600


def test_a_changed_host_key_stops_podctl_before_anything_is_sent(podctl, tmp_path):
    podctl("exec", "sec", "--", "true")
    pins = next((Path(podctl.env["PODCTL_CONFIG_DIR"]) / "known_hosts").glob("*_sec_*.json"))  # PROJECT_ZONE_NAME_CREATED.json
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    pins.write_text(json.dumps({where: other for where in json.loads(pins.read_text())}))
    runs = host_home(podctl) / ".podctl" / "runs"
    before = sorted(runs.iterdir()) if runs.exists() else []
    script = job_script(tmp_path, USE_SECRET)
    for args in (["exec", "sec", "--", "touch", "ran"], ["run", "sec", "--env", f"SECRET={SECRET}", str(script)]):
        proc = podctl(*args, check=False)
        errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert len(errors) == 1 and errors == proc.stderr.strip().splitlines()[-1:], proc.stderr
        for words in ("podctl: error: host 0000", "different SSH host key", "refusing", str(pins)):
            assert words in errors[0]
    assert not (host_home(podctl) / "ran").exists()
    assert (sorted(runs.iterdir()) if runs.exists() else []) == before  # no config was written


@pytest.mark.parametrize("damage", ["truncated", "not-an-object"])
def test_a_damaged_host_key_pins_file_refuses_to_connect_rather_than_turn_checking_off(podctl, damage):
    podctl("exec", "sec", "--", "true")
    pins = next((Path(podctl.env["PODCTL_CONFIG_DIR"]) / "known_hosts").glob("*_sec_*.json"))
    text = pins.read_text()
    pins.write_text(text[:len(text) // 2] if damage == "truncated" else "[]")
    proc = podctl("exec", "sec", "--", "touch", "ran", check=False)
    assert_one_line_error(proc, 1, "cannot be read", "refusing to connect unchecked", str(pins))
    assert not (host_home(podctl) / "ran").exists()
    assert pins.read_text() == (text[:len(text) // 2] if damage == "truncated" else "[]")  # not re-pinned


def test_the_fake_binds_loopback_only_everywhere(tmp_path, fake, api):
    """The GCS emulator refuses other hosts too (it has no auth), and every socket the
    fake cloud listens on (API, GCS, each host's SSH and metadata server) is on loopback:
    127.0.0.1, or a host's own 127.x.y.z address."""
    import ipaddress

    from google.cloud import tpu_v2

    from podctl.fake.storage.gcs import FakeGcs
    from tests.conftest import PARENT

    for host in ("0.0.0.0", "192.168.1.1", "::", "example.com"):
        with pytest.raises(FakeCloudError, match="loopback only"):
            FakeGcs(tmp_path / "gcs", host=host)
    assert fake.url.startswith("http://127.0.0.1:") and fake.gcs._httpd.server_address[0] == "127.0.0.1"
    node = api.client.create_node(parent=PARENT, node_id="lo", node=tpu_v2.Node(
        accelerator_type="v5p-16", runtime_version="v2-alpha-tpuv5")).result(timeout=30)
    hosts = [h for nh in fake.hosts.nodes.values() for h in nh.hosts]
    where = [h.sock.getsockname()[0] for h in hosts] + [h.meta_where[0] for h in hosts]
    assert len(hosts) == 2 and all(ipaddress.ip_address(a).is_loopback for a in where)
    api.client.delete_node(name=node.name).result(timeout=30)


def _tar(path: Path, members: list[tarfile.TarInfo], data: bytes = b"x") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info in members:
            if info.isreg():
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize("members, words", [
    ([_member("./../x")], "climbs out"),
    ([_member("a/./../../x")], "climbs out"),
    ([_member("h", tarfile.LNKTYPE, "/etc/passwd")], "outside the destination"),
    ([_member("d", tarfile.DIRTYPE), _member("d/l", tarfile.SYMTYPE, "../../x")], "outside the destination"),
    ([_member("blk", tarfile.BLKTYPE)], "device"),
])
def test_the_agent_refuses_what_test_bundle_does_not_craft(tmp_path, members, words):
    """The agent's own copy (standalone, ValueError), on members test_bundle.py leaves out."""
    from podctl.host import agent

    evil = _tar(tmp_path / "evil.tar.gz", members)
    with pytest.raises(ValueError, match=words):
        agent.safe_extract(evil, tmp_path / "a" / "dest")
    assert not (tmp_path / "x").exists() and not (tmp_path / "a" / "x").exists()


def test_packing_refuses_a_symlinked_directory_out_of_the_tree(tmp_path):
    from podctl.base.errors import BundleError
    from podctl.jobs.bundle import pack

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print(1)")
    (work / "data").symlink_to("../outside")
    with pytest.raises(BundleError, match="leads outside the workdir"):
        pack(work, out_dir=tmp_path / "out")


def test_a_swapped_bundle_in_gcs_is_refused_by_the_agent(podctl, tmp_path):
    """The bundle object is named by its hash; a host unpacks only bytes that match it
    (here the object was replaced by a crafted tarball that climbs out)."""
    from podctl.jobs.bundle import pack
    from podctl.host.run_layout import bundle_object

    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('ran')")
    digest = pack(work, out_dir=tmp_path / "packed").hash
    evil = _tar(tmp_path / "evil.tar.gz", [_member("train.py"), _member("../../../escaped")])
    status = json.loads(podctl("fake", "status", "--json").stdout)
    gcs = Storage.connect(FAKE_BUCKET, endpoint=status["gcs"])
    asyncio.run(gcs.upload_bytes(bundle_object(digest), evil.read_bytes()))
    proc = podctl("run", "sec", str(work / "train.py"), check=False)
    assert proc.returncode != 0
    assert "does not match its hash" in proc.stdout + proc.stderr
    assert "ran" not in proc.stdout and not list(fake_dir(podctl).rglob("escaped"))
