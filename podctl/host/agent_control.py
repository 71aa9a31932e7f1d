"""Requests to a running script, on the host agent's side (standard library only).

Shipped to hosts with agent.py (launch.AGENT_MODULES); imports nothing from podctl but
its sibling run_layout.py, which names every object below (podctl reads them by it too).
`podctl profile RUN` writes one object, gs://BUCKET/podctl/runs/RUN/control/profile.json
({"id", "steps", "hosts"}). Each host's agent reads its metadata every few seconds (one
small GET per host, not a listing), and when a new request names its host it drops the
request as a file into the script's control directory ($PODCTL_CONTROL_DIR), which the
template looks at between steps. The script captures a JAX profiler trace into
PODCTL_CONTROL_DIR/profile-ID/ and leaves profile-ID.done; the agent uploads the trace
in the layout TensorBoard's profile plugin (XProf) reads, one session per request with
every host in it:

    podctl/runs/RUN/profiles/plugins/profile/ID/host-NNNN.xplane.pb   (and the other files)
    podctl/runs/RUN/control/acks/ID/host-NNNN.json                    the host's answer

The owner's stop travels the same way: podctl/runs/RUN/control/stop.json ({"by",
"requested", "grace_seconds"}; podctl/host/run_layout.py names it) makes the agent stop the
script exactly as `podctl stop` over SSH does (the `stop` marker with its grace, then
SIGTERM to the agent itself), so a stop reaches the hosts without SSH: a budget check
run by another identity, whose key is not on the slice, still gives the script its
grace to checkpoint. The agent polls from its own start, so a stop asked while the bundle
or the environment is being fetched ends the run before its script starts.

podctl/runs/RUN/control/halt.json ({"grace": seconds or null, "by"}) stops the script the
same way (the marker with its grace, SIGTERM, SIGKILL after the grace) but is not the
owner's final word: fail-fast, the stall watch and the budget write it, and `--recover`
may relaunch the run after it (what the run's record says is podctl's business, not the
agent's). podctl/runs/RUN/control/stacks.json ({"id"}): each new id asks the agent for
the script's stacks, as SIGUSR1 does (agent_watch.capture_stacks), without SSH.

`podctl run --xla-dump` sets PODCTL_XLA_DUMP=1: the script's XLA_FLAGS gain
--xla_dump_to=A_LOCAL_DIR, and the agent uploads that folder to
podctl/runs/RUN/xla_dump/host-NNNN/ when the script has ended.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # on a host: agent_gcs is a sibling module; the type is for mypy only
    from podctl.host.agent_gcs import Bucket

try:  # on a host: the agent's zip holds its sibling modules at the top level
    import run_layout
except ImportError:  # imported by podctl itself
    from podctl.host import run_layout

POLL_SECONDS = 5.0  # a request waits at most this long (plus a step) to be seen
# Files the profiler names HOSTNAME + suffix (a hostname may hold dots: match the end)
HOST_SUFFIXES = (".xplane.pb", ".trace.json.gz", ".memory_profile.json.gz")


def prepare_env(env: dict[str, str], cfg: dict[str, Any], run_dir: Path) -> None:
    """The script's environment: where requests arrive, the run's GCS folder (the
    template writes TensorBoard scalars under it), and the XLA dump folder if asked."""
    control = run_dir / "control"
    control.mkdir(exist_ok=True)
    env["PODCTL_CONTROL_DIR"] = str(control)
    env["PODCTL_RUN_DIR"] = run_layout.run_url(cfg["bucket"], cfg["run_id"])
    if env.get("PODCTL_XLA_DUMP") == "1":
        flags = env.get("XLA_FLAGS", "")
        env["XLA_FLAGS"] = f"{flags} --xla_dump_to={run_dir / 'xla_dump'}".strip()


class Control:
    """A thread that takes the owner's stop, halts and stacks requests, hands `podctl
    profile` requests to the script and ships its traces. STACKS: called (from this
    thread) for each new stacks request."""

    def __init__(self, cfg: dict[str, Any], bucket: Bucket, run_dir: Path, say: Callable[[str], None] | None = None,
                 poll_seconds: float = POLL_SECONDS, stacks: Callable[[], None] | None = None):
        self.cfg, self.bucket, self.run_dir = cfg, bucket, run_dir
        self.run_id, self.host = cfg["run_id"], int(cfg["host"])
        self.dir = run_dir / "control"
        self.say = say or (lambda text: None)
        self.poll_seconds = poll_seconds
        self.generation: str | None = None
        self.stop_seen = False
        self.halt_seen = False
        self.stacks = stacks or (lambda: None)
        self.stacks_generation: str | None = None
        self.stacks_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="podctl-control", daemon=True)

    def start(self) -> None:
        """Take a stop or halt asked before the agent started at once (before it fetches
        anything or starts the script), then poll every POLL_SECONDS in a thread."""
        self.dir.mkdir(exist_ok=True)
        self._guarded(self.poll_stop)
        self._guarded(self.poll_halt)
        self._thread.start()

    def close(self) -> None:
        """After the script ended: ship traces it finished, and the XLA dump."""
        self._stop.set()
        self._thread.join(timeout=30)
        self._guarded(self.ship_traces)
        self._guarded(self.ship_xla_dump)

    def _loop(self) -> None:
        # At once first: a request made before the script started is waiting for it
        while True:
            self._guarded(self.poll)
            self._guarded(self.ship_traces)
            if self._stop.wait(self.poll_seconds):
                return

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:  # GCS hiccups: the next poll tries again; the run goes on
            self.say(f"[podctl] control: {fn.__name__}: {e}")

    # ---- requests in --------------------------------------------------------------

    def poll(self) -> None:
        self.poll_stop()
        self.poll_halt()
        self.poll_stacks()
        self.poll_profile()

    def poll_stop(self) -> None:
        """The owner's stop through GCS: as launch.stop_command does over SSH."""
        if not self.stop_seen:
            self.stop_seen = self._take_stop(run_layout.stop_request_object(self.run_id), "grace_seconds",
                                             "stop")

    def poll_halt(self) -> None:
        """A halt through GCS (fail-fast, stall, budget): the script stops as for a stop."""
        if not self.halt_seen:
            self.halt_seen = self._take_stop(run_layout.halt_request_object(self.run_id), "grace", "halt")

    def _take_stop(self, name: str, grace_key: str, what: str) -> bool:
        """The request NAME, if there is one: the stop marker (its grace from GRACE_KEY) and
        SIGTERM to the agent itself. -> whether it was there."""
        if not self.bucket.stat(name):
            return False
        try:
            request = json.loads(self.bucket.download(name))
        except ValueError:
            request = {}
        grace = request.get(grace_key) if isinstance(request, dict) else None
        stop = self.run_dir / run_layout.STOP_FILE
        if stop.exists():  # a stop came first (over SSH, or the other request): the agent has it
            return True
        if isinstance(grace, (int, float)) and not isinstance(grace, bool) and math.isfinite(grace) \
                and grace >= 0:
            stop.write_text(f"{float(grace)}\n")
        else:
            stop.touch()
        by = request.get("by") if isinstance(request, dict) else None
        by = by[:60] if isinstance(by, str) and by.isprintable() else None  # anyone's text
        self.say(f"[podctl] {what} asked through GCS{f' by {by}' if by else ''}: stopping the script")
        os.kill(os.getpid(), signal.SIGTERM)  # the agent's own handler: as an SSH stop
        return True

    def poll_stacks(self) -> None:
        """A new stacks request id: the script's stacks, as SIGUSR1 asks for them."""
        name = run_layout.stacks_request_object(self.run_id)
        meta = self.bucket.stat(name)
        version = str(meta.get("generation") or meta.get("updated")) if meta else None
        if version is None or version == self.stacks_generation:
            return
        data = self.bucket.download(name)
        self.stacks_generation = version
        try:
            request = json.loads(data)
        except ValueError:
            return
        ident = request.get("id") if isinstance(request, dict) else None
        if ident is None or str(ident) == self.stacks_id:
            return
        self.stacks_id = str(ident)
        self.stacks()

    def poll_profile(self) -> None:
        name = run_layout.profile_request_object(self.run_id)
        meta = self.bucket.stat(name)
        version = str(meta.get("generation") or meta.get("updated")) if meta else None
        if version is None or version == self.generation:
            return
        request = json.loads(self.bucket.download(name))
        self.generation = version
        hosts = request.get("hosts")
        if hosts is not None and self.host not in hosts:
            return
        ident = str(request["id"])
        if not ident.replace("-", "").isalnum():
            raise ValueError(f"a profile request with a bad id {ident!r}")
        tmp = self.dir / f".profile-{ident}.tmp"
        tmp.write_text(json.dumps({"id": ident, "steps": int(request.get("steps", 5))}))
        os.replace(tmp, self.dir / f"profile-{ident}.json")  # whole, or not at all
        self.say(f"[podctl] profile {ident}: tracing the next {request.get('steps', 5)} steps")

    # ---- traces out ---------------------------------------------------------------

    def ship_traces(self) -> None:
        for done in sorted(self.dir.glob("profile-*.done")):
            ident = done.name[len("profile-"):-len(".done")]
            info = json.loads(done.read_text() or "{}")
            files = []
            dest = run_layout.profile_session_prefix(self.run_id, ident)
            for path in sorted((self.dir / f"profile-{ident}").rglob("*")):
                if not path.is_file():
                    continue
                # jax names files by the machine's hostname; name them by podctl host,
                # so every host of the run lands in the one session, each its own file
                suffix = next((s for s in HOST_SUFFIXES if path.name.endswith(s)), "." + path.name)
                name = run_layout.profile_trace_object(self.run_id, ident, self.host, suffix)
                self.bucket.upload(name, path.read_bytes())
                files.append(name)
            ack = {"host": self.host, "files": files, **info}
            self.bucket.upload(run_layout.profile_ack_object(self.run_id, ident, self.host),
                               json.dumps(ack).encode(), "application/json")
            os.replace(done, done.with_suffix(".shipped"))
            self.say(f"[podctl] profile {ident}: {len(files)} file(s) uploaded to gs://"
                     f"{self.cfg['bucket']}/{dest}/")

    def ship_xla_dump(self) -> None:
        root = self.run_dir / "xla_dump"
        if not root.is_dir():
            return
        count = 0
        dest = run_layout.xla_dump_prefix(self.run_id, self.host)
        for path in sorted(root.rglob("*")):
            if path.is_file():
                self.bucket.upload(f"{dest}{path.relative_to(root).as_posix()}",
                                   path.read_bytes(), "text/plain")
                count += 1
        self.say(f"[podctl] XLA dump: {count} file(s) uploaded to gs://{self.cfg['bucket']}/{dest}")
