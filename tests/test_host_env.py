"""The hosts' Python environment on bare fake hosts, through the CLI as a user meets it:
the image's python3 and nothing third-party until podctl installs it; locked on the
client, built once by one host with uv, fetched from GCS by the other only with the
client's signature; kept for the next run; a tampered archive refused; what cannot
work refused on the client before any host is asked."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import secrets
import tarfile
from pathlib import Path

import pytest

from podctl.fake.gcs import DEFAULT_BUCKET
from podctl.storage import Storage
from tests.conftest import Podctl, slice_on_daemon

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


def gcs(cli: Podctl) -> Storage:
    status = json.loads(cli("fake", "status", "--json").stdout)
    return Storage.connect(DEFAULT_BUCKET, endpoint=status["gcs"])


def env_objects(store: Storage) -> list[str]:
    return sorted(o.name for o in asyncio.run(store.list("podctl/envs/")))


def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text(SCRIPT)
    (work / "requirements.txt").write_text("six\n")
    return work


def test_a_fresh_slice_has_no_six_and_the_env_is_built_once_with_uv_then_shipped_signed_and_kept(
        podctl, tmp_path):
    fresh_client_key(podctl)
    six = podctl("exec", "bare16", "--hosts", "all", "--", "python3", "-c", "import six", check=False)
    assert six.returncode != 0 and six.stdout.count("No module named 'six'") == 2, six.stdout
    said = podctl("fake", "status").stdout
    assert "hosts' python3: " in said

    work = workdir(tmp_path)
    first = podctl("run", "bare16", "--hosts", "all", str(work / "job.py"), timeout=300)
    out, notes = first.stdout, first.stderr
    assert "packages locked" in out + notes and "Python 3.10" in out + notes
    assert out.count("building on host-0000 with uv from the package index") == 1, out
    assert out.count("built on host-0000 with uv") == 1
    assert "[host 0001] [podctl] env" in out and "signature checked" in out and "no package index" in out
    assert "+ six==" not in out  # the installer's own log is not the terminal's ...
    store = gcs(podctl)
    run_id = next(line.split()[2] for line in notes.splitlines() if line.startswith("podctl: run "))
    build_log = asyncio.run(store.download_bytes(f"podctl/runs/{run_id}/env-build.log")).decode()
    assert "six==" in build_log  # ... it is the run's file
    lock = asyncio.run(store.download_bytes(f"podctl/runs/{run_id}/requirements.lock")).decode()
    assert lock.startswith("six==")
    assert out.count("STARTED") == 2 and "True" in out  # the env's python3

    again = podctl("run", "bare16", "--hosts", "all", str(work / "job.py"), timeout=300)
    assert "building" not in again.stdout and again.stdout.count("already on this host") == 2
    assert again.stdout.count("STARTED") == 2
    # no requirements text (nor any index credential) in the bucket's environment objects
    for name in env_objects(store):
        if name.endswith(".json"):
            assert set(json.loads(asyncio.run(store.download_bytes(name)))) == {
                "key", "sha256", "size", "built_by", "python", "packages", "jax", "signature"}


def test_a_tampered_environment_archive_is_refused_in_one_line_deleted_and_then_built_anew(podctl, tmp_path):
    fresh_client_key(podctl)
    work = workdir(tmp_path)
    podctl("run", "bare16", str(work / "job.py"), timeout=300)
    store = gcs(podctl)
    archive = next(n for n in env_objects(store) if n.endswith(".tar.gz"))
    sidecar = archive.removesuffix(".tar.gz") + ".json"

    # A bucket writer adds a .pth (code that runs at every interpreter start) and
    # updates the archive's hash in its .json: contents and json changed together.
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(asyncio.run(store.download_bytes(archive)))),
                      mode="r:") as old, tarfile.open(fileobj=out, mode="w:gz") as new:
        for member in old:
            new.addfile(member, old.extractfile(member) if member.isfile() else None)
        evil = tarfile.TarInfo("site-packages/zz_evil.pth")
        evil.size = len(EVIL)
        new.addfile(evil, io.BytesIO(EVIL.encode()))
    tampered = out.getvalue()
    meta = json.loads(asyncio.run(store.download_bytes(sidecar)))
    meta.update(sha256=hashlib.sha256(tampered).hexdigest(), size=len(tampered))
    asyncio.run(store.upload_bytes(archive, tampered))
    asyncio.run(store.upload_bytes(sidecar, json.dumps(meta).encode()))
    podctl("exec", "bare16", "--hosts", "all", "--", "rm", "-rf", ".podctl/envs")  # fresh hosts

    refused = podctl("run", "bare16", "--hosts", "all", str(work / "job.py"), check=False, timeout=300)
    assert refused.returncode == 125, refused.stderr  # the run's setup failed: not 124, no traceback
    assert "Traceback" not in refused.stdout + refused.stderr and "STARTED" not in refused.stdout
    failed = [line for line in refused.stderr.splitlines() if "failed (" in line]
    assert failed and "refused the environment archive" in failed[0] and "signature" in failed[0], refused.stderr
    assert "Error(" not in refused.stderr  # no exception's repr
    left = podctl("exec", "bare16", "--hosts", "all", "--", "test -e EVIL && echo EVIL-RAN; ls .podctl/envs")
    assert "EVIL-RAN" not in left.stdout  # the .pth never ran, and nothing half-made is left
    assert all(line.endswith(".lock") for line in left.stdout.splitlines()), left.stdout
    assert archive not in env_objects(store) and sidecar not in env_objects(store)  # ... and it is gone

    rebuilt = podctl("run", "bare16", "--hosts", "all", str(work / "job.py"), timeout=300)
    assert "built on host-0000 with uv" in rebuilt.stdout and rebuilt.stdout.count("STARTED") == 2


@pytest.mark.parametrize("requirements, words", [
    ("podctl-no-such-package-zz9==1.0\n", ["podctl-no-such-package-zz9", "cannot be resolved"]),
    ("six\n./vendored/mypkg\n", ["`./vendored/mypkg` is a local path", "the hosts do not have"]),
    ("-r other.txt\n", ["other.txt, which is not a file"]),
])
def test_requirements_that_cannot_work_fail_on_the_client_in_one_line_before_any_host(podctl, tmp_path,
                                                                                    requirements, words):
    work = workdir(tmp_path)
    (work / "reqs.txt").write_text(requirements)
    proc = podctl("run", "bare16", "--hosts", "all", "--requirements", str(work / "reqs.txt"),
                  str(work / "job.py"), check=False, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("podctl: error: ")]
    assert len(errors) == 1 and all(w in errors[0] for w in words), proc.stderr
    assert "Traceback" not in proc.stderr and "STARTED" not in proc.stdout and "[host" not in proc.stdout
