"""The workdir bundle: the user's directory as one deterministic .tar.gz in GCS.

Every host of a run fetches the same bundle, so it is packed once, named by the
SHA-256 of its bytes (`podctl/bundles/HASH.tar.gz`) and uploaded only when that
object is missing: an unchanged workdir is never sent twice. For the name to
mean "this content", the archive must be byte-for-byte the same for the same
files, whatever their mtimes, owners or the order the filesystem lists them in:
entries are sorted, owner is 0/0 with empty names, mtime is fixed, modes are
0644 or 0755 (the executable bit kept), and the gzip header has no name or time.
(The compressed bytes come from zlib, so two zlib versions may differ; a new
hash then costs one upload, nothing more.)

What goes in: everything under the workdir except what `.gitignore` files (the
root's and nested ones, git's rules: last match wins, deeper files win, `!`
re-includes, a trailing `/` matches directories only, and nothing inside an
excluded directory comes back) and the root's `.podctlignore` (same syntax,
applied last, so it can both add exclusions and `!`-re-include what git ignores)
leave out. `.git`, `__pycache__`, `*.pyc`, `.venv` and `.podctl` are always left
out, and so is podctl's own state directory (its keys) where a workdir holds it.
.gitignore files above the workdir, .git/info/exclude and global excludes
are not read: the bundle depends on the workdir alone.

Symlinks whose target is inside the bundle are kept as relative symlinks (so a
link to a directory is not a second copy, and a link loop is harmless); an
absolute symlink, one that leads outside the workdir, or one to a path that is
not packed is refused, naming it, since it would dangle on the hosts.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from podctl.base.errors import BundleError
from podctl.cloud.storage import Storage
from podctl.host import agent, run_layout

WARN_BYTES = 100 * 1000 * 1000  # a bundle above this (packed or unpacked) is worth a warning
FIXED_MTIME = 946684800  # 2000-01-01: mtime 0 breaks tools that zip the tree (ZIP starts at 1980)
ALWAYS_SKIPPED = (".git", "__pycache__", "*.pyc", ".venv", ".podctl")
PODCTLIGNORE = ".podctlignore"
_FIX = "add it to .podctlignore"


@dataclass
class Bundle:
    path: Path  # OUT_DIR/HASH.tar.gz
    hash: str  # SHA-256 of the .tar.gz bytes, all 64 hex digits
    size_bytes: int  # of the .tar.gz
    file_count: int  # regular files and symlinks (directories not counted)
    warnings: list[str] = field(default_factory=list)


async def upload(storage: Storage, bundle: Bundle) -> bool:
    """Put the bundle in GCS unless it is there already; True when it was uploaded."""
    return await storage.upload_file(bundle.path, run_layout.bundle_object(bundle.hash), if_missing=True,
                                     content_type="application/gzip")


async def ship(storage: Storage, workdir: Path, notice: Callable[[str], None]) -> str:
    """Pack WORKDIR and put it in GCS (once: an unchanged workdir is not sent again),
    saying its warnings and what was shipped -> the bundle's hash."""
    with tempfile.TemporaryDirectory(prefix="podctl-bundle-") as tmp:
        packed = pack(workdir, out_dir=Path(tmp))
        for warning in packed.warnings:
            notice(warning)
        uploaded = await upload(storage, packed)
    notice(f"bundle {packed.hash[:12]} ({packed.file_count} files, "
           f"{packed.size_bytes / 1e6:.1f} MB){' uploaded' if uploaded else ', already in GCS'}")
    return packed.hash


# ---- what goes in -------------------------------------------------------------------

@dataclass
class _Entry:
    rel: str  # posix path relative to the workdir, never with ".."
    kind: str  # "dir", "file" or "link"
    path: Path
    linkname: str = ""  # for links: its target as written, relative to its directory


