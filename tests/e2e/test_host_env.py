"""The hosts' Python environment on bare fake hosts, through the CLI as a user meets it:
the image's python3 and nothing third-party until podctl installs it; locked and built
on the client (wheels for the hosts' platform), packed once, uploaded once by its hash,
streamed by every host in checked parts, kept for the next run; an archive changed in
the bucket refused before anything in it runs; `--build-on host` (host 0 builds it,
signed) over SSH only; what cannot work refused on the client before any host is asked."""

from __future__ import annotations

import asyncio
import importlib.metadata
import io
import json
import secrets
import tarfile
from pathlib import Path

import pytest

from podctl.fake.storage.gcs import DEFAULT_BUCKET
from podctl.cloud.storage import Storage
from tests.boot_support import run_states
from tests.cli_in_process import podctl_here
from tests.conftest import Podctl, assert_one_line_error, slice_on_daemon

SCRIPT = "import six, sys\nprint('STARTED', six.__version__, sys.executable.endswith('/bin/python3'))\n"
EVIL = "import os; open(os.path.expanduser('~/EVIL'), 'w').write('ran')\n"


@pytest.fixture
def podctl(tmp_path: Path):
    with slice_on_daemon(Podctl(tmp_path), "v5p-16", "bare16") as cli:
        yield cli


def fresh_client_key(cli: Podctl) -> None:
    """A client of its own (not the session's shared key): its hosts trust no archive
    another client built, so this test's environment is built, not fetched."""
    (Path(cli.env["PODCTL_STATE_DIR"]) / "env-signing.key").write_text(secrets.token_hex(32) + "\n")


def fresh_client_cache(cli: Podctl) -> None:
    """A client that packed no environment yet (not the session's shared STATE_DIR/envs)."""
    (Path(cli.env["PODCTL_STATE_DIR"]) / "envs").unlink()


def gcs(cli: Podctl) -> Storage:
    """The fake's bucket, its endpoint asked of `podctl fake status` once per CLI (each
    `podctl` costs about a second of CPU)."""
    if not hasattr(cli, "gcs_url"):
        cli.gcs_url = json.loads(cli("fake", "status", "--json").stdout)["gcs"]  # type: ignore[attr-defined]
    return Storage.connect(DEFAULT_BUCKET, endpoint=cli.gcs_url)  # type: ignore[attr-defined]


def env_objects(store: Storage) -> list[str]:
    return sorted(o.name for o in asyncio.run(store.list("podctl/envs/")))


def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text(SCRIPT)
    (work / "requirements.txt").write_text("six\n")
    return work


def run_id_of(proc) -> str:
    return next(line.split()[2] for line in proc.stderr.splitlines() if line.startswith("podctl: run "))


