"""The hosts' Python environment, decided on the client: one lock per environment.

The run's requirements (`--requirements FILE`, else the workdir's requirements.txt)
are resolved here, with uv (`uv pip compile`), for the hosts' platform (Linux
x86_64) and the Python they will run, into a lock: every package pinned. The lock's
hash (with that Python) is the environment's key; the lock goes to every host in the
run's config and is kept with the run (`podctl/runs/RUN_ID/requirements.lock`), so
every host, and a relaunch of the run, get exactly the same versions.

A lock made for the same requirements is kept (STATE_DIR/locks) and used again by
later runs; the training template's requirements come locked with podctl (data/locks,
SHIPPED_LOCKS), so a first run of it resolves nothing; `podctl run --relock` resolves anew.

Which Python: `podctl run --python X.Y`; else the TPU VM image's (3.10) when the
requirements resolve to the same set there as on a current CPython, and that current
CPython otherwise (uv's, shipped with the environment: env_build.py): the
requirements' own pins decide,
and nobody is left on jax 0.6 only because the image is old.

What cannot work on the hosts is refused here, in one line: a local path or an
editable install (the hosts do not have the client's files). `-r`/`-c` lines are
followed here and flattened into the lock. Index options (`--index-url` and the like,
credentials included) are used here (env_build.py), and reach the hosts only with
`--build-on host`, in the run's config (over SSH), never GCS.

Trust (`--build-on host` only: an archive the client built is checked by its hashes):
an environment archive built by a host is signed (HMAC-SHA256) with a key
derived from this client's own secret (STATE_DIR/env-signing.key, never in GCS) and
the environment's key; the derived key travels only in the run's config. A host
accepts an archive only with that signature over its sha256, so a bucket writer
cannot swap it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import platform
import re
import secrets
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podctl.base import children
from podctl.base.errors import RequirementsError
from podctl.base.settings import state_dir

IMAGE_PYTHON = "3.10"  # v5p / v6e / v4 runtime images: Ubuntu 22.04's python3
CURRENT_PYTHON = "3.12"  # uv's CPython, shipped in the environment, when the image's is too old
SUPPORTED_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
HOST_PLATFORM = "x86_64-manylinux_2_35"  # Ubuntu 22.04's glibc on x86_64 TPU VMs
_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")  # pip's rule for requirements files
_COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's: `#` at a line's start or after whitespace
_INCLUDE = re.compile(r"^(-r|--requirement|-c|--constraint)(?:\s+|=)(.+)$")
_INDEX = re.compile(r"^(-i|--index-url|--extra-index-url|-f|--find-links|--trusted-host)(?:\s+|=)(.+)$")
# An option that takes a value, alone on its line: pip and uv would read the next line as
# its value (`--index-url` then `jax`: "Invalid URL ... jax"), so it is refused here
_BARE_OPTION = re.compile(r"^(-i|--index-url|--extra-index-url|-f|--find-links|--trusted-host|-r|"
                          r"--requirement|-c|--constraint)$")
_EDITABLE = re.compile(r"^(-e|--editable)(\s|=)")
_LOCAL = re.compile(r"^(\.{1,2}/|/|~|file:)|@\s*file:|^[^\s;@=<>!~]+\.(whl|tar\.gz|zip)$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;]+)")
_UV_TIMEOUT = 600.0
_TMP_FILE = re.compile(r"[^\s`'\"]*podctl-lock-[^/\s]*/(requirements\.in|constraints\.txt)")
REQUIREMENTS = "requirements.txt"  # a workdir's, found without --requirements
# Locks made for the training template's requirements (templates/requirements.txt, for the
# fake's CPU hosts and for TPU VMs) when podctl was released, named as STATE_DIR/locks names
# them (lock_inputs): a first run of the template (the demo's) needs no resolve from the
# package index (two `uv pip compile`s, 13-21 s), and a requirement set that differs in any
# line is locked anew. tools/lock_template.py makes them; tests/unit/test_shipped_locks.py
# holds them to the file's requirements.
SHIPPED_LOCKS = Path(__file__).resolve().parent.parent / "data" / "locks"


@dataclass(frozen=True)
class EnvPlan:
    """One environment, as the hosts get it in their config (to_config)."""

    key: str  # sha256 of the lock and the Python, 32 hex digits
    python: str  # "3.12"
    lock: str  # `uv pip compile`'s output: one `name==version` per line
    index_args: tuple[str, ...] = ()  # --index-url URL ...: config only (may hold credentials)
    notes: list[str] = field(default_factory=list)  # what the client says about it

    def version_of(self, package: str) -> str | None:
        return locked_versions(self.lock).get(package)

    def to_config(self, client_secret: bytes, uv_tool: dict[str, str] | None) -> dict[str, Any]:
        return {"key": self.key, "python": self.python, "lock": self.lock,
                "index_args": list(self.index_args), "sign_key": sign_key(client_secret, self.key),
                "uv": uv_tool}


# The fake's hosts stand in for TPU chips with CPU devices, their collectives over Gloo.
# jax 0.12 (one Gloo rank per device) hangs in the first step of a multi-process run under
# podctl's agent (both processes wait in the step's collectives, for ever); jax 0.11 runs.
# Only the fake's CPU hosts take this bound; a TPU VM's jax is the user's to choose.
CPU_HOST_CONSTRAINTS = ("jax<0.12", "jaxlib<0.12")


def jax_extra_for(backend: str) -> str:
    """What `${PODCTL_JAX_EXTRA}` means on the hosts: TPU wheels on Google, CPU on the fake's."""
    return "cpu" if backend == "fake" else "tpu"


