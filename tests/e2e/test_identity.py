"""Identity as on Google: the fake GCS wants a token and checks its scopes and its
account's rights (podctl/fake/storage/gcs_auth.py, iam.py); `podctl run` asks worker 0 first
whether the nodes can use the bucket, and ends at once, in one line, when they cannot
(podctl/jobs/identity.py)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import tpu_v2

from podctl.fake.storage.gcs import DEFAULT_BUCKET
from podctl.cloud.storage import fake_grant
from podctl.jobs import identity
from podctl.base.settings import FAKE_USER_TOKEN
from podctl.fake.admin.admin_client import FakeAdmin
from tests.boot_support import run_states
from tests.conftest import PARENT, Podctl, _share_env_signing_key, assert_one_line_error, stop_fake_and_check
from tests.e2e.test_fake_hosts import RUNTIME

SCOPE = "https://www.googleapis.com/auth/"
SCRIPTS = Path(__file__).parents[1] / "scripts"
SA = "sa@fake-project.iam.gserviceaccount.com"


def call(url: str, token: str | None, method: str = "GET", data: bytes | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers),
                                    timeout=30) as r:
            body = r.read()
            return r.status, json.loads(body) if body else {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def gcs_error(code: int, message: str, reason: str) -> dict:
    return {"error": {"code": code, "errors": [{"domain": "global", "message": message, "reason": reason}],
                      "message": message}}


def test_gcs_wants_a_token_and_checks_scopes_and_roles(fake):
    obj = f"{fake.gcs_url}/storage/v1/b/{DEFAULT_BUCKET}/o/x"
    upload = f"{fake.gcs_url}/upload/storage/v1/b/{DEFAULT_BUCKET}/o?uploadType=media&name=x"
    denied = ("does not have storage.objects.{p} access to the Google Cloud Storage object. "
              "Permission 'storage.objects.{p}' denied on resource (or it may not exist).")
    assert call(obj, None) == (401, gcs_error(401, "Anonymous caller " + denied.format(p="get"), "required"))
    assert call(obj, "ya29.made-up") == (401, gcs_error(401, "Invalid Credentials", "authError"))
    assert call(upload, FAKE_USER_TOKEN, "POST", b"1")[0] == 200  # the user owns the project
    reader = fake.cloud.tokens.mint(SA, [SCOPE + "devstorage.read_only"])
    fake.admin.set_iam(member=f"serviceAccount:{SA}", role="roles/storage.objectAdmin")
    assert call(obj, reader)[0] == 200  # reads are in its scope
    assert call(upload, reader, "POST", b"2") == (
        403, gcs_error(403, "Provided scope(s) are not authorized", "forbidden"))
    writer = fake.cloud.tokens.mint(SA, [SCOPE + "cloud-platform"])
    assert call(upload, writer, "POST", b"3")[0] == 200
    fake.admin.set_iam(member=f"serviceAccount:{SA}", role="roles/storage.objectAdmin", remove=True)
    assert call(upload, writer, "POST", b"4") == (
        403, gcs_error(403, f"{SA} " + denied.format(p="create"), "forbidden"))
    # the default compute account: an editor unless the project is secure-by-default
    compute = fake.cloud.tokens.mint("123-compute@developer.gserviceaccount.com", [SCOPE + "cloud-platform"])
    assert call(obj, compute)[0] == 200
    fake.admin.set_iam(secure=True)
    assert call(obj, compute)[0] == 403


def test_the_refusal_names_the_account_what_is_missing_and_the_fix():
    no_scope = identity.NodeAccess(email="1-compute@developer.gserviceaccount.com",
                                   scopes=(SCOPE + "logging.write",), refused="write", status=403,
                                   message="Provided scope(s) are not authorized")
    line = identity.refusal(no_scope, bucket="b", slice_name="s", slice_type="v5p-8")
    assert line is not None and "\n" not in line
    assert "1-compute@developer.gserviceaccount.com" in line and "scopes: logging.write" in line
    assert "podctl up --slice v5p-8 --name s --scopes cloud-platform" in line and "still up" in line
    no_role = identity.NodeAccess(email=SA, scopes=(SCOPE + "cloud-platform",), refused="write",
                                  status=403, message=f"{SA} does not have ... Permission "
                                  "'storage.objects.create' denied on resource (or it may not exist).")
    line = identity.refusal(no_role, bucket="b", slice_name="s", slice_type="v5p-8")
    assert line is not None and "storage.objects.create denied" in line
    assert (f"gcloud storage buckets add-iam-policy-binding gs://b --member=serviceAccount:{SA} "
            "--role=roles/storage.objectAdmin") in line
    assert "roles/storage.legacyBucketReader" in line  # orbax's saves read the bucket
    no_bucket = identity.NodeAccess(email=SA, scopes=(SCOPE + "cloud-platform",), refused="bucket",
                                    status=403, message=f"{SA} does not have storage.buckets.get access")
    line = identity.refusal(no_bucket, bucket="b", slice_name="s", slice_type="v5p-8")
    assert line is not None and "storage.buckets.get denied" in line and "orbax" in line
    assert line.count("add-iam-policy-binding") == 1 and "--role=roles/storage.legacyBucketReader" in line
    outage = identity.NodeAccess(email=SA, scopes=(), refused="write", status=503, message="Backend Error")
    assert identity.refusal(outage, bucket="b", slice_name="s", slice_type="v5p-8") is None


def test_a_refusal_without_gcs_naming_the_permission_names_the_calls_own():
    def refused(step):
        return identity.NodeAccess(email=SA, scopes=(), refused=step, status=403, message="Forbidden")

    assert [refused(s).permission for s in ("write", "read", "delete", "bucket")] == [
        "storage.objects.create", "storage.objects.get", "storage.objects.delete", "storage.buckets.get"]


def test_on_the_fake_the_refusal_names_podctl_fake_grant_and_can_leave_the_slice_out():
    """gcloud cannot reach the fake's bucket: the fix there is `podctl fake grant`; a
    caller that deletes the slice (the queue, the demo) gets the line without "still up"."""
    no_role = identity.NodeAccess(email=SA, scopes=(SCOPE + "cloud-platform",), refused="write",
                                  status=403, message="Permission 'storage.objects.create' denied")
    line = identity.refusal(no_role, bucket="podctl-fake", slice_name="s", slice_type="v5p-8",
                            grant=fake_grant)
    assert line is not None and "gcloud" not in line
    assert (f"`podctl fake grant serviceAccount:{SA} roles/storage.objectAdmin && "
            f"podctl fake grant serviceAccount:{SA} roles/storage.legacyBucketReader`") in line
    other = identity.refusal(no_role, bucket="mine", slice_name="s", slice_type="v5p-8", grant=fake_grant)
    assert other is not None and f"podctl fake grant serviceAccount:{SA} --bucket mine roles/" in other
    bare = identity.refusal(no_role, bucket="b", slice_name="s", slice_type="v5p-8", slice_kept=False)
    assert bare is not None and "still up" not in bare and "podctl down" not in bare
    assert bare.endswith("then run again.")


def _script(tmp: Path) -> Path:
    """A script in a workdir of its own (TMP's state/ is the test's, not a shared daemon's
    client's, so a run from TMP would bundle it)."""
    (tmp / "work").mkdir(exist_ok=True)
    script = tmp / "work" / "hello.py"
    script.write_text("print('hello from', __import__('os').environ['PODCTL_PROCESS_ID'])\n")
    return script


def test_a_node_without_a_storage_scope_fails_the_run_fast_naming_the_scope(tmp_path):
    cli = Podctl(tmp_path)
    cli.env["PODCTL_BACKEND"] = "fake"
    try:
        cli("up", "--slice", "v5p-8", "--name", "noscope", "--scopes", "logging.write")
        began = time.monotonic()
        proc = cli("run", "noscope", str(_script(tmp_path)), check=False, timeout=90)
        assert time.monotonic() - began < 90
        assert_one_line_error(proc, 1, "storage scope", "logging.write", "--scopes cloud-platform",
                              "-compute@developer.gserviceaccount.com", "still up")
        assert "hello from" not in proc.stdout  # nothing started
    finally:
        cli("down", "noscope", "--yes", check=False)
        stop_fake_and_check(cli)


def test_fake_start_not_secure_sets_a_secure_fake_back_as_older_organisations(tmp_path):
    """`podctl fake start --not-secure` (and PODCTL_FAKE_SECURE=0), which the refusals
    advise, start the daemon: it was handed `--not-secure`, which it did not know."""
    cli = Podctl(tmp_path)
    try:
        assert json.loads(cli("fake", "start", "--secure", "--json").stdout)["secure"] is True
        cli("fake", "stop")
        assert json.loads(cli("fake", "start", "--not-secure", "--json").stdout)["secure"] is False
        cli("fake", "stop")
        started = cli("fake", "start", "--json", env={"PODCTL_FAKE_SECURE": "0"})
        assert json.loads(started.stdout)["secure"] is False
        cli("fake", "stop")
        # Any case of a "no" word is off (`False` once read as on), and a word that is
        # neither is refused in one line before any daemon starts.
        started = cli("fake", "start", "--json", env={"PODCTL_FAKE_SECURE": "False"})
        assert json.loads(started.stdout)["secure"] is False
        cli("fake", "stop")
        refused = cli("fake", "start", check=False, env={"PODCTL_FAKE_SECURE": "maybe"})
        assert_one_line_error(refused, 2, "PODCTL_FAKE_SECURE='maybe'", "use 1, true, yes or on")
        assert cli("fake", "status", check=False).returncode == 3  # none started
    finally:
        stop_fake_and_check(cli)


@pytest.fixture(scope="module")
def _secure_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One secure-by-default fake daemon (`podctl fake start --secure`) for the three cases
    below that each started their own (about 3 s of CPU per daemon started and stopped):
    each makes and deletes its own slice, and starts with no grant (`secure`)."""
    tmp = tmp_path_factory.mktemp("secure")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    cli = Podctl(tmp)
    cli.env["PODCTL_BACKEND"] = "fake"
    try:
        started = json.loads(cli("fake", "start", "--secure", "--json").stdout)
        assert started["secure"] is True
        cli.admin = FakeAdmin(started["admin"])  # type: ignore[attr-defined]
        yield cli
    finally:
        stop_fake_and_check(cli)


@pytest.fixture
def secure(_secure_daemon: Podctl) -> Iterator[Podctl]:
    """The shared secure daemon as a case's own: holding nothing, no role granted to
    anyone (a case before may have granted the nodes' account both), and at the end
    holding nothing billable again (the case deleted its slice)."""
    admin: FakeAdmin = _secure_daemon.admin  # type: ignore[attr-defined]
    assert admin.is_empty()
    policy = admin.set_iam()["iam"]
    assert policy["secure"] is True
    for bucket, roles in policy.get("buckets", {}).items():
        for role, members in roles.items():
            for member in list(members):
                admin.set_iam(bucket=bucket, member=member, role=role, remove=True)
    yield _secure_daemon
    leftover = admin.resources()
    assert not any(leftover.values()), f"the test left billable resources: {leftover}"


def _on_host(cli: Podctl, name: str, run_dir: str, file: str) -> Path:
    """FILE of an SSH run's directory on NAME's host 0, on the fake host's own disk: a look
    that costs no `podctl exec` process (about a second of CPU each, in a poll)."""
    hosts = Path(cli.env["PODCTL_STATE_DIR"]) / "fake" / "hosts"
    found = list(hosts.glob(f"*/*/{name}/host-0000/home/*/{run_dir}/{file}"))
    return found[0] if found else hosts / "absent"


def test_through_the_watchers_a_secure_project_fails_the_run_with_the_same_line_as_over_ssh(secure, tmp_path):
    """`run --via boot` with SSH closed: the first node's worker 0's watcher asks GCS as
    worker 0 does over SSH (before it says `ready`, and every beat while denied: its
    podctl/roles), and the run fails in the same one line (the account, the role, the
    fix) before anything is uploaded or patched: no run is made; a grant is seen by the
    next run at once, and the run goes."""

    def refused(proc, *words: str) -> None:
        assert_one_line_error(proc, 1, *words)

    cli = secure
    runs_before = run_states(cli)  # the shared daemon's bucket: the cases' before this one
    try:
        cli("up", "--slice", "v5p-8", "--name", "bsecure")
        cli("fake", "inject", "no-ssh", "bsecure")
        script = _script(tmp_path)
        proc = cli("run", "bsecure", "--via", "boot", str(script), check=False, timeout=90)
        refused(proc, "roles/storage.objectAdmin", "storage.objects.create denied",
                "podctl fake grant serviceAccount:", "still up")
        member = "serviceAccount:" + proc.stderr.split("podctl fake grant serviceAccount:")[1].split()[0]
        cli("fake", "grant", member, "roles/storage.objectAdmin")
        proc = cli("run", "bsecure", "--via", "boot", str(script), check=False, timeout=90)
        refused(proc, "storage.buckets.get denied", "roles/storage.legacyBucketReader")
        # the refused made no run: no record, nothing on the hosts
        assert {r["run_id"] for r in cli.json("runs")} == set(runs_before)
        cli("fake", "grant", member, "roles/storage.legacyBucketReader")
        done = cli("run", "bsecure", "--via", "boot", str(script), check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "hello from 0" in done.stdout and "via boot" in done.stderr
    finally:
        cli("down", "bsecure", "--yes", check=False)


def test_a_secure_by_default_project_fails_the_run_naming_the_role_until_granted(secure, tmp_path):
    cli = secure  # started with --secure (its fixture checks that the daemon said so)
    try:
        cli("up", "--slice", "v5p-8", "--name", "secure")
        script = _script(tmp_path)
        began = time.monotonic()
        proc = cli("run", "secure", str(script), check=False, timeout=90)
        assert time.monotonic() - began < 90
        assert_one_line_error(proc, 1, "roles/storage.objectAdmin", "storage.objects.create denied",
                              "podctl fake grant serviceAccount:", "still up")
        member = "serviceAccount:" + proc.stderr.split("podctl fake grant serviceAccount:")[1].split()[0]
        cli("fake", "grant", member, "roles/storage.objectAdmin")  # as the line says
        # objects, but not the bucket's metadata: orbax's first checkpoint would fail with 403
        proc = cli("run", "secure", str(script), check=False, timeout=90)
        assert_one_line_error(proc, 1, "storage.buckets.get denied", "roles/storage.legacyBucketReader")
        cli("fake", "grant", member, "roles/storage.legacyBucketReader")
        done = cli("run", "secure", str(script), check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "hello from 0" in done.stdout
        # The role taken away mid-run: the agent stops its script and says why, on the host
        # (its status cannot reach GCS any more); read it over SSH (so started over SSH: the
        # watchers' runs live in the boot user's home).
        run_id = cli("run", "secure", "--detach", "--via", "ssh", str(SCRIPTS / "ticker.py"), "600",
                     "0.1").stdout.strip()
        on_host = f".podctl/runs/{run_id}"
        deadline = time.monotonic() + 60
        while not _on_host(cli, "secure", on_host, "output.log").exists() or \
                "tick 3 " not in _on_host(cli, "secure", on_host, "output.log").read_text(errors="replace"):
            assert time.monotonic() < deadline, "the script never ticked"
            time.sleep(0.5)
        cli("fake", "grant", member, "roles/storage.objectAdmin", "--revoke")
        deadline, status = time.monotonic() + 60, None
        while status is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):  # not there yet, or half-written
                status = json.loads(_on_host(cli, "secure", on_host, "status.json").read_text())
            time.sleep(0.5)
        assert status is not None, "the agent never ended"
        assert status["error"].startswith("GCS refused the host's account") and "403" in status["error"]
        assert status["exit_code"] == 143  # its script got SIGTERM
        # Attached, the run's owner hears the refusal itself (not "stopped sending
        # heartbeats"): the same line as at the start, naming the account and the fix. The
        # default channel here is the watchers: the agent says it in podctl/access.
        cli("fake", "grant", member, "roles/storage.objectAdmin")
        attached = subprocess.Popen([sys.executable, "-m", "podctl", "run", "secure", str(SCRIPTS / "ticker.py"),
                                     "600", "0.1"], env=cli.env, cwd=cli.tmp, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert attached.stdout is not None
            for line in attached.stdout:
                if "tick 3 " in line:
                    break
            cli("fake", "grant", member, "roles/storage.objectAdmin", "--revoke")
            out, err = attached.communicate(timeout=120)
        finally:
            attached.kill()
            attached.wait()
        ended = err.strip().splitlines()[-1]  # after the run's own notices (bundle, started)
        assert attached.returncode == 1 and "Traceback" not in err and err.count("error:") == 1, err
        for words in (f"podctl: error: the nodes' service account {member.split(':')[1]}",
                      "storage.objects.create denied", f"podctl fake grant {member} roles/storage.objectAdmin",
                      "still up"):
            assert words in ended, err
        assert "stopped sending heartbeats" not in err
    finally:
        cli("down", "secure", "--yes", check=False)


def test_a_bucket_that_does_not_exist_is_said_so_not_blamed_on_the_nodes_roles(secure, tmp_path):
    """The nodes get 403 for a bucket that does not exist as for one they may not use:
    a mistyped --bucket is told as missing (as the user sees it), not as roles to grant."""
    cli = secure
    try:
        cli("up", "--slice", "v5p-8", "--name", "typo")
        proc = cli("run", "typo", "--bucket", "no-such-bucket", str(_script(tmp_path)), check=False,
                   timeout=90)
        assert_one_line_error(proc, 1, "gs://no-such-bucket does not exist")
        assert "roles/" not in proc.stderr
    finally:
        cli("down", "typo", "--yes", check=False)


def test_a_refusal_mid_run_is_not_waited_out_as_an_outage(tmp_path):
    """GCS's 403 to the host's account stays: the agent's shipper gives up at once and
    remembers why (the agent then stops the script and says so in its status)."""
    from podctl.host.agent_gcs import GcsError
    from podctl.host.agent_logs import LogShipper

    class Bucket:  # agent_gcs.Bucket's upload, refused as GCS refuses a role taken away
        calls = 0

        def upload(self, name, data, content_type=None):
            self.calls += 1
            raise GcsError(f"GCS POST {name}: HTTP 403 {{...forbidden...}}", 403)

    bucket = Bucket()
    shipper = LogShipper({"run_id": "r", "host": 0, "flush_seconds": 3600,
                          "ship_patience_seconds": 600}, bucket, tmp_path)
    shipper.line("a")
    began = time.monotonic()
    assert not shipper.persist(lambda: shipper.flush(attempts=6))
    assert time.monotonic() - began < 5 and bucket.calls == 1
    assert "HTTP 403" in shipper.refused
    shipper.local.close()


def test_lines_a_refusal_kept_from_gcs_are_said_refused_not_waited_for_hours(tmp_path, capsys):
    """The agent's last word on lines GCS refused names the refusal, not the 6-hour
    patience it never spent."""
    from podctl.host.agent_gcs import GcsError
    from podctl.host.agent_logs import LogShipper

    class Bucket:
        def upload(self, name, data, content_type=None):
            raise GcsError(f"GCS POST {name}: HTTP 403 {{...forbidden...}}", 403)

    shipper = LogShipper({"run_id": "r", "host": 0, "flush_seconds": 3600,
                          "ship_patience_seconds": 21600}, Bucket(), tmp_path)
    shipper.start()
    shipper.line("a")
    began = time.monotonic()
    assert not shipper.close()
    assert time.monotonic() - began < 10
    said = capsys.readouterr().err
    assert "GCS refused this host's account" in said and "HTTP 403" in said
    assert "21600" not in said


_LIBRARIES = r"""
import gcsfs, tensorstore as ts
fs = gcsfs.GCSFileSystem()  # its default token: google-auth's, from the metadata server
fs.pipe("podctl-fake/lib/gcsfs", b"g")
assert fs.cat("podctl-fake/lib/gcsfs") == b"g"
kv = ts.KvStore.open({"driver": "gcs", "bucket": "podctl-fake", "path": "lib/"}).result()
kv.write("ts", b"t").result()
assert kv.read("ts").result().value == b"t"
from google.cloud import storage
client = storage.Client()  # as orbax looks its bucket up: the node's ADC, not anonymous
client.get_bucket("podctl-fake").blob("lib/gcs").upload_from_string(b"s")
print("ok")
"""


def test_the_templates_gcs_libraries_take_the_nodes_token(fake, api, tmp_path):
    """orbax's libraries on a fake host (gcsfs, tensorstore, google-cloud-storage) find
    the node's token as on a TPU VM, through the host's metadata server; run here with a
    host's environment (its sitecustomize too)."""
    pytest.importorskip("gcsfs")
    pytest.importorskip("tensorstore")
    node = api.client.create_node(parent=PARENT, node_id="libs", node=tpu_v2.Node(
        accelerator_type="v5p-8", runtime_version=RUNTIME)).result(timeout=30)
    try:
        host = fake.cloud.hosts.nodes[node.name].hosts[0]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GOOGLE_", "GCE_")) and k != "NO_GCE_CHECK"}
        env.update({"STORAGE_EMULATOR_HOST": fake.gcs_url, "TENSORSTORE_GCS_HTTP_URL": fake.gcs_url,
                    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "PODCTL_FAKE_HOST": "1",
                    "PYTHONPATH": str(Path(identity.__file__).parents[1] / "fake" / "vm" / "tpu_vm"), **{
                        f"GCE_METADATA_{k}": host.metadata_host for k in ("HOST", "IP", "ROOT")}})
        done = subprocess.run([sys.executable, "-c", _LIBRARIES], env=env, capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert done.stdout.strip() == "ok", done.stderr[-2000:]
    finally:
        api.client.delete_node(name=node.name).result(timeout=30)