def test_a_fresh_slice_has_no_six_and_the_env_is_built_on_the_client_fetched_by_every_host_and_kept(
        podctl, tmp_path):
    fresh_client_cache(podctl)
    six = podctl("exec", "bare16", "--hosts", "all", "--", "python3", "-c", "import six", check=False)
    assert six.returncode != 0 and six.stdout.count("No module named 'six'") == 2, six.stdout
    said = podctl("fake", "status").stdout
    assert "hosts' python3: " in said
    # host 1's image lacks Ubuntu's zstd: it unpacks with the zstandard the client ships
    podctl("fake", "inject", "no-zstd", "bare16", "--worker", "1")
    which = podctl("exec", "bare16", "--hosts", "all", "--", "which zstd || echo NO-ZSTD", check=False)
    assert which.stdout.count("NO-ZSTD") == 1 and "[host 0001] NO-ZSTD" in which.stdout, which.stdout

    work = workdir(tmp_path)
    # over SSH: the fault's PATH is a new command's (the watchers booted before it), and the
    # hosts' configs are read below in the SSH login's home
    first = podctl("run", "bare16", "--via", "ssh", "--hosts", "all", str(work / "job.py"), timeout=300)
    out, notes = first.stdout, first.stderr
    assert "packages locked" in out + notes and "Python 3.10" in out + notes
    assert "built here from the package index" in notes and "uploaded to gs://" in notes, notes
    assert out.count("fetched from GCS") == 2 and out.count("sha256 checked") == 2, out
    fetched = {line.split("]")[0]: line for line in out.splitlines() if "fetched from GCS" in line}
    assert "unpacked with zstd)" in fetched["[host 0000"], out
    shipped = importlib.metadata.version("zstandard")  # the client's own, for the hosts' Python
    assert f"unpacked with python-zstandard {shipped} (this host has no zstd)" in fetched["[host 0001"], out
    assert "no package index" in out and "building" not in out
    store = gcs(podctl)
    lock = asyncio.run(store.download_bytes(f"podctl/runs/{run_id_of(first)}/requirements.lock")).decode()
    assert lock.startswith("six==")
    assert out.count("STARTED") == 2 and "True" in out  # the env's python3

    again = podctl("run", "bare16", "--via", "ssh", "--hosts", "all", str(work / "job.py"), timeout=300)
    assert again.stdout.count("already on this host") == 2 and again.stdout.count("STARTED") == 2
    assert "built here" not in again.stderr and "already in gs://" in again.stderr  # packed once, sent once
    # the bucket holds the archive by its hash, no requirements text, no signature, no key;
    # the hosts' configs carry the archive's hashes and no signing key
    objects = env_objects(store)
    assert objects and all(name.endswith(".tar.zst") for name in objects), objects
    configs = podctl("exec", "bare16", "--hosts", "all", "--", "cat", f".podctl/runs/{run_id_of(again)}/config.json")
    # each host's: the archive's and the zstandard's (for a host without zstd) hashes
    assert configs.stdout.count('"sha256"') == 4 and "sign_key" not in configs.stdout

    # through the watchers (launch.json in GCS, its hash pinned in the node's metadata):
    # the same archive, the same checks, and still no key in the bucket
    boot = podctl("run", "bare16", "--via", "boot", "--hosts", "all", str(work / "job.py"), timeout=300)
    assert boot.stdout.count("STARTED") == 2 and "already in gs://" in boot.stderr
    assert boot.stdout.count("sha256 checked") + boot.stdout.count("already on this host") == 2, boot.stdout
    launch = asyncio.run(store.download_bytes(f"podctl/runs/{run_id_of(boot)}/launch.json")).decode()
    assert '"sha256"' in launch and "sign_key" not in launch


def test_an_archive_changed_in_the_bucket_is_refused_before_anything_in_it_runs_then_sent_anew(
        podctl, tmp_path):
    import zstandard

    work = workdir(tmp_path)
    # over SSH until the watchers' part below: `exec` empties the SSH login's cache
    podctl("run", "bare16", "--via", "ssh", str(work / "job.py"), timeout=300)
    store = gcs(podctl)
    archive = next(n for n in env_objects(store) if n.endswith(".tar.zst"))

    # A bucket writer adds a .pth (code that runs at every interpreter start) to the
    # archive; no key on any host or in the bucket lets it make the hosts accept that.
    def tamper() -> None:
        out = io.BytesIO()
        old_bytes = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(asyncio.run(store.download_bytes(archive))))
        with tarfile.open(fileobj=old_bytes, mode="r|") as old, tarfile.open(fileobj=out, mode="w") as new:
            for member in old:
                new.addfile(member, old.extractfile(member) if member.isfile() else None)
            evil = tarfile.TarInfo("lib/python3.10/site-packages/zz_evil.pth")
            evil.size = len(EVIL)
            new.addfile(evil, io.BytesIO(EVIL.encode()))
        asyncio.run(store.upload_bytes(archive, zstandard.ZstdCompressor().compress(out.getvalue())))

    tamper()
    podctl("exec", "bare16", "--hosts", "all", "--", "rm", "-rf", ".podctl/envs")  # fresh hosts

    refused = podctl("run", "bare16", "--via", "ssh", "--hosts", "all", str(work / "job.py"), check=False,
                     timeout=300)
    assert refused.returncode == 125, refused.stderr  # the run's setup failed: not 124, no traceback
    assert "Traceback" not in refused.stdout + refused.stderr and "STARTED" not in refused.stdout
    failed = [line for line in refused.stderr.splitlines() if "failed (" in line]
    assert failed and "refused the environment archive" in failed[0] and "not the client's" in failed[0], \
        refused.stderr
    assert "Error(" not in refused.stderr  # no exception's repr
    left = podctl("exec", "bare16", "--hosts", "all", "--", "test -e EVIL && echo EVIL-RAN; ls -A .podctl/envs")
    assert "EVIL-RAN" not in left.stdout  # the .pth never ran, and nothing half-made is left
    assert all(line.endswith(".lock") for line in left.stdout.splitlines()), left.stdout
    assert archive not in env_objects(store)  # host 0 deleted it ...

    again = podctl("run", "bare16", "--via", "ssh", "--hosts", "all", str(work / "job.py"), timeout=300)
    assert "uploaded to gs://" in again.stderr and again.stdout.count("STARTED") == 2  # ... the client sent it anew

    # Through the watchers (root's runs, root's environment cache: none yet): the archive's
    # sha256 is in launch.json, whose own is in the pointer the client signed; the same refusal
    tamper()
    booted = podctl("run", "bare16", "--via", "boot", "--hosts", "all", str(work / "job.py"), check=False,
                    timeout=300)
    assert booted.returncode == 125 and "STARTED" not in booted.stdout, booted.stderr
    failed = [line for line in booted.stderr.splitlines() if "failed (" in line]
    assert failed and "refused the environment archive" in failed[0], booted.stderr
    hosts = Path(podctl.env["PODCTL_STATE_DIR"]) / "fake" / "hosts"
    assert len(list(hosts.glob("*/*/bare16/host-*/root"))) == 2  # root's homes, where the .pth would write
    assert not list(hosts.glob("*/*/bare16/host-*/root/EVIL")) and not list(hosts.glob("*/*/bare16/host-*/home/*/EVIL"))