def expand(text: str, environ: dict[str, str]) -> str:
    return _VAR.sub(lambda m: environ.get(m.group(1), ""), text)


def _lines(path: Path, environ: dict[str, str], seen: set[Path]) -> tuple[list[str], list[str], list[str]]:
    """PATH's requirement lines (with its -r files'), constraint lines, index options."""
    path = path.resolve()
    if path in seen:
        return [], [], []
    seen.add(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RequirementsError(f"cannot read the requirements file {path} ({e.__class__.__name__}); "
                                "give a readable requirements file.") from e
    requirements: list[str] = []
    constraints: list[str] = []
    index: list[str] = []
    for raw in expand(text, environ).splitlines():
        line = _COMMENT.sub("", raw).strip()
        if not line:
            continue
        if _BARE_OPTION.match(line):
            raise RequirementsError(f"{path.name}: `{line}` has no value; put its value on the "
                                    f"same line (`{line} VALUE`) or remove the line.")
        if found := _INCLUDE.match(line):
            included = path.parent / found.group(2).strip()
            if not included.is_file():
                raise RequirementsError(f"{path.name}: `{line}` names {included}, which is not a file; "
                                        "fix the path (it is relative to the file that names it).")
            reqs, cons, idx = _lines(included, environ, seen)
            (requirements if found.group(1) in ("-r", "--requirement") else constraints).extend(reqs)
            constraints.extend(cons)
            index.extend(idx)
        elif found := _INDEX.match(line):
            index.extend([found.group(1), found.group(2).strip()])
        elif _EDITABLE.match(line):
            raise RequirementsError(
                f"{path.name}: `{line}` is an editable install, which the hosts do not have (a "
                "source tree of yours): drop the -e (a git+https:// URL installs as a package), "
                "or put the package's code in the workdir (the bundle ships it).")
        elif _LOCAL.search(line):
            raise RequirementsError(
                f"{path.name}: `{line}` is a local path, which the hosts do not have: put the "
                "package's code in the workdir (the bundle ships it) or publish it to an index.")
        else:
            requirements.append(line)
    return requirements, constraints, index


def read_requirements(path: Path, jax_extra: str) -> tuple[list[str], list[str], tuple[str, ...]]:
    """The requirement lines of PATH (flattened), its constraints and its index options;
    `${PODCTL_JAX_EXTRA}` is the hosts' ("tpu" on a TPU VM, "cpu" on the fake's)."""
    environ = {**os.environ, "PODCTL_JAX_EXTRA": jax_extra}
    requirements, constraints, index = _lines(path, environ, set())
    if jax_extra == "cpu":
        constraints = [*constraints, *CPU_HOST_CONSTRAINTS]
    return requirements, constraints, tuple(index)


@functools.cache  # once: sysconfig's first use is not thread-safe, and plan() resolves in threads
def requirements_file(given: Path | None, root: Path | None) -> Path | None:
    """--requirements FILE, else ROOT's requirements.txt where it has one; None when the
    run has no requirements (its hosts run what their image has)."""
    if given is not None:
        return given.expanduser()
    if root is not None and (root / REQUIREMENTS).is_file():
        return root / REQUIREMENTS
    return None


def check_file(path: Path, given: Path | None, otherwise: str = "") -> None:
    """PATH, the run's requirements (GIVEN: --requirements as typed), must be a file to
    read: not missing, and not a device, a directory or a pipe (/dev/null is no empty list)."""
    what = f"--requirements {str(given)!r}" if given is not None else str(path)
    if not path.exists():
        raise RequirementsError(f"{what}: no such file; give a requirements file{otherwise}.")
    if not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file (a device or a pipe)"
        raise RequirementsError(f"{what} is {kind}; give a requirements file (pip's format, "
                                f"e.g. requirements.txt){otherwise}.")


_UV_FOUND: list[str] = []
_UV_LOCK = threading.Lock()


def uv_binary() -> str:
    """The uv that podctl depends on (a static binary in the `uv` wheel), looked up once:
    find_uv_bin reads sysconfig, whose first read is not thread-safe (two threads asking
    at once, the lock's two resolves or the build beside the zstandard fetch, saw EXE None)."""
    with _UV_LOCK:
        if not _UV_FOUND:
            try:
                from uv import find_uv_bin
            except ImportError as e:  # pragma: no cover - uv is a dependency
                raise RequirementsError("uv is not installed with podctl: `pip install uv`.") from e
            _UV_FOUND.append(find_uv_bin())
        return _UV_FOUND[0]


def compile_lock(requirements: list[str], constraints: list[str], index: tuple[str, ...],
                 python: str, source: str = "the requirements") -> str:
    """`uv pip compile` for the hosts' platform and PYTHON: one `name==version` a line.
    SOURCE names the user's file in uv's errors, instead of the flattened copy uv reads."""
    with tempfile.TemporaryDirectory(prefix="podctl-lock-") as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(requirements) + "\n")
        argv = [uv_binary(), "pip", "compile", str(req), "--python-version", python,
                "--python-platform", HOST_PLATFORM, "--no-header", "--no-annotate", "--quiet",
                "--no-config", *index]
        if constraints:
            con = Path(tmp) / "constraints.txt"
            con.write_text("\n".join(constraints) + "\n")
            argv += ["--constraint", str(con)]
        try:
            done = children.run(argv, timeout=_UV_TIMEOUT, stdin=subprocess.DEVNULL)  # ends with podctl
        except subprocess.TimeoutExpired as e:
            raise RequirementsError(f"resolving the requirements took over {_UV_TIMEOUT:.0f} s; "
                                    "pin the main packages and try again.") from e
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.strip().splitlines() if ln.strip()]
        why = " ".join(lines[:3]) if lines else f"uv exited {done.returncode}"
        why = _TMP_FILE.sub(source, why)  # uv names our temporary copy, which the user never saw
        raise RequirementsError(f"the requirements cannot be resolved for Python {python} on the "
                                f"hosts: {why[:400]}")
    return "\n".join(line for line in done.stdout.splitlines() if line.strip()) + "\n"


