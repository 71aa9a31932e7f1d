"""podctl's host agent: runs one host's part of a run, detached from the SSH session.

This file is shipped to every host with its sibling agent_*.py modules, in one zip
(through GCS, once per version), and run there with the host's system `python3`
(3.10 on v5p images); it needs only the standard library (GCS through its JSON API,
with the metadata server's token), and it imports nothing from podctl. It:

  1. reads its config (JSON, mode 0600, written by the launcher over SSH stdin);
  2. downloads the run's bundle from GCS once per host and unpacks it safely;
  3. makes the run's Python environment (agent_env.py: built once by process 0,
     shipped to the others through GCS, kept on the host), then runs `--setup CMD`
     once per host per bundle and setup command, cached by a marker file;
  4. runs the script (or the command) with the run's environment, in its own
     session, stdout and stderr merged and split into lines at "\n" only; the run
     ends when the script exits (a child it left holding the pipe does not keep it
     going), and whatever the script left running is then ended too;
  5. appends every line to a local file and ships it to GCS in chunks
     (logs/host-NNNN/NNNNNN.log, every few seconds and at exit), with heartbeats
     (every object's name from run_layout.py, which podctl's readers share);
     once the script names its JAX process index (in its progress file) it logs the
     line "[podctl] host-NNNN is JAX process N", by which readers label the host's
     later lines, and keeps the index in its heartbeats and status;
  6. writes status/host-NNNN.json with the exit code at the end.

SIGTERM (from `podctl` stopping the run, or a TPU VM's preemption notice) is
passed to the script's process group; once the script exits, every process it
started (its session, and every orphan, which comes back to the agent as a
child subreaper) gets SIGTERM, then SIGKILL; the agent still flushes and writes status.
Environment values are handed to the process as data, never through a shell,
and never written to any log.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

try:  # on a host: the agent's zip holds its sibling modules at the top level
    import agent_chips
    import agent_control
    import agent_env
    import agent_gcs
    import agent_maintenance
    import agent_watch
    import run_layout
    from agent_logs import TAIL_IN_STATUS, LogShipper, process_mark
    from agent_procs import _quiet, _reap, become_subreaper, leftovers
except ImportError:  # imported by podctl itself (the bundle module uses safe_extract)
    from podctl.host import agent_chips, agent_control, agent_env, agent_gcs, agent_maintenance, agent_watch, run_layout
    from podctl.host.agent_logs import TAIL_IN_STATUS, LogShipper, process_mark
    from podctl.host.agent_procs import _quiet, _reap, become_subreaper, leftovers

EXIT_SETUP_FAILED = 125
EXIT_AGENT_FAILED = 124
DRAIN_SECONDS = 2.0  # after the script exits: read what it left in the pipe, at most this long
LEFTOVER_GRACE_SECONDS = 3.0  # what the script left running: SIGTERM, this long, SIGKILL
STOP_GRACE_SECONDS = 600.0  # a script that ignores a stop this long gets SIGKILL
# A line longer than this without "\n" is shipped in pieces of this size, each a line:
# enough for any line a script means (a 10 MB JSON blob stays one line), and a bound on
# what a script that never prints "\n" makes the agent hold.
MAX_LINE_BYTES = 16 << 20


def safe_extract(tar_path: Path | str, dest: Path | str, *,
                 error: type[Exception] = ValueError) -> int:
    """Unpack a bundle into DEST, refusing anything that could land or point outside it.

    Refused, before anything is written for that member: absolute names, names with
    `..`, devices, FIFOs and other special members, a member whose path leads outside
    DEST (through a symlink unpacked before it), and links whose target is absolute or
    outside DEST. After unpacking, every symlink is checked again, since a later link
    can change where an earlier one leads. Returns the number of members unpacked.

    Standard library only and self-contained (ERROR is the exception to raise): the
    client's bundle module uses this same function. The caller unpacks into a fresh directory and deletes
    it on error; nothing here limits the total size.
    """
    import os
    import tarfile

    root = os.path.realpath(dest)
    os.makedirs(root, exist_ok=True)

    def inside(path: str) -> bool:
        return path == root or path.startswith(root + os.sep)

    def refuse(name: str, why: str) -> Exception:
        return error(f"refusing the bundle {tar_path}: its member {name!r} {why}.")

    links: list[tuple[str, str]] = []
    count = 0
    try:
        # One pass over the stream: each member is checked, then written, in order
        # (listing them all first would decompress the archive twice).
        with tarfile.open(tar_path, "r|gz") as tar:
            for m in tar:
                count += 1
                name = m.name
                if name.startswith("/") or os.path.isabs(name) or ".." in name.split("/"):
                    raise refuse(name, "is absolute or climbs out with '..'")
                if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
                    raise refuse(name, "is a device, FIFO or other special file")
                if not inside(os.path.realpath(os.path.join(root, name))):
                    raise refuse(name, "would be written outside the destination")
                if m.issym() or m.islnk():
                    base = os.path.dirname(os.path.join(root, name)) if m.issym() else root
                    if os.path.isabs(m.linkname) or not inside(
                            os.path.realpath(os.path.join(base, m.linkname))):
                        raise refuse(name, f"links to {m.linkname!r}, outside the destination")
                    if m.issym():
                        links.append((name, m.linkname))
                if m.isfile() or m.isdir():
                    m.mode = 0o755 if m.isdir() or m.mode & 0o111 else 0o644
                m.uid = m.gid = 0
                m.uname = m.gname = ""
                options = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extract(m, root, set_attrs=True, **options)  # type: ignore[arg-type]
    except (tarfile.TarError, EOFError, OSError) as e:
        # tarfile's own filter errors (3.11.4+) are TarErrors too
        raise error(f"cannot unpack the bundle {tar_path}: {e}") from e
    for name, linkname in links:
        full = os.path.join(root, name)
        if not inside(os.path.realpath(os.path.join(os.path.dirname(full), linkname))):
            raise refuse(name, f"links to {linkname!r}, which now leads outside the destination")
    return count


def _text(line: bytes) -> str:
    return line[:-1].decode("utf-8", "replace") if line.endswith(b"\r") else line.decode("utf-8", "replace")


class _LineSplitter:
    """Bytes as they come from a pipe, into lines at "\\n": the line being read kept in the
    pieces it came in (joined once, at its "\\n": a long line is not copied per read), and
    cut at MAX_LINE_BYTES."""

    def __init__(self) -> None:
        self.partial: list[bytes] = []
        self.size = 0

    def feed(self, data: bytes) -> list[bytes]:
        *lines, rest = data.split(b"\n")
        if lines:
            lines[0] = b"".join([*self.partial, lines[0]])
            self.partial, self.size = [], 0
        if rest:
            self.partial.append(rest)
            self.size += len(rest)
        if self.size >= MAX_LINE_BYTES:
            joined = b"".join(self.partial)
            lines.append(joined[:MAX_LINE_BYTES])
            self.partial = [joined[MAX_LINE_BYTES:]] if len(joined) > MAX_LINE_BYTES else []
            self.size = len(joined) - MAX_LINE_BYTES
        return lines

    def rest(self) -> bytes:
        return b"".join(self.partial)


def jax_cache_env(podctl_home: Path) -> dict[str, str]:
    """JAX's persistent compilation cache in the host's podctl directory: a resumed or
    relaunched run on this host loads what an earlier run compiled instead of compiling it
    again (JAX writes it from process 0 only: host 0's programs). Every program is kept,
    however quick its compile: on a slice's CPU stand-ins and TPUs alike a resume pays for
    each one otherwise. A run's --env overrides both."""
    return {"JAX_COMPILATION_CACHE_DIR": str(podctl_home / run_layout.JAX_CACHE_DIR),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


class Agent:
    def __init__(self, cfg: dict[str, Any], run_dir: Path):
        self.cfg = cfg
        self.run_dir = run_dir
        self.home = Path.home() / ".podctl"
        self.bucket = agent_gcs.Bucket(cfg["bucket"])
        self.venv: Path | None = None
        self.logs = LogShipper(cfg, self.bucket, run_dir)
        self.logs.watch = self.watch
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.stop_deadline: float | None = None
        self.termed: int | None = None  # the script (pid) already sent SIGTERM
        self.killed_state: str | None = None  # the script's process state when it was SIGKILLed
        self.maintenance: dict[str, Any] | None = None  # the maintenance that stopped the run, if one did
        self.stacks_asked = threading.Event()
        self.control: agent_control.Control | None = None  # from main's start to the status
        self.process_index = agent_watch.ProcessIndex(run_dir)
        self.process_lock = threading.Lock()

    def learn_process(self) -> None:
        """Once the script's progress file names its JAX process index: log the mark
        that makes readers label this host's later lines by it, and keep it for the
        heartbeats and the status. Earlier lines stay labelled by host only (nothing
        is held back to wait for it)."""
        with self.process_lock:
            index = self.process_index.check()
            if index is not None:
                self.logs.process_index = index
                self.logs.line(process_mark(self.cfg["host"], index))

    def watch(self) -> dict[str, Any]:
        """For every heartbeat: the step the script last finished and its process's state."""
        self.learn_process()  # a script that wrote its index but has printed nothing since
        child = self.child
        pid = child.pid if child is not None and child.returncode is None else None
        return {"progress": agent_watch.read_progress(self.run_dir),
                "process": agent_watch.process_state(pid)}

    def on_stacks(self, signum: int, frame: object) -> None:
        """SIGUSR1 from podctl's stall watch: capture the script's stacks (off the signal
        handler, in the thread below)."""
        self.stacks_asked.set()

    def _stacks_loop(self) -> None:
        while True:
            self.stacks_asked.wait()
            self.stacks_asked.clear()
            child = self.child
            if child is None or child.returncode is not None:
                continue
            text = agent_watch.capture_stacks(child.pid, self.run_dir, self.logs.tag)
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            self.logs._upload(run_layout.stacks_object(self.cfg["run_id"], stamp, self.cfg["host"]), text)

    # ---- signals ------------------------------------------------------------------

    def on_term(self, signum: int, frame: object) -> None:
        """Pass the stop to the script's process group; when the script exits, whatever
        it left running is ended too (`end_leftovers`)."""
        if not self.stopping:  # the host's other users see this run letting go (agent_chips.py)
            try:  # (a signal handler: nothing said here, the log's lock may be held)
                agent_chips.claim(self.cfg["run_id"], os.getpid(), stopping=True)
            except OSError:
                pass
        self.stopping = True
        grace = float(self.cfg.get("stop_grace_seconds", STOP_GRACE_SECONDS))
        try:  # podctl's stop may name a shorter grace (a stalled run cannot checkpoint)
            grace = min(grace, float((self.run_dir / run_layout.STOP_FILE).read_text().strip()))
        except (OSError, ValueError):
            pass
        deadline = time.monotonic() + grace
        if self.stop_deadline is None or deadline < self.stop_deadline:
            self.stop_deadline = deadline
        # One SIGTERM per script: a stop that arrives twice (over SSH and through GCS,
        # or `podctl stop` run again) must not cut short the checkpoint the first began.
        if self.child is not None and self.child.returncode is None and self.termed != self.child.pid:
            self.termed = self.child.pid
            try:
                os.killpg(self.child.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def on_maintenance(self, info: dict[str, Any]) -> None:
        """Maintenance is near (agent_maintenance.py): stop the script as a stop would,
        and say why in the status, for `--recover` to wait it out."""
        self.maintenance = info
        self.logs.line(f"[podctl] maintenance on {run_layout.host_tag(self.cfg['host'])} from "
                       f"{info.get('window_start')}: checkpointing and stopping")
        self.on_term(signal.SIGTERM, None)

    # ---- steps --------------------------------------------------------------------

    def fetch_bundle(self) -> Path:
        digest = self.cfg["bundle_hash"]
        target: Path = self.home / "bundles" / digest
        if (target / ".podctl-complete").exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            archive = Path(tmp) / "bundle.tar.gz"
            self.bucket.download_file(self.cfg["bundle_object"], str(archive))
            # Only the bytes podctl packed: whoever can write the bucket must not get to
            # choose what every host unpacks and runs (the boot checks the agent the same way).
            sha = hashlib.sha256()
            with open(archive, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    sha.update(block)
            if sha.hexdigest() != digest:
                raise RuntimeError(f"the bundle {self.cfg['bundle_object']} in GCS does not match "
                                   f"its hash {digest[:12]}; run again to upload it anew")
            unpacked = Path(tmp) / "tree"
            unpacked.mkdir()
            safe_extract(archive, unpacked)
            (unpacked / ".podctl-complete").write_text(digest)
            try:
                os.rename(unpacked, target)
            except OSError:  # another run of the same bundle won the race
                if not (target / ".podctl-complete").exists():
                    raise
        return target

    def python_env(self) -> int:
        """The run's environment (agent_env.py), as the client locked it; a failure fails
        the run before its script starts."""
        spec = self.cfg.get("environment")
        if not spec:
            return 0
        self.logs.phase = "environment"
        self.publish("environment")
        run_id = self.cfg["run_id"]
        stopping = lambda: self.stopping or (self.run_dir / run_layout.STOP_FILE).exists()  # noqa: E731
        host = run_layout.host_tag(self.cfg["host"])
        env: agent_env.ClientBuiltEnv | agent_env.HostEnv
        if "archive" in spec:  # built on the client (the default)
            env = agent_env.ClientBuiltEnv(self.bucket, spec, home=self.home, host=host,
                                           log=self.logs.line, builder=self.cfg["host"] == 0,
                                           stopping=stopping)
        else:  # --build-on host
            env = agent_env.HostEnv(
                self.bucket, spec, home=self.home, host=host,
                builder=self.cfg["host"] == 0, log=self.logs.line, unpack=safe_extract,
                failed_marker=run_layout.env_failed_object(run_id),
                log_object=run_layout.env_build_log_object(run_id),
                build_log=self.run_dir / "env-build.log", stopping=stopping)
        try:
            self.venv = env.prepare()
        except agent_env.EnvStopped as e:
            self.stopping = True
            self.logs.line(f"[podctl] {e}")
            self.write_status(128 + signal.SIGTERM)
            return 128 + signal.SIGTERM
        except agent_env.EnvError as e:
            for line in str(e).splitlines():
                self.logs.line(f"[podctl] {line}")
            self.write_status(EXIT_SETUP_FAILED, error=str(e).splitlines()[0])
            return EXIT_SETUP_FAILED
        return 0

    @staticmethod
    def preempted() -> bool:
        """The metadata server's word, besides the SIGTERM: is this VM being preempted?"""
        try:
            preempted: str = agent_gcs.metadata_get("instance/preempted", timeout=2.0)
            return preempted.strip() == "TRUE"
        except Exception:  # no metadata server (a test running the agent by hand)
            return False

    def publish(self, state: str) -> None:
        """The run's state as a guest attribute (getGuestAttributes shows it); best effort."""
        try:
            agent_gcs.metadata_put("instance/guest-attributes/podctl/state",
                                   f"{self.cfg['run_id']} {state}", timeout=2.0)
        except Exception:  # a host without guest attributes enabled refuses it
            pass

    def publish_refusal(self, refused: str) -> None:
        """GCS's refusal as podctl/access (`RUN write STATUS PERMISSION EMAIL SCOPES`, the
        watcher's start-time word): the only way it reaches a client that follows the run
        without SSH (channels/boot.py explain_silence); best effort."""
        import re

        status = re.search(r"HTTP (\d{3})", refused)
        permission = re.search(r"Permission '([\w.]+)'", refused)
        try:
            found = json.loads(agent_gcs.metadata_get("instance/service-accounts/default/?recursive=true",
                                                      timeout=2.0))
            email = str(found.get("email") or "-")
            scopes = ",".join(str(s).rsplit("/", 1)[-1] for s in found.get("scopes") or []) or "-"
        except Exception:  # the refusal is said all the same, without the account
            email, scopes = "-", "-"
        word = (f"{self.cfg['run_id']} write {status.group(1) if status else '403'} "
                f"{permission.group(1) if permission else 'storage.objects.create'} {email} {scopes}")
        try:
            agent_gcs.metadata_put("instance/guest-attributes/podctl/access", word[:200], timeout=2.0)
        except Exception:  # a host without guest attributes enabled refuses it
            pass

    def setup(self, tree: Path, env: dict[str, str]) -> int:
        steps = []
        if self.cfg.get("setup"):
            steps.append(self.cfg["setup"])
        if not steps:
            return 0
        key = hashlib.sha256("\n".join(steps).encode()).hexdigest()[:16]
        marker = tree / f".podctl-setup-{key}"
        if marker.exists():
            self.logs.line("[podctl] setup already done for this bundle; skipped")
            return 0
        self.logs.phase = "setup"
        for step in steps:
            self.logs.line(f"[podctl] setup: {step}")
            code = self.run_process(["bash", "-c", step], tree, env)
            if code != 0:
                tail = "\n".join(self.logs.tail[-10:])
                self.logs.line(f"[podctl] setup failed with exit code {code}: {step}")
                self.write_status(EXIT_SETUP_FAILED, error=f"setup `{step}` exited {code}; last lines:\n{tail}")
                return EXIT_SETUP_FAILED
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        return 0

    def run_process(self, argv: list[str], cwd: Path, env: dict[str, str]) -> int:
        """Run ARGV in a session of its own; its lines to the log; -> its exit code.
        The process ends the run when it exits: the agent reads what it left in the
        pipe, then ends every process it left behind (a child holding the pipe
        open must not keep the run going, nor outlive it)."""
        self.child = child = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True)
        assert child.stdout is not None
        if self.stopping:  # a stop that came while the process was being started
            self.on_term(signal.SIGTERM, None)
        try:
            self._pump(child)
            code = child.wait()
        finally:
            self.end_leftovers(session=child.pid)
            child.stdout.close()
        return 128 - code if code < 0 else code  # killed by signal N -> 128 + N

    def _pump(self, child: subprocess.Popen[bytes]) -> None:
        """Lines from the child's pipe to the log, split at "\\n" only (and "\\r\\n"), until
        every writer closed it, or the child has exited and the pipe stayed quiet (or
        DRAIN_SECONDS passed): whoever still holds it is a leftover."""
        assert child.stdout is not None
        fd = child.stdout.fileno()
        os.set_blocking(fd, False)
        lines = _LineSplitter()
        exited_at: float | None = None
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                data = None
                if selector.select(0.2):
                    try:
                        data = os.read(fd, 1 << 16)
                    except BlockingIOError:  # woken, but another reader was faster
                        data = None
                    if data == b"":
                        break  # end of file: no process holds the pipe any more
                if data:
                    self.learn_process()  # before these lines: the index the script wrote first
                    for line in lines.feed(data):
                        self.logs.line(_text(line))
                now = time.monotonic()
                if self.logs.refused and not self.stopping:  # its lines reach nobody: end it
                    self.logs.line(f"[podctl] GCS refused this host's service account "
                                   f"({self.logs.refused}); stopping the script")
                    self.publish_refusal(self.logs.refused)
                    self.on_term(signal.SIGTERM, None)
                if exited_at is None:
                    if child.poll() is not None:
                        exited_at = now
                    elif self.stop_deadline is not None and now > self.stop_deadline:
                        self._kill_past_the_stop(child)
                elif not data or now - exited_at > DRAIN_SECONDS:
                    break
        if lines.partial:
            self.logs.line(_text(lines.rest()))

    def _kill_past_the_stop(self, child: subprocess.Popen[bytes]) -> None:
        # A script stopped (state T: SIGSTOP, a debugger) cannot take a
        # SIGTERM: kept for the status, where podctl finds who froze a run.
        self.killed_state = (agent_watch.process_state(child.pid) or {}).get("state")
        self.logs.line("[podctl] the script was stopped (process state T) and "
                       "could not take the stop; killing it" if self.killed_state == "T"
                       else "[podctl] the script ignored the stop; killing it")
        with _quiet():
            os.killpg(child.pid, signal.SIGKILL)
        self.stop_deadline = float("inf")

    def end_leftovers(self, session: int) -> None:
        """SIGTERM to every process the script left running, SIGKILL to what is left
        after LEFTOVER_GRACE_SECONDS; returns once they are gone."""
        if self.child is not None and self.child.poll() is None:  # the agent itself failed
            with _quiet():
                os.killpg(session, signal.SIGTERM)
        told = False
        for sig, grace in ((signal.SIGTERM, LEFTOVER_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
            pids = leftovers(session)
            if not pids:
                break
            if not told:
                told = True
                self.logs.line(f"[podctl] the script left {len(pids)} process"
                               f"{'es' if len(pids) > 1 else ''} running; ending "
                               f"{'them' if len(pids) > 1 else 'it'}")
            for pid in pids:
                with _quiet():
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                _reap()
                if not leftovers(session):
                    break
                time.sleep(0.05)
        with _quiet():
            os.killpg(session, signal.SIGKILL)  # without /proc: the session's own group
        _reap()

    def environment(self, tree: Path) -> dict[str, str]:
        cfg = self.cfg
        env = dict(os.environ)
        env.update({
            "PODCTL_RUN_ID": cfg["run_id"],
            "PODCTL_PROCESS_ID": str(cfg["process_id"]),
            "PODCTL_NUM_PROCESSES": str(cfg["num_processes"]),
            "PODCTL_CHECKPOINT_DIR": cfg["checkpoint_dir"],
            "PODCTL_BUNDLE_DIR": str(tree),
            # for podctl's stall watch: the step done (each step), the stacks on SIGUSR1
            # (sent only once the script wrote its pid to the handler file: agent_watch.py)
            "PODCTL_PROGRESS_FILE": str(self.run_dir / agent_watch.PROGRESS_FILE),
            "PODCTL_STACKS_FILE": str(self.run_dir / agent_watch.STACKS_FILE),
            "PODCTL_STACKS_HANDLER_FILE": str(self.run_dir / agent_watch.STACKS_HANDLER_FILE),
            "JAX_COORDINATOR_ADDRESS": cfg["coordinator"],
            "TPU_WORKER_ID": str(cfg["worker_id"]),
            "TPU_WORKER_HOSTNAMES": ",".join(cfg["worker_hostnames"]),
            "PYTHONUNBUFFERED": "1",
        })
        if "JAX_COMPILATION_CACHE_DIR" not in env:  # the image's own choice stands
            env.update(jax_cache_env(self.home))
        if self.venv is not None:  # `python3` is the run's environment's
            env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
            env["VIRTUAL_ENV"] = str(self.venv)
        env.update(cfg.get("slice_env", {}))  # MEGASCALE_* for multislice
        env.update(cfg.get("env", {}))  # the user's --env, last, as data
        agent_control.prepare_env(env, cfg, self.run_dir)  # `podctl profile`, --xla-dump
        return env

    @property
    def stopped_by_podctl(self) -> bool:
        """Only podctl's stop leaves the marker: a SIGTERM from anywhere else (a TPU
        VM's preemption notice, a host going away) is a failure that fails the job fast."""
        marker: Path = self.run_dir / run_layout.STOP_FILE
        return marker.exists()

    def stop_asked(self) -> bool:
        """A stop or halt came (signal, marker, or GCS through the control thread)."""
        if self.stopping or (self.run_dir / run_layout.STOP_FILE).exists():
            self.stopping = True
        return self.stopping

    def close_control(self) -> None:
        """The control thread's end (its last traces and the XLA dump shipped), once."""
        control, self.control = self.control, None
        if control is not None:
            control.close()

    def _claim_the_chips(self, stopping: bool = False) -> None:
        """This host's chips are this run's (agent_chips.py); best effort: the rule is
        there to refuse a second run in one line, libtpu's lock is what keeps it out."""
        try:
            agent_chips.claim(self.cfg["run_id"], os.getpid(), stopping)
        except OSError as e:
            self.logs.line(f"[podctl] cannot say on {run_layout.host_tag(self.cfg['host'])} that this run "
                           f"holds the chips ({e}): another run may be started here meanwhile")

    def write_status(self, code: int, error: str | None = None) -> None:
        agent_chips.release(self.cfg["run_id"])  # the script and what it left have ended
        if (self.run_dir / run_layout.STATUS_FILE).exists():
            return
        self.close_control()  # its last words before the lines close
        self.learn_process()  # a script that wrote its index and exited without a word since
        status = {"host": self.cfg["host"], "exit_code": code, "ended": time.time(),
                  "lines": self.logs.lines, "stopped": self.stopped_by_podctl, "error": error,
                  "preempted": self.preempted(), "maintenance": self.maintenance,
                  "phases": self.logs.phases, "process_index": self.logs.process_index,
                  # a failure's last lines: podctl reads a runtime error naming the chip here
                  "tail": self.logs.tail[-TAIL_IN_STATUS:] if code else [],
                  "fatal": self.logs.fatal if code else [], "killed_state": self.killed_state}
        # Every line in GCS first: readers take the status as the end of this host's lines.
        if not self.logs.close():
            status["unshipped_lines"] = self.logs.unshipped
        data = json.dumps(status)
        self.logs.persist(lambda: self.logs._upload(
            run_layout.status_object(self.cfg["run_id"], self.cfg["host"]), data, "application/json",
            attempts=3))
        (self.run_dir / run_layout.STATUS_FILE).write_text(data)

    def main(self) -> int:
        become_subreaper()
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        signal.signal(signal.SIGUSR1, self.on_stacks)
        threading.Thread(target=self._stacks_loop, name="podctl-stacks", daemon=True).start()
        # Only now can a stop find us by pid; one asked for earlier left a marker.
        (self.run_dir / run_layout.PID_FILE).write_text(str(os.getpid()))
        if (self.run_dir / run_layout.STOP_FILE).exists():
            self.stopping = True
        self.logs.start()
        self._claim_the_chips(self.stopping)  # whoever runs next here sees it, root or not
        said = agent_chips.open_the_lock_to_all()
        if said:
            self.logs.line(f"[podctl] {said}")
        self.logs.heartbeat(force=True)
        # From the start: a stop (or halt) asked while the bundle or the environment is being
        # fetched ends the run before its script starts; profile requests wait for the script.
        self.control = agent_control.Control(self.cfg, self.bucket, self.run_dir, self.logs.line,
                                             stacks=self.stacks_asked.set)
        self.control.start()
        try:
            try:
                tree = self.fetch_bundle() if self.cfg.get("bundle_hash") else self.run_dir
                code = self.python_env()
                if code:
                    return code
                env = self.environment(tree)
                code = 0 if self.stop_asked() else self.setup(tree, env)
                if code:
                    return code
                if self.stop_asked():
                    code = 128 + signal.SIGTERM
                else:
                    self.logs.phase = "running"
                    self.publish("running")
                    self.logs.heartbeat(force=True)
                    argv = self.cfg.get("command") or ["python3", self.cfg["script"], *self.cfg.get("args", [])]
                    watcher = agent_maintenance.watch(self.cfg, self.on_maintenance, agent_gcs.metadata_get)
                    try:
                        code = self.run_process(argv, tree, env)
                    finally:
                        if watcher is not None:
                            watcher.stop()
            finally:
                self.close_control()
        except Exception as e:  # the agent's own failure: say so in the run's logs and status
            self.logs.line(f"[podctl] agent failed on {run_layout.host_tag(self.cfg['host'])}: {e!r}")
            code = EXIT_AGENT_FAILED
            self.write_status(code, error=repr(e))
            return code
        self.logs.phase = "done"
        self.publish(f"done {code}")
        refused = self.logs.refused
        self.write_status(code, error=f"GCS refused the host's account: {refused}" if refused else None)
        return code


def main(argv: list[str]) -> int:
    run_dir = Path(argv[1]).resolve()
    cfg = json.loads((run_dir / run_layout.CONFIG_FILE).read_text())
    return Agent(cfg, run_dir).main()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