def test_build_on_host_builds_once_on_host_0_signed_and_is_refused_through_the_watchers(podctl, tmp_path):
    fresh_client_key(podctl)
    work = workdir(tmp_path)
    boot = podctl("run", "bare16", "--via", "boot", "--build-on", "host", str(work / "job.py"), check=False)
    assert_one_line_error(boot, 2, "--build-on host needs --via ssh")
    first = podctl("run", "bare16", "--hosts", "all", "--build-on", "host", str(work / "job.py"), timeout=300)
    out = first.stdout
    assert out.count("building on host-0000 with uv from the package index") == 1, out
    assert "[host 0001] [podctl] env" in out and "signature checked" in out and "no package index" in out
    assert "+ six==" not in out  # the installer's own log is not the terminal's ...
    build_log = asyncio.run(gcs(podctl).download_bytes(f"podctl/runs/{run_id_of(first)}/env-build.log")).decode()
    assert "six==" in build_log  # ... it is the run's file
    assert out.count("STARTED") == 2 and "True" in out
    store = gcs(podctl)
    for name in env_objects(store):
        if name.endswith(".json"):
            assert set(json.loads(asyncio.run(store.download_bytes(name)))) == {
                "key", "sha256", "size", "built_by", "python", "packages", "jax", "signature"}


@pytest.fixture(scope="module")
def refusing16(tmp_path_factory: pytest.TempPathFactory):
    """One slice for the refusals below: each is said on the client before any host, so
    none needs a slice of its own (each case checks that no run was started on it)."""
    with slice_on_daemon(Podctl(tmp_path_factory.mktemp("refusing16")), "v5p-16", "bare16") as cli:
        yield cli


@pytest.mark.parametrize("requirements, words", [
    ("podctl-no-such-package-zz9==1.0\n", ["podctl-no-such-package-zz9", "cannot be resolved"]),
    ("six\n./vendored/mypkg\n", ["`./vendored/mypkg` is a local path", "the hosts do not have"]),
    ("-r other.txt\n", ["other.txt, which is not a file"]),
    ("antlr4-python3-runtime==4.9.3\n", ["antlr4-python3-runtime has no wheel for the hosts", "--build-on host"]),
])
def test_requirements_that_cannot_work_fail_on_the_client_in_one_line_before_any_host(refusing16, tmp_path,
                                                                                    requirements, words):
    podctl = refusing16
    work = workdir(tmp_path)
    (work / "reqs.txt").write_text(requirements)
    args = ("run", "bare16", "--hosts", "all", "--requirements", str(work / "reqs.txt"), str(work / "job.py"))
    # the first through a `podctl` process as a user runs it, the others through the same
    # command in this process (tests/cli_in_process.py: about a second of CPU less each)
    proc = podctl(*args, check=False, timeout=300) if "no-such-package" in requirements else \
        podctl_here(podctl.tmp, *args, env=podctl.env)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("podctl: error: ")]
    assert len(errors) == 1 and all(w in errors[0] for w in words), proc.stderr
    assert "Traceback" not in proc.stderr and "STARTED" not in proc.stdout and "[host" not in proc.stdout
    assert run_states(podctl) == {}  # nothing started on the shared slice (the runs' records in GCS)
