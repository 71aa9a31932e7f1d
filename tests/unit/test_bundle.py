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


def _tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def _names(b: bundle.Bundle) -> list[str]:
    with tarfile.open(b.path) as tar:
        return [m.name for m in tar.getmembers() if not m.isdir()]


SOURCES = {"train.py": "print('hi')\n", "run.sh": "#!/bin/sh\necho hi\n", "lib/model.py": "x = 1\n",
           "lib/data/cfg.json": "{}\n", "README.md": "# r\n"}


def _evil_tar(path: Path, members: list[tuple[str, bytes, str]]) -> Path:
    """A .tar.gz of (name, type, linkname-or-content) members, as an attacker writes it."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, extra in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(extra)
                tar.addfile(info, io.BytesIO(extra.encode()))
            else:
                info.linkname = extra
                tar.addfile(info)
    return path


def test_same_content_same_bytes_whatever_the_mtimes_and_order(tmp_path):
    a = _tree(tmp_path / "a", SOURCES)
    b = _tree(tmp_path / "b", dict(reversed(list(SOURCES.items()))))  # made in another order
    for root in (a, b):
        os.chmod(root / "run.sh", 0o750)
    os.chmod(b / "run.sh", 0o700)  # other permission bits, same executable bit
    os.chmod(b / "train.py", 0o600)
    for path in b.rglob("*"):
        os.utime(path, (1_234_567, 1_234_567))
    first, again, other = (pack(a, out_dir=tmp_path / "o1"), pack(a, out_dir=tmp_path / "o2"),
                           pack(b, out_dir=tmp_path / "o3"))
    assert first.hash == again.hash == other.hash
    assert first.path.read_bytes() == other.path.read_bytes()
    data = first.path.read_bytes()
    assert first.path.name == f"{first.hash}.tar.gz" and len(first.hash) == 64
    assert hashlib.sha256(data).hexdigest() == first.hash and first.size_bytes == len(data)
    assert data[4:8] == b"\0\0\0\0"  # the gzip header's mtime
    assert first.file_count == len(SOURCES) and first.warnings == []
    with tarfile.open(first.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert list(members) == sorted(members)  # here sorted is also depth-first
    assert {m.uid for m in members.values()} == {0} and {m.uname for m in members.values()} == {""}
    assert {m.mtime for m in members.values()} == {bundle.FIXED_MTIME}
    assert members["run.sh"].mode == 0o755 and members["train.py"].mode == 0o644
    assert members["lib"].isdir() and members["lib"].mode == 0o755


def test_one_changed_byte_or_mode_changes_the_hash(tmp_path):
    root = _tree(tmp_path / "w", SOURCES)
    before = pack(root, out_dir=tmp_path / "o").hash
    (root / "lib/model.py").write_text("x = 2\n")
    changed = pack(root, out_dir=tmp_path / "o").hash
    os.chmod(root / "lib/model.py", 0o755)
    executable = pack(root, out_dir=tmp_path / "o").hash
    assert len({before, changed, executable}) == 3


def test_gitignore_rules_nested_negation_dir_only_and_podctlignore(tmp_path):
    root = _tree(tmp_path / "w", {
        "train.py": "", "a.log": "", "keep.log": "", "notes.csv": "",
        "build/out.bin": "", "docs/build": "a file named build stays",
        "data/raw/x.bin": "", "data/keep.txt": "",            # data/ excluded: no way back in
        "cache/a.tmp": "", "cache/keep.tmp": "",              # cache/* excluded: keep.tmp re-included
        "sub/a.txt": "", "sub/important.txt": "", "sub/anchored": "", "sub/deep/anchored": "",
        "sub/keep.csv": "", "big/weights.bin": "", "debug.log": "",
        ".gitignore": "*.log\n!keep.log\nbuild/\ndata/\n!data/keep.txt\ncache/*\n!cache/keep.tmp\n*.csv\n",
        "sub/.gitignore": "*.txt\n!important.txt\n/anchored\n!keep.csv\n",
        ".podctlignore": "big/\n!debug.log\n",
    })
    names = _names(pack(root, out_dir=tmp_path / "o"))
    assert sorted(names) == sorted([
        ".gitignore", ".podctlignore", "cache/keep.tmp", "debug.log", "docs/build", "keep.log",
        "sub/.gitignore", "sub/deep/anchored", "sub/important.txt", "sub/keep.csv", "train.py"])


def test_built_in_skips_cannot_be_undone(tmp_path):
    root = _tree(tmp_path / "w", {
        "train.py": "", ".git/HEAD": "", "lib/.git": "gitdir: x", "__pycache__/t.cpython-311.pyc": "",
        "lib/__pycache__/m.pyc": "", "lib/old.pyc": "", ".venv/bin/python": "", "lib/.venv/x": "",
        ".podctl/state": "", ".podctlignore": "!.venv/\n!*.pyc\n"})
    assert sorted(_names(pack(root, out_dir=tmp_path / "o"))) == [".podctlignore", "train.py"]


def test_special_files_are_skipped_with_a_warning(tmp_path):
    root = _tree(tmp_path / "w", {"train.py": ""})
    os.mkfifo(root / "pipe")
    b = pack(root, out_dir=tmp_path / "o")
    assert _names(b) == ["train.py"]
    assert any("skipped pipe" in w and ".podctlignore" in w for w in b.warnings)


def test_not_a_directory(tmp_path):
    with pytest.raises(BundleError, match="not a directory"):
        pack(tmp_path / "nope", out_dir=tmp_path / "o")


def test_unreadable_file_is_refused(tmp_path, monkeypatch):
    root = _tree(tmp_path / "w", {"train.py": "", "secret.key": "k"})
    if os.geteuid() == 0:  # root reads everything: make the open fail as it would for a user
        real_open = builtins.open

        def refusing_open(path, *args, **kwargs):
            if Path(path).name == "secret.key":
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr(bundle, "open", refusing_open, raising=False)
    else:
        os.chmod(root / "secret.key", 0)
    with pytest.raises(BundleError, match=r"secret\.key \(permission denied\).*\.podctlignore"):
        pack(root, out_dir=tmp_path / "o")
    assert [p.name for p in (tmp_path / "o").iterdir()] == []  # no partial bundle left


def test_large_bundles_warn(tmp_path):
    root = _tree(tmp_path / "w", {"train.py": "", "weights.bin": os.urandom(5000)})
    assert WARN_BYTES == 100 * 1000 * 1000
    assert pack(root, out_dir=tmp_path / "o").warnings == []
    b = pack(root, out_dir=tmp_path / "o", warn_bytes=4000)
    assert len(b.warnings) == 1
    assert "large" in b.warnings[0] and "weights.bin" in b.warnings[0] and ".podctlignore" in b.warnings[0]


def test_symlinks_inside_are_kept_relative_and_round_trip(tmp_path):
    root = _tree(tmp_path / "w", SOURCES)
    os.symlink("../train.py", root / "lib/train_link.py")
    os.symlink("lib/data", root / "data")
    os.symlink("data/./cfg.json", root / "cfg.json")  # through another link, kept as written
    os.symlink("loop_b", root / "loop_a")  # a loop leads nowhere, so it is harmless
    os.symlink("loop_a", root / "loop_b")
    b = pack(root, out_dir=tmp_path / "o")
    out = tmp_path / "x"
    safe_extract(b.path, out)
    assert os.readlink(out / "lib/train_link.py") == "../train.py"
    assert (out / "lib/train_link.py").read_text() == SOURCES["train.py"]
    assert (out / "data/cfg.json").read_text() == "{}\n"
    assert os.readlink(out / "cfg.json") == "data/./cfg.json" and (out / "cfg.json").read_text() == "{}\n"
    assert b.file_count == len(SOURCES) + 5


@pytest.mark.parametrize("target, words", [
    ("../outside.txt", "outside the workdir"),
    ("/etc/hostname", "absolute path"),
    ("lib/../../outside.txt", "outside the workdir"),
    ("ignored.log", "not in the bundle"),
    ("missing.py", "not in the bundle"),
])
def test_symlinks_that_would_dangle_on_the_hosts_are_refused(tmp_path, target, words):
    (tmp_path / "outside.txt").write_text("x")
    root = _tree(tmp_path / "w", {"train.py": "", "ignored.log": "", ".gitignore": "*.log\n", "lib/a": ""})
    os.symlink(target, root / "bad")
    with pytest.raises(BundleError, match=rf"{root / 'bad'} .*{words}.*\.podctlignore"):
        pack(root, out_dir=tmp_path / "o")
    (root / ".podctlignore").write_text("bad\n")  # the way out the message names
    assert _names(pack(root, out_dir=tmp_path / "o")) == [".gitignore", ".podctlignore", "lib/a", "train.py"]


def test_a_link_through_an_ignored_link_is_refused(tmp_path):
    root = _tree(tmp_path / "w", {"train.py": "", "lib/a.py": "", ".podctlignore": "hop\n"})
    os.symlink("lib", root / "hop")
    os.symlink("hop/a.py", root / "via")  # fine here, but "hop" will not be on the hosts
    with pytest.raises(BundleError, match=r"via is a symlink to hop/a\.py, which is not in the bundle"):
        pack(root, out_dir=tmp_path / "o")


def test_a_link_through_a_link_that_leads_outside_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    root = _tree(tmp_path / "w", {"train.py": ""})
    (root / ".podctlignore").write_text("hop\n")  # the hop itself is ignored...
    os.symlink("../elsewhere", root / "hop")
    os.symlink("hop", root / "via")  # ...but this one still leads out through it
    with pytest.raises(BundleError, match="via"):
        pack(root, out_dir=tmp_path / "o")


@pytest.mark.parametrize("members, words", [
    ([("../evil.txt", tarfile.REGTYPE, "x")], "climbs out"),
    (([("a/../../evil.txt", tarfile.REGTYPE, "x")]), "climbs out"),
    ([("/tmp/evil.txt", tarfile.REGTYPE, "x")], "absolute"),
    ([("l", tarfile.SYMTYPE, "/etc")], "outside the destination"),
    ([("l", tarfile.SYMTYPE, "../..")], "outside the destination"),
    ([("h", tarfile.LNKTYPE, "../evil.txt")], "outside the destination"),
    ([("dev", tarfile.CHRTYPE, "")], "device"),
    ([("fifo", tarfile.FIFOTYPE, "")], "device, FIFO"),
    # a link first points inside, then another link makes it lead out; writing through it is refused
    ([("a", tarfile.SYMTYPE, "b/../evil.txt"), ("b", tarfile.SYMTYPE, "."),
      ("a", tarfile.REGTYPE, "x")], "outside the destination"),
    ([("a", tarfile.SYMTYPE, "b/../evil.txt"), ("b", tarfile.SYMTYPE, ".")], "now leads outside"),
])
def test_safe_extract_refuses_what_leads_outside(tmp_path, members, words):
    evil = _evil_tar(tmp_path / "evil.tar.gz", members)
    dest = tmp_path / "deep" / "dest"
    with pytest.raises(BundleError, match=words):
        safe_extract(evil, dest)
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "deep" / "evil.txt").exists()


def test_safe_extract_takes_links_inside_and_refuses_garbage(tmp_path):
    good = _evil_tar(tmp_path / "good.tar.gz", [
        ("sub/f.txt", tarfile.REGTYPE, "hello"), ("d", tarfile.SYMTYPE, "sub"),
        ("d/g.txt", tarfile.REGTYPE, "through the link"), ("h", tarfile.LNKTYPE, "sub/f.txt")])
    assert safe_extract(good, tmp_path / "out") == 4
    assert (tmp_path / "out/sub/g.txt").read_text() == "through the link"
    assert (tmp_path / "out/h").read_text() == "hello"
    (tmp_path / "junk.tar.gz").write_bytes(gzip.compress(b"not a tar at all" * 100))
    with pytest.raises(BundleError, match="cannot unpack"):
        safe_extract(tmp_path / "junk.tar.gz", tmp_path / "out2")
    with pytest.raises(ValueError):  # the error type is the caller's (the agent's copy)
        safe_extract(_evil_tar(tmp_path / "e.tar.gz", [("../x", tarfile.REGTYPE, "")]),
                     tmp_path / "out3", error=ValueError)

