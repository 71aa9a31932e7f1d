"""podctl.jobs.bundle: deterministic packing, ignore rules, symlinks, safe unpacking, upload once."""

from __future__ import annotations

import asyncio
import builtins
import gzip
import hashlib
import io
import os
import shutil
import socket
import subprocess
import tarfile
from pathlib import Path
from typing import Iterator

import pytest

from podctl.base.errors import BundleError
from podctl.jobs import bundle
from podctl.host import run_layout
from podctl.jobs.bundle import WARN_BYTES, pack, safe_extract
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import RetryPolicy, Storage
from tests.unit.test_bundle import SOURCES, _names, _tree  # noqa: F401


# ---- determinism -------------------------------------------------------------------------


# ---- what goes in ---------------------------------------------------------------------------


def test_agrees_with_git(tmp_path):
    """The same tree through `git ls-files --others --exclude-standard` and through pack."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    root = _tree(tmp_path / "w", {
        "t.py": "", "a.log": "", "keep.log": "", "build/o": "", "src/build": "", "d/x/y.bin": "",
        "d/keep": "", "c/a": "", "c/b": "", "n/m/z/q.log": "", "n/m/r.log": "",
        ".gitignore": "*.log\n!keep.log\nbuild/\nd/\n!d/keep\nc/*\n!c/b\n",
        "n/m/.gitignore": "!q.log\nz/\n!z/\n"})
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run([git, "init", "-q", str(root)], check=True, env=env)
    listed = subprocess.run([git, "-C", str(root), "ls-files", "--others", "--exclude-standard"],
                            check=True, env=env, capture_output=True, text=True).stdout.split()
    assert sorted(_names(pack(root, out_dir=tmp_path / "o"))) == sorted(listed)


# ---- symlinks ------------------------------------------------------------------------------


# ---- safe_extract ----------------------------------------------------------------------------


# ---- upload once, against the GCS emulator ------------------------------------------------

@pytest.fixture(scope="session")
def emulator_url() -> Iterator[str]:
    from gcp_storage_emulator.server import create_server

    with socket.socket() as sock:  # create_server does not tell the port it bound to
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=FAKE_BUCKET)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_upload_once_and_round_trip(tmp_path, emulator_url):
    root = _tree(tmp_path / "w", SOURCES)
    os.chmod(root / "run.sh", 0o755)
    storage = Storage.connect(FAKE_BUCKET, endpoint=emulator_url,
                              retry=RetryPolicy(attempts=2, initial=0.01, maximum=0.02, jitter=0.01))
    b = pack(root, out_dir=tmp_path / "o")
    assert asyncio.run(bundle.upload(storage, b)) is True
    again = pack(root, out_dir=tmp_path / "o2")
    assert asyncio.run(bundle.upload(storage, again)) is False
    assert storage.calls["upload"] == 1 and storage.calls["exists"] == 2
    name = run_layout.bundle_object(b.hash)
    assert name == f"podctl/bundles/{b.hash}.tar.gz"
    fetched = tmp_path / "fetched.tar.gz"
    asyncio.run(storage.download_file(name, fetched))
    assert fetched.read_bytes() == b.path.read_bytes()
    safe_extract(fetched, tmp_path / "host")
    for rel, content in SOURCES.items():
        assert (tmp_path / "host" / rel).read_text() == content
    assert os.access(tmp_path / "host/run.sh", os.X_OK)