def locked_versions(lock: str) -> dict[str, str]:
    found = (_PIN.match(line) for line in lock.splitlines())
    return {m.group(1).lower().replace("_", "-"): m.group(2) for m in found if m}


def env_key(lock: str, python: str) -> str:
    return hashlib.sha256(f"python {python}\nplatform {HOST_PLATFORM}\n{lock}".encode()).hexdigest()[:32]


def plan(path: Path, *, jax_extra: str, python: str | None = None, relock: bool = False,
         cache: Path | None = None) -> EnvPlan:
    """Resolve PATH for the hosts; see the module docstring for which Python. A lock made
    for the same requirements before (CACHE, default STATE_DIR/locks) is used again, so
    later runs get the same versions; RELOCK resolves anew (and replaces it)."""
    if python is not None and python not in SUPPORTED_PYTHONS:
        raise RequirementsError(f"--python {python}: podctl makes hosts' environments for Python "
                                f"{', '.join(SUPPORTED_PYTHONS)}; give one of those.")
    requirements, constraints, index = read_requirements(path, jax_extra)
    if not requirements:
        raise RequirementsError(f"{path.name} names no package; remove it or add packages.")
    inputs = lock_inputs(requirements, constraints, index, python)
    kept = (cache or state_dir() / "locks") / f"{inputs}.json"
    if not relock:
        for found, said in ((kept, f"locked earlier for these requirements ({kept})"),
                            (SHIPPED_LOCKS / f"{inputs}.json",
                             "locked for these requirements when this podctl was released (shipped with it)")):
            result = _stored(found, index)
            if result is not None:
                result.notes.append(f"{said}; `podctl run --relock` resolves them again")
                return result
    notes = []
    if python is None:
        uv_binary()

        def attempt(version: str) -> str | RequirementsError:
            try:
                return compile_lock(requirements, constraints, index, version, path.name)
            except RequirementsError as e:
                return e

        with ThreadPoolExecutor(2) as pool:  # the index's answers dominate: ask both at once
            on_image_or_error, current_or_error = pool.map(attempt, (IMAGE_PYTHON, CURRENT_PYTHON))
        if isinstance(current_or_error, RequirementsError):
            raise current_or_error  # no Python of the hosts' takes them
        current = current_or_error
        # the packages the requirements name decide; their dependencies may differ by Python
        named = {_name(line) for line in requirements} - {""}
        if isinstance(on_image_or_error, RequirementsError):  # e.g. jax 0.7+ needs 3.11
            python, lock = CURRENT_PYTHON, current
            why = str(on_image_or_error).split(": ", 1)[-1][:160]
            notes.append(f"the requirements do not resolve for the image's Python {IMAGE_PYTHON} "
                         f"({why}): the hosts get CPython {CURRENT_PYTHON} (uv's, shipped in the environment)")
        elif all(locked_versions(on_image_or_error).get(name) == locked_versions(current).get(name)
                 for name in named):
            python, lock = IMAGE_PYTHON, on_image_or_error
        else:
            python, lock = CURRENT_PYTHON, current
            old, new = locked_versions(on_image_or_error), locked_versions(current)
            older = _what_is_older({n: v for n, v in old.items() if n in named}, new)
            notes.append(f"the image's Python {IMAGE_PYTHON} would get {older}: the hosts get CPython "
                         f"{CURRENT_PYTHON} (uv's, shipped in the environment); pin versions or pass "
                         "--python to choose")
    else:
        lock = compile_lock(requirements, constraints, index, python, path.name)
    jax = locked_versions(lock).get("jax")
    key = env_key(lock, python)
    notes.append(f"environment {key[:12]}: Python {python}, {len(locked_versions(lock))} "
                 f"packages locked{f', jax {jax}' if jax else ''}")
    with contextlib.suppress(OSError):
        kept.parent.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"lock": lock, "python": python, "notes": notes}))
        os.replace(tmp, kept)
    return EnvPlan(key=key, python=python, lock=lock, index_args=index, notes=notes)


