"""The hosts' environment built on the client (podctl/jobs/env_build.py) and a host's
copy of it (podctl/host/agent_env_fetch.py), below the CLI: a real client's CPython for
the hosts comes from uv's python-build-standalone downloads (here a local HTTP server
that uv reads its download list from, as UV_PYTHON_DOWNLOADS_JSON_URL lets a company
mirror do); the archive is packed once, its parts checked on the host before tar sees
them, and the venv made by hand. The hosts' GCS side is in tests/test_host_env.py."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from podctl.host import agent_env, agent_env_fetch
from podctl.jobs import env_build, env_lock
from podctl.base.pythons import find

LOCK = "six==1.17.0\n"


class FileBucket:
    """An object's bytes by range, as agent_gcs.Bucket.read_range gives them (GCS's side
    is tests/test_host_env.py's); counts the reads."""

    name = "local"

    def __init__(self, path: Path):
        self.path, self.reads, self.deleted = path, 0, []

    def read_range(self, name: str, start: int, end: int) -> bytes:
        self.reads += 1
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start + 1)

    def delete(self, name: str) -> None:
        self.deleted.append(name)


@pytest.fixture
def python312() -> str:
    found = find("3.12")
    if found is None:
        pytest.skip("no CPython 3.12 on this machine to stand in for python-build-standalone's")
    return found[0]


@pytest.fixture
def downloads(tmp_path: Path, python312: str, monkeypatch: pytest.MonkeyPatch):
    """A python-build-standalone-shaped CPython 3.12 (its interpreter a wrapper around this
    machine's, marking its runs) served by a local HTTP server, with uv's download list."""
    served = tmp_path / "served"
    served.mkdir()
    sysconfigdata = subprocess.run(
        [python312, "-c", "import sysconfig, importlib.util; print(importlib.util.find_spec("
         "sysconfig._get_sysconfigdata_name()).origin)"], capture_output=True, text=True, check=True).stdout.strip()
    tarball = served / "cpython-3.12.99+20990101-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        add("python/bin/python3.12", f"#!/bin/sh\nPODCTL_SHIPPED_PYTHON=1 exec {python312} \"$@\"\n".encode(), 0o755)
        add(f"python/lib/python3.12/{Path(sysconfigdata).name}", Path(sysconfigdata).read_bytes())
        add("python/lib/python3.12/os.py", b"")
    sha = hashlib.sha256(tarball.read_bytes()).hexdigest()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    (served / "downloads.json").write_text(json.dumps({"cpython-3.12.99-linux-x86_64-gnu": {
        "name": "cpython", "arch": {"family": "x86_64", "variant": None}, "os": "linux", "libc": "gnu",
        "major": 3, "minor": 12, "patch": 99, "prerelease": "", "variant": None, "build": "20990101",
        "url": f"{base}/cpython-3.12.99%2B20990101-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz",
        "sha256": sha}}))
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", f"{base}/downloads.json")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    yield served
    server.shutdown()
    server.server_close()