class _Rules:
    """The ignore files in force: .gitignore files from the root down, then .podctlignore."""

    def __init__(self, root: Path):
        import pathspec

        self._spec = pathspec.GitIgnoreSpec.from_lines
        self.always = self._spec(ALWAYS_SKIPPED)
        self.podctl = self._load(root / PODCTLIGNORE)

    def _load(self, path: Path) -> Any:
        if not path.is_file():
            return None
        try:
            return self._spec(path.read_text(encoding="utf-8").splitlines())
        except (OSError, UnicodeDecodeError) as e:
            raise BundleError(f"cannot read {path}: {e}; fix it or remove it.") from e

    def nested(self, directory: Path, rel_dir: str, outer: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        spec = self._load(directory / ".gitignore")
        return outer + [(rel_dir, spec)] if spec is not None else outer

    def ignored(self, gitignores: list[tuple[str, Any]], rel: str, is_dir: bool) -> bool:
        test = rel + "/" if is_dir else rel
        if self.always.match_file(test):
            return True
        verdict = None
        for base, spec in gitignores + [("", self.podctl)]:
            if spec is None:
                continue
            found = spec.check_file(test[len(base) + 1:] if base else test).include
            if found is not None:
                verdict = found
        return bool(verdict)


def _podctl_state() -> set[Path]:
    """podctl's own state directory (SSH and signing keys, the fake's hosts): never shipped,
    even when a workdir holds it."""
    from podctl.base.settings import state_dir

    with contextlib.suppress(OSError, RuntimeError):
        return {state_dir().resolve()}
    return set()


def _collect(root: Path) -> tuple[list[_Entry], list[str]]:
    rules = _Rules(root)
    never = _podctl_state()
    entries: list[_Entry] = []
    warnings: list[str] = []

    def walk(directory: Path, rel_dir: str, gitignores: list[tuple[str, Any]]) -> None:
        gitignores = rules.nested(directory, rel_dir, gitignores)
        try:
            children = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as e:
            raise BundleError(f"cannot read the directory {directory} ({e.strerror}): fix its "
                              f"permissions or {_FIX}.") from e
        for child in children:
            rel = f"{rel_dir}/{child.name}" if rel_dir else child.name
            path = Path(child.path)
            if child.is_symlink():
                kind = "link"
            elif child.is_dir(follow_symlinks=False):
                kind = "dir"
            elif child.is_file(follow_symlinks=False):
                kind = "file"
            else:
                kind = "special"
            if rules.ignored(gitignores, rel, kind == "dir"):
                continue
            if kind == "dir" and path.resolve() in never:
                continue
            if kind == "special":
                warnings.append(f"skipped {rel}: not a file, directory or symlink (a socket, FIFO "
                                f"or device); {_FIX} to silence this.")
            elif kind == "link":
                entries.append(_link(root, rel, path))
            else:
                entries.append(_Entry(rel, kind, path))
                if kind == "dir":
                    walk(path, rel, gitignores)

    walk(root, "", [])
    packed = {e.rel for e in entries}
    links = {e.rel: e.linkname for e in entries if e.kind == "link"}
    for rel in links:
        where = _resolve(rel, links, packed)
        if where == "outside":
            raise BundleError(f"{root / rel} is a symlink to {links[rel]}, which leads outside the "
                              f"workdir {root}: copy what it points to into the workdir, or {_FIX}.")
        if where is None:
            raise BundleError(f"{root / rel} is a symlink to {links[rel]}, which is not in the "
                              f"bundle (missing, ignored, or reached through an ignored link): "
                              f"{_FIX}, or stop ignoring what it points to.")
    return entries, warnings


def _link(root: Path, rel: str, path: Path) -> _Entry:
    """A symlink, kept as it is (relative), unless it is absolute or leads out of the workdir."""
    raw = os.readlink(path)
    if os.path.isabs(raw):
        raise BundleError(f"{path} is a symlink to the absolute path {raw}, which the hosts may "
                          f"not have: make it relative to a file in the workdir, or {_FIX}.")
    try:
        escapes = not path.resolve().is_relative_to(root)  # through links of any kind
    except RuntimeError:  # a loop of links: it leads nowhere, so not outside either
        escapes = False
    if escapes:
        raise BundleError(f"{path} is a symlink to {raw}, which leads outside the workdir {root}: "
                          f"copy what it points to into the workdir, or {_FIX}.")
    return _Entry(rel, "link", path, raw)


def _resolve(rel: str, links: dict[str, str], packed: set[str]) -> str | None:
    """Where REL leads in the unpacked bundle, following its links as the hosts will:
    the packed path it ends at ("." for the root, "loop" for a loop of links), "outside"
    when it climbs above the root, None when it runs into something not packed."""
    done: list[str] = []
    todo = rel.split("/")
    hops = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return "outside"
            done.pop()
            continue
        here = "/".join(done + [part])
        if here in links:
            hops += 1
            if hops > 40:  # the kernel's own limit
                return "loop"
            todo = links[here].split("/") + todo  # relative to the link's directory: done
            continue
        if here not in packed:
            return None
        done.append(part)
    return "/".join(done) or "."


# ---- packing --------------------------------------------------------------------------

class _HashingWriter:
    """A file object that hashes and counts what it writes."""

    def __init__(self, f: BinaryIO):
        self.f, self.sha, self.size = f, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def _info(entry: _Entry, st: os.stat_result | None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.rel)
    info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
    if entry.kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif entry.kind == "link":
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entry.linkname
    else:
        assert st is not None
        info.type, info.size = tarfile.REGTYPE, st.st_size
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    return info


def _add_file(tar: tarfile.TarFile, entry: _Entry) -> int:
    try:
        with open(entry.path, "rb") as f:
            st = os.fstat(f.fileno())
            tar.addfile(_info(entry, st), f)
    except PermissionError as e:
        raise BundleError(f"cannot read {entry.path} (permission denied): `chmod u+r` it, "
                          f"or {_FIX}.") from e
    except OSError as e:  # e.g. it shrank while being read
        raise BundleError(f"cannot pack {entry.path} ({e}); if something is writing it, "
                          f"wait and try again, or {_FIX}.") from e
    return st.st_size


def pack(workdir: Path, *, out_dir: Path, warn_bytes: int = WARN_BYTES) -> Bundle:
    """Pack WORKDIR into OUT_DIR/HASH.tar.gz (see the module docstring for what goes in)."""
    root = Path(workdir).resolve()
    if not root.is_dir():
        raise BundleError(f"the workdir {workdir} is not a directory.")
    entries, warnings = _collect(root)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes: list[tuple[int, str]] = []
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".bundle-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as raw:
            writer = _HashingWriter(raw)
            with gzip.GzipFile(filename="", mode="wb", fileobj=writer, mtime=0,
                               compresslevel=6) as gz, \
                    tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for entry in entries:
                    assert ".." not in entry.rel.split("/") and not entry.rel.startswith("/")
                    if entry.kind == "file":
                        sizes.append((_add_file(tar, entry), entry.rel))
                    else:
                        tar.addfile(_info(entry, None))
        digest = writer.sha.hexdigest()
        path = out_dir / f"{digest}.tar.gz"
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    unpacked = sum(size for size, _ in sizes)
    if max(writer.size, unpacked) > warn_bytes:
        largest = ", ".join(f"{rel} ({size / 1e6:.1f} MB)" for size, rel in sorted(sizes)[::-1][:3])
        warnings.append(
            f"the bundle is large ({writer.size / 1e6:.1f} MB packed, {unpacked / 1e6:.1f} MB "
            f"unpacked) and every host downloads it; keep data and checkpoints in GCS and add "
            f"them to .podctlignore. Largest: {largest}.")
    count = sum(e.kind != "dir" for e in entries)
    return Bundle(path=path, hash=digest, size_bytes=writer.size, file_count=count,
                  warnings=warnings)


# ---- unpacking --------------------------------------------------------------------------

def safe_extract(tar_path: Path | str, dest: Path | str, *,
                 error: type[Exception] = BundleError) -> int:
    """Unpack a bundle into DEST, refusing anything that could land or point outside it.

    The code is the host agent's (which must stand alone on the hosts); see there.
    """
    return agent.safe_extract(tar_path, dest, error=error)