def lock_inputs(requirements: list[str], constraints: list[str], index: tuple[str, ...],
                python: str | None) -> str:
    """What a lock is made from (the flattened requirements, constraints, index options, the
    asked Python, the hosts' platform and Pythons): the name it is kept under."""
    return hashlib.sha256(repr((requirements, constraints, index, python, HOST_PLATFORM,
                                IMAGE_PYTHON, CURRENT_PYTHON)).encode()).hexdigest()[:32]


def _stored(path: Path, index: tuple[str, ...]) -> EnvPlan | None:
    """A lock kept at PATH (plan's JSON: lock, python, notes), or None where there is none."""
    try:
        stored = json.loads(path.read_text())
        return EnvPlan(key=env_key(stored["lock"], stored["python"]), python=stored["python"],
                       lock=stored["lock"], index_args=index, notes=list(stored["notes"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    return found.group(0).lower().replace("_", "-") if found else ""


def _what_is_older(old: dict[str, str], new: dict[str, str]) -> str:
    for name in ("jax", *sorted(old)):
        if name in old and old[name] != new.get(name):
            return f"{name} {old[name]} (not {new.get(name, 'the newest')})"
    return "older packages"


# ---- trust: the client's signing secret, the hosts' per-environment key -----------------

def client_secret(directory: Path | None = None) -> bytes:
    """This client's own secret (created on first use, 0600); never leaves the client
    except as per-environment keys derived from it."""
    path = (directory or state_dir()) / "env-signing.key"
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    try:
        os.link(tmp, path)  # whole, and only if no other process made one first
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return bytes.fromhex(path.read_text().strip())


def sign_key(secret: bytes, key: str) -> str:
    """The key a host signs (and checks) environment KEY's archive with."""
    return hmac.new(secret, f"podctl-env {key}".encode(), hashlib.sha256).hexdigest()


def client_uv_for_hosts() -> tuple[str, str] | None:
    """(path, sha256) of this client's uv binary when it runs on the hosts (Linux x86_64)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    path = uv_binary()
    return path, file_sha256(path)


def file_sha256(path: str | Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()