def test_a_real_clients_archive_carries_uvs_cpython_and_a_host_runs_it_without_a_venv_module(
        tmp_path, downloads):
    plan = env_lock.EnvPlan(key="a" * 32, python="3.12", lock=LOCK)
    notes: list[str] = []
    built = env_build.build(plan, ship_python=True, cache=tmp_path / "envs", notice=notes.append)
    assert built.python_inside and built.seconds > 0 and "CPython cpython-3.12.99" in notes[0]
    config = built.host_config(plan, "podctl/envs/x.tar.zst")
    assert config["interpreter"] == "archive" and "sign_key" not in config
    assert config["archive"]["sha256"] == hashlib.sha256(built.path.read_bytes()).hexdigest()
    # packed once: a second run of the same lock packs nothing and downloads nothing
    assert env_build.build(plan, ship_python=True, cache=tmp_path / "envs").seconds == 0

    bucket = FileBucket(built.path)
    logs: list[str] = []
    env = agent_env.ClientBuiltEnv(bucket, config, home=tmp_path / "host", host="host-0001", log=logs.append)
    venv = env.prepare()
    assert os.readlink(venv / "bin" / "python") == "../python/bin/python3.12"  # the archive's own
    assert f"home = {venv / 'python' / 'bin'}" in (venv / "pyvenv.cfg").read_text()
    marker = "import os; print(os.environ.get('PODCTL_SHIPPED_PYTHON'))"
    ran = subprocess.run([str(venv / "bin" / "python3"), "-c", marker], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert ran.stdout.strip() == "1", ran.stderr  # the shipped interpreter runs the env's python3
    assert (venv / "lib" / "python3.12" / "site-packages" / "six.py").is_file()
    _compiled_once_on_the_client(venv / "lib" / "python3.12" / "site-packages")
    assert "in the archive" in logs[-1] and "no package index" in logs[-1]
    assert env.prepare() == venv and logs[-1].endswith("already on this host")


def _compiled_once_on_the_client(site: Path) -> None:
    """The archive carries the packages' bytecode for the hosts' Python (env_build.compile_bytecode),
    hash-based and unchecked (flags 0b01: PEP 552), so no host compiles or stats a source again."""
    pyc = site / "__pycache__" / "six.cpython-312.pyc"
    assert pyc.is_file(), sorted(p.name for p in site.iterdir())
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01


def test_the_client_compiles_the_bytecode_with_a_python_of_the_hosts_version(tmp_path, python312):
    """Without a CPython in the archive (the fake), this machine's of the plan's version compiles."""
    tree = tmp_path / "tree"
    site = tree / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    (site / "six.py").write_text("X = 1\n")
    (site / "broken.py").write_text("def (:\n")  # left without, as pip leaves it
    for suite in ("six/tests", "six/test", "six/tests/deep"):  # a package's test suite: never imported
        (site / suite).mkdir(parents=True, exist_ok=True)
        (site / suite / "test_six.py").write_text("X = 1\n")
    (site / "six" / "testing.py").write_text("X = 1\n")  # numpy.testing and the like: imported
    assert env_build.compile_bytecode(tree, "3.12", None)
    _compiled_once_on_the_client(site)
    assert sorted(p.name for p in (site / "__pycache__").iterdir()) == ["six.cpython-312.pyc"]
    assert sorted(p.relative_to(site).as_posix() for p in site.rglob("*.pyc")) == [
        "__pycache__/six.cpython-312.pyc", "six/__pycache__/testing.cpython-312.pyc"]
    assert not env_build.compile_bytecode(tree, "2.1", None)  # no such Python here: the hosts compile


def test_a_part_changed_in_the_bucket_stops_the_fetch_before_tar_sees_it_and_nothing_is_left(tmp_path):
    plan = env_lock.EnvPlan(key="b" * 32, python="3.12", lock=LOCK)
    built = env_build.build(plan, ship_python=False, cache=tmp_path / "envs")
    config = built.host_config(plan, "podctl/envs/y.tar.zst")
    changed = tmp_path / "changed.tar.zst"
    data = bytearray(built.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    changed.write_bytes(bytes(data))
    bucket = FileBucket(changed)
    env = agent_env.ClientBuiltEnv(bucket, {**config, "interpreter": "archive"}, home=tmp_path / "host",
                                   host="host-0000", log=lambda _: None, builder=True)
    with pytest.raises(agent_env.EnvError) as caught:
        env.prepare()
    message = str(caught.value)
    assert "refused the environment archive" in message and "is not the client's" in message
    assert "\n" not in message and "podctl deleted it" in message and bucket.deleted == ["podctl/envs/y.tar.zst"]
    assert sorted(p.name for p in (tmp_path / "host" / "envs").iterdir()) == ["b" * 32 + ".lock"]


def test_parts_cover_the_object_once_and_a_wrong_part_count_is_refused(tmp_path):
    assert agent_env_fetch.parts_of(10, 4) == [(0, 3), (4, 7), (8, 9)]
    assert agent_env_fetch.parts_of(8, 4) == [(0, 3), (4, 7)]
    with pytest.raises(agent_env_fetch.Refused, match="names 1 parts for 3"):
        agent_env_fetch.stream_into(FileBucket(tmp_path / "none"), "x",
                                    {"size": 10, "part_size": 4, "parts": ["0" * 64], "sha256": ""},
                                    tmp_path / "dest")



def test_a_host_without_zstd_refuses_a_zstandard_that_is_not_the_clients_and_unpacks_nothing(
        tmp_path, monkeypatch):
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"  # the env's Python: this one
    plan = env_lock.EnvPlan(key="c" * 32, python=here, lock=LOCK)
    built = env_build.build(plan, ship_python=False, cache=tmp_path / "envs")
    config = built.host_config(plan, "podctl/envs/z.tar.zst")
    bogus = tmp_path / "bogus.zip"
    bogus.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip, not the client's
    tool = {"object": "podctl/tools/zstandard-x.zip", "sha256": "0" * 64, "size": bogus.stat().st_size,
            "python": here}
    config["archive"]["zstandard"] = tool
    no_zstd = tmp_path / "bin"  # tar, and no zstd: the PATH of an image without the package
    no_zstd.mkdir()
    (no_zstd / "tar").symlink_to(subprocess.run(["which", "tar"], capture_output=True, text=True).stdout.strip())
    monkeypatch.setenv("PATH", str(no_zstd))

    class Both(FileBucket):  # the archive and the tool, each its own object
        def read_range(self, name: str, start: int, end: int) -> bytes:
            self.path = bogus if name == tool["object"] else built.path
            return super().read_range(name, start, end)

    env = agent_env.ClientBuiltEnv(Both(built.path), config, home=tmp_path / "host", host="host-0001",
                                   log=lambda _: None)
    with pytest.raises(agent_env.EnvError, match="is not the client's zstandard") as caught:
        env.prepare()
    assert "\n" not in str(caught.value)
    assert sorted(p.name for p in (tmp_path / "host" / "envs").iterdir()) == ["c" * 32 + ".lock"]
    assert not (tmp_path / "host" / "tools").exists() or not any((tmp_path / "host" / "tools").iterdir())

    tool["python"] = "3.10" if here != "3.10" else "3.9"  # a wheel for another Python: said, not tried
    with pytest.raises(agent_env.EnvError, match=r"is for Python 3\.\d+, not this host's"):
        env.prepare()
