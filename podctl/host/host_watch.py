"""podctl's watcher: one per TPU VM host, started by the slice's startup script.

Inlined in boot_script.BOOT_SCRIPT, written to /var/lib/podctl/ (root) or
~/.podctl/watch/ and run with the host's system python3 (3.10, standard library only;
it imports nothing from podctl: the names it shares with run_layout.py are copied below
and a test holds them equal). It holds no credentials of its own.

It long-polls the metadata server (`instance/attributes/?recursive=true` with
`wait_for_change`, the ETag of the last answer; an idle host costs one hanging GET and
one guest attribute write per BEAT_SECONDS and nothing else) and, when the node's `podctl-run` key names a run this
host has not started (a pointer: bucket, launch.json's object and hash, the agent's
hash, the run's first host on this node, signed by the client), and the slice's pin
accepts it (host_pin.py: a key pinned at the slice's creation signed it, for this node
and slice, not expired, in the pinned bucket and prefix; else `RUN refused WHY`, and
nothing is made on disk), it starts the run's agent as podctl's SSH
launch does (launch.start_command): once per run and host (the `started` marker), only
with launch.json and the agent's zip that match the pointer's hashes, only when no other
run holds the chips (owner.py's rule), the host's config derived by the zip's own
host_config.py written 0600, and the agent detached in a session of its own so that it
outlives the watcher. The run's host 0 first asks GCS, as identity.py does over SSH,
whether the node's account may write, read, delete and read the bucket's metadata. It
says what it did in guest attributes: podctl/watch (`ready VERSION`, or `failed WHY` when
it cannot start: a full disk, a home it may not write), podctl/beat (the host's clock,
whole seconds since the epoch, written every BEAT_SECONDS: its liveness, whose age podctl
reads; a thread keeps it while a run starts, which may take minutes), podctl/worker (its
worker number, by which podctl tells whose words are whose), podctl/run (`RUN
started`, `RUN refused WHY`, `RUN busy OTHER`, `RUN letting-go OTHER` while a stopping
run lets go of the chips), on host 0 when GCS denied the node,
podctl/access (`RUN STEP STATUS PERMISSION EMAIL SCOPES`), and on each node's worker 0
podctl/chips (`TIME RUN,...` or `TIME -`: the runs holding the chips, with each beat),
podctl/roles (`TIME ok`, `TIME unknown` or `TIME STEP STATUS PERMISSION EMAIL SCOPES`):
the same four calls on the pinned bucket, asked before `ready` and again every
ROLES_OK_SECONDS (every beat while denied), which podctl reads before it uploads anything.

A failure anywhere in a run's start (the claim's mkdir on a full disk included) is a
refusal with its cause in podctl/run, said by podctl at its next look.

At idle it holds no thread and imports only what the loop needs; the rest is imported
when a pointer arrives. A second watcher on the same host exits at once (flock).
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where it is used, at run time (the watcher starts at boot)
    import threading

# run_layout.py's names (test_host_watch holds them equal)
RUN_POINTER_KEY = "podctl-run"
BOOT_KEY = "podctl-boot"
GUEST_NAMESPACE = "podctl"
HOST_RUNS_DIR = ".podctl/runs"
CONFIG_FILE = "config.json"
STATUS_FILE = "status.json"
CHIPS_DIR = "podctl-chips"  # in the host's /tmp: RUN_ID -> "PID STATE" (agent_chips.py)
CHIPS_STOPPING = "stopping"
AGENTS_DIR = ".podctl/agents"  # the agents' zips by hash, shared with launch.BOOT's cache
# owner.LET_GO_SECONDS: how long a run asked to stop may take to let go of the chips
LET_GO_SECONDS = 630.0

POINTER_VERSION = 2  # {"v", "body": the signed JSON, "sig"} (host_pin.py)
SIGNED = "signed"  # a parsed pointer's (body text, signature), checked against the pin
# Where the pin is kept (host_pin.PIN_FILE): the watcher's own directory (main's argument)
PIN_DIR = os.path.dirname(os.path.abspath(__file__))
# vocabulary.WATCH_BEAT_SECONDS: how often podctl/beat is written (test_host_watch holds
# them equal); also the hanging GET's timeout, so that an idle loop beats on time
BEAT_SECONDS = 15
TIMEOUT_SEC = BEAT_SECONDS  # the metadata server's hanging GET
BACKOFF_SECONDS = (1.0, 60.0)  # after an error: from the first to the most, doubling
LOCK_FILE = "watch.lock"
PID_NAME = "watch.pid"
MAX_GUEST_VALUE = 200


def log(text: str) -> None:
    sys.stderr.write(time.strftime("%Y-%m-%dT%H:%M:%SZ ", time.gmtime()) + text + "\n")
    sys.stderr.flush()


# ---- the metadata server -------------------------------------------------------------

def metadata_host() -> str:
    return os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"


def metadata(method: str, path: str, body: bytes | None = None,
             timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One request to computeMetadata/v1/PATH -> (status, headers lowercased, body)."""
    host = metadata_host()
    conn = http.client.HTTPConnection(host, timeout=timeout)
    try:
        conn.request(method, "/computeMetadata/v1/" + path, body=body,
                     headers={"Metadata-Flavor": "Google"})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def attributes(etag: str = "NONE", wait: bool = True) -> tuple[dict[str, Any], str]:
    """The node's attributes (every key, verbatim) and the answer's ETag. WAIT: answer
    only once they differ from ETAG (NONE: at once), or after TIMEOUT_SEC."""
    path = "instance/attributes/?recursive=true&alt=json"
    if wait:
        path += f"&wait_for_change=true&timeout_sec={TIMEOUT_SEC}&last_etag={etag}"
    status, headers, data = metadata("GET", path, timeout=TIMEOUT_SEC + 30.0)
    if status != 200:
        raise OSError(f"the metadata server answered {status} to {path}")
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError("the attributes are not a JSON object")
    return value, headers.get("etag") or etag


def report(key: str, value: str) -> None:
    """Guest attribute podctl/KEY = VALUE (getGuestAttributes shows it); best effort."""
    try:
        metadata("PUT", f"instance/guest-attributes/{GUEST_NAMESPACE}/{key}",
                 value[:MAX_GUEST_VALUE].encode(), timeout=5.0)
    except OSError as e:
        log(f"guest attribute {key}: {e}")


def beat() -> None:
    """podctl/beat: this watcher lives (the host's clock, whole seconds); and podctl/chips:
    "TIME RUN,RUN" (or "TIME -"), the runs whose agent holds this host's chips now
    (others' rule, a stopping one left out), which podctl reads before it uploads a run."""
    now = int(time.time())
    report("beat", str(now))
    try:
        live = ",".join(sorted(others("")["live"])) or "-"
    except Exception:  # said as unknown: podctl leaves the matter to the start
        live = "?"
    report("chips", f"{now} {live}")


class Beating:
    """While a run starts (GCS reads, the wait for another run to let go of the chips: up
    to minutes), a thread beats every BEAT_SECONDS, so that the start is not taken for a
    dead watcher; at idle the loop beats itself and no thread runs."""

    def __init__(self) -> None:
        self._stop = _nothing

    def start(self) -> None:
        import threading

        done = threading.Event()
        thread = threading.Thread(target=self._beat, args=(done,), name="beat", daemon=True)
        thread.start()

        def stop() -> None:
            done.set()
            thread.join(timeout=10.0)

        self._stop = stop

    @staticmethod
    def _beat(done: threading.Event) -> None:
        while not done.wait(BEAT_SECONDS):
            beat()

    def stop(self) -> None:
        self._stop()


def _nothing() -> None:
    pass


# ---- the pointer ---------------------------------------------------------------------

def _safe_name(text: object) -> bool:
    """A run id: one path component of letters, digits, '-', '_' and '.', not hidden."""
    return (isinstance(text, str) and 0 < len(text) <= 128 and not text.startswith(".")
            and all(c.isascii() and (c.isalnum() or c in "-_.") for c in text))


def _hex64(text: object) -> bool:
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def parse_pointer(text: object) -> dict[str, Any] | None:
    """The pointer in the node's `podctl-run` key, checked; None for none (an empty key
    or one podctl cleared); ValueError naming what is wrong with a bad one."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if not isinstance(text, str):
        raise ValueError("the pointer is not a string")
    try:
        outer = json.loads(text)
    except ValueError:
        raise ValueError("the pointer is not JSON") from None
    if not isinstance(outer, dict):
        raise ValueError("the pointer is not a JSON object")
    if outer.get("v") != POINTER_VERSION:
        raise ValueError(f"pointer version {outer.get('v')!r}, this watcher reads {POINTER_VERSION}")
    p: dict[str, Any] = _pins().signed_body(outer)  # its signature is checked against the pin in start()
    if not _safe_name(p.get("run")):
        raise ValueError("the pointer's run id is not a plain name")
    for key in ("bucket", "launch", "agent_object"):
        if not isinstance(p.get(key), str) or not p[key] or not p[key].isprintable():
            raise ValueError(f"the pointer's {key} is not a name")
    for key in ("sha256", "agent_sha"):
        if not _hex64(p.get(key)):
            raise ValueError(f"the pointer's {key} is not a sha256")
    first = p.get("first_host")
    if not isinstance(first, int) or isinstance(first, bool) or first < 0:
        raise ValueError("the pointer's first_host is not a host number")
    access = p.get("access")  # optional: the object the run's host 0 checks access with
    if access is not None and (not isinstance(access, str) or not access or not access.isprintable()):
        raise ValueError("the pointer's access is not a name")
    p[SIGNED] = (outer["body"], outer["sig"])
    return p


def _pins() -> ModuleType:
    """host_pin.py: beside this file on a host (the startup script writes both), in
    podctl.jobs where the client's tests import this module."""
    import importlib

    return importlib.import_module(f"{__package__}.host_pin" if __package__ else "host_pin")


def pin_refusal(pointer: dict[str, Any], attrs: dict[str, Any]) -> str | None:
    """Why the slice's pin (kept on first boot in PIN_DIR) refuses POINTER, or None."""
    pins = _pins()
    try:
        text, sig = pointer[SIGNED]
        pins.check(text, sig, pointer, pins.kept_pin(PIN_DIR, attrs), attrs, time.time())
    except pins.PinRefusal as e:
        return str(e)
    except OSError as e:  # the pin cannot be kept (a full disk): nothing is accepted
        return f"the slice's pin cannot be kept: {type(e).__name__}: {e}"
    return None


def keep_pin(attrs: dict[str, Any]) -> None:
    """On the watcher's first answer: the pin copied from the metadata, never again."""
    try:
        _pins().kept_pin(PIN_DIR, attrs)
    except Exception as e:  # said at the first pointer, which it refuses
        log(f"pin: {type(e).__name__}: {e}")


def host_index(pointer: dict[str, Any], attrs: dict[str, Any]) -> int:
    """This host's index in the run: the node's first host + this VM's worker number."""
    return int(pointer["first_host"]) + int(attrs["agent-worker-number"])


# ---- the host's run directories ------------------------------------------------------

def home() -> str:
    return os.path.expanduser("~")


def run_dir(run_id: str) -> str:
    return os.path.join(home(), HOST_RUNS_DIR, run_id)


def claim(run_id: str) -> bool:
    """Make RUN_ID's `started` marker (mkdir: atomic, as launch.start_command(once=True));
    False when the run was started here before (or has ended here: a stale pointer after
    a reboot never restarts a run)."""
    d = run_dir(run_id)
    if os.path.exists(os.path.join(d, STATUS_FILE)):
        return False
    old = os.umask(0o077)
    try:
        os.makedirs(d, exist_ok=True)
        os.mkdir(os.path.join(d, "started"))
    except FileExistsError:
        return False
    finally:
        os.umask(old)
    return True


def _alive_agent(pid_text: str, run_id: str) -> bool:
    """PID_TEXT names a live process (not a zombie) whose command line is RUN_ID's agent."""
    pid = pid_text.strip()
    if not pid.isdigit():
        return False
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next((line.split()[1] for line in f if line.startswith("State:")), "")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except (OSError, IndexError):
        return False
    return state not in ("", "Z", "X") and f"/{run_id}" in cmdline


def others(run_id: str) -> dict[str, list[str]]:
    """{"live": run ids, "stopping": run ids}: other runs whose agent is alive on this host,
    root's (through the watchers) and the login user's (over SSH) alike: owner.py's rule,
    read from the host's /tmp (a file per run, "PID STATE"; the process that run's agent)."""
    found: dict[str, list[str]] = {"live": [], "stopping": []}
    root = os.path.join(os.environ.get("TMPDIR") or "/tmp", CHIPS_DIR)
    try:
        names = sorted(n for n in os.listdir(root) if not n.startswith("."))
    except OSError:
        return found
    for other in names:
        if other == run_id:
            continue
        try:
            with open(os.path.join(root, other)) as f:
                pid, _, state = f.readline().strip().partition(" ")
        except OSError:
            continue
        if _alive_agent(pid, other):
            found["stopping" if state == CHIPS_STOPPING else "live"].append(other)
    return found


def wait_for_the_chips(run_id: str, let_go_seconds: float = LET_GO_SECONDS,
                       poll: float = 1.0) -> str | None:
    """None once no other run holds this host's chips; else the run that does (a live one
    at once, a stopping one after LET_GO_SECONDS)."""
    deadline = time.monotonic() + let_go_seconds
    while True:
        found = others(run_id)
        if found["live"]:
            return found["live"][0]
        if not found["stopping"]:
            return None
        if time.monotonic() > deadline:
            return found["stopping"][0]
        time.sleep(poll)


# ---- GCS, with the metadata server's token (as launch.BOOT) --------------------------

class Refused(Exception):
    """Why this host does not start the run (said in podctl/run)."""


TOKEN_TRIES = (2.0, 4.0, 8.0, 16.0)  # seconds between tries: a busy metadata server is no refusal


def _token() -> str:
    """The node's access token. A metadata server that times out or answers 5xx is asked
    again (512 hosts starting at once found one that did); a 4xx is a refusal."""
    said = "no answer"
    for pause in (*TOKEN_TRIES, None):
        try:
            status, _, data = metadata("GET", "instance/service-accounts/default/token")
        except OSError as e:
            said = f"{type(e).__name__}: {e}"
        else:
            if status == 200:
                token: str = json.loads(data)["access_token"]
                return token
            said = str(status)
            if status < 500:
                break
        if pause is None:
            break
        log(f"token: {said}; again in {pause:.0f} s")
        time.sleep(pause)
    raise Refused(f"no token from the metadata server ({said})")


def _gcs() -> str:
    return (os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com").rstrip("/")


def gcs_get(bucket: str, name: str) -> bytes:
    import urllib.error
    import urllib.parse
    import urllib.request

    q = urllib.parse.quote
    url = f"{_gcs()}/download/storage/v1/b/{q(bucket, safe='')}/o/{q(name, safe='')}?alt=media"
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + _token()})
    last: Exception | None = None
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=120) as r:
                body: bytes = r.read()
                return body
        except urllib.error.HTTPError as e:
            if e.code in (401, 403, 404):
                raise Refused(f"GCS answered {e.code} for gs://{bucket}/{name}") from None
            last = e
        except OSError as e:
            last = e
        time.sleep(2.0 * (attempt + 1))
    raise Refused(f"cannot read gs://{bucket}/{name}: {last}")


# What the run's host 0 asks before it starts, as identity.py's check over SSH asks
# worker 0: a node whose account or scopes keep it from writing (objectViewer alone), or
# from reading the bucket's metadata (orbax's saves need storage.buckets.get), would
# start an agent whose every upload fails, unseen. -> (step, status, permission) of the
# first call GCS refused with 401/403, or None.
ACCESS_STEPS = ("write", "read", "delete", "bucket")
WRITE_SCOPES = ("cloud-platform", "devstorage.read_write", "devstorage.full_control")  # identity.py's
_PERMISSIONS = {"write": "storage.objects.create", "read": "storage.objects.get",
                "delete": "storage.objects.delete", "bucket": "storage.buckets.get"}


def access_denied(bucket: str, name: str, timeout: float = 30.0) -> tuple[str, int, str] | None:
    verdict = access_verdict(bucket, name, timeout)
    return verdict if isinstance(verdict, tuple) else None


def access_verdict(bucket: str, name: str, timeout: float = 30.0) -> tuple[str, int, str] | str:
    """access_denied's (step, status, permission), or "ok" (all four answered), or
    "unknown" (no answer that says: GCS unreachable, a 5xx, no token)."""
    import re
    import urllib.error
    import urllib.parse
    import urllib.request

    b, o = urllib.parse.quote(bucket, safe=""), urllib.parse.quote(name, safe="")
    try:
        gcs, auth = _gcs(), {"Authorization": "Bearer " + _token()}
    except Exception:  # no token: the metadata server's matter, not the account's roles
        return "unknown"
    calls = {"write": (f"{gcs}/upload/storage/v1/b/{b}/o?uploadType=media&name={o}", b"podctl", "POST"),
             "read": (f"{gcs}/download/storage/v1/b/{b}/o/{o}?alt=media", None, "GET"),
             "delete": (f"{gcs}/storage/v1/b/{b}/o/{o}", None, "DELETE"),
             "bucket": (f"{gcs}/storage/v1/b/{b}?fields=name", None, "GET")}
    for step in ACCESS_STEPS:
        url, data, method = calls[step]
        headers = dict(auth, **({"Content-Type": "text/plain"} if data else {}))
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers),
                                        timeout=timeout) as r:
                r.read()
        except urllib.error.HTTPError as e:
            if e.code not in (401, 403):
                return "unknown"  # not a matter of identity (GCS down, ...): the agent will say
            found = re.search(r"Permission '([\w.]+)'", e.read()[:2000].decode("utf-8", "replace"))
            return step, e.code, found.group(1) if found else _PERMISSIONS[step]
        except OSError:
            return "unknown"
    return "ok"


def account() -> tuple[str, list[str]]:
    """The node's service account's email and scopes, from the metadata server."""
    try:
        status, _, data = metadata("GET", "instance/service-accounts/default/?recursive=true")
    except OSError:
        return "", []  # the denial is said all the same, without the account
    if status != 200:
        return "", []
    found = json.loads(data)
    return str(found.get("email", "")), [str(s) for s in found.get("scopes") or []]


def denial_word(run_id: str, denied: tuple[str, int, str], email: str, scopes: list[str]) -> str:
    """podctl/access: RUN STEP STATUS PERMISSION EMAIL SCOPES (the scopes' last words,
    comma-joined, cut to fit a guest attribute): what identity.refusal needs."""
    step, status, permission = denied
    head = f"{run_id} {step} {status} {permission} {email or '-'} "
    names = sorted((s.rsplit("/", 1)[-1] for s in scopes), key=lambda n: n not in WRITE_SCOPES)
    short = ",".join(names) or "-"  # the scopes that can write first: they survive the cut
    return head + short[:max(1, MAX_GUEST_VALUE - len(head))]


# The standing check (podctl/roles): each node's worker 0 asks the same four calls of the
# pinned bucket before it says `ready`, again every ROLES_OK_SECONDS, and every beat while
# GCS denies the node, so that podctl reads the nodes' roles before it uploads or patches
# anything (channels/boot.py check_access), and a grant is seen within a beat.
ROLES_OK_SECONDS = 300.0
ROLES_CALL_SECONDS = 10.0  # each call's timeout: an unreachable GCS delays `ready` this long, once


def roles_word(verdict: tuple[str, int, str] | str, checked: float, email: str, scopes: list[str]) -> str:
    """podctl/roles: "TIME ok", "TIME unknown", or "TIME STEP STATUS PERMISSION EMAIL
    SCOPES" (denial_word with the check's time, host clock, whole seconds, for the run)."""
    if isinstance(verdict, str):
        return f"{int(checked)} {verdict}"
    return denial_word(str(int(checked)), verdict, email, scopes)


def check_roles(attrs: dict[str, Any]) -> float | None:
    """On a node's worker 0 whose pin names a bucket: the standing check, said as
    podctl/roles -> seconds until the next one (None: this host does not check)."""
    if str(attrs.get("agent-worker-number", "")) != "0":
        return None
    try:
        pin = _pins().kept_pin(PIN_DIR, attrs)
    except Exception:  # a pin that cannot be kept: the first pointer says it
        return None
    if pin is None or not pin.get("bucket"):
        return None
    import socket

    # one name per watcher (a multislice's nodes check at once; a denial's recheck reuses it)
    name = f"{pin['prefix']}watch/roles-{socket.gethostname()}-{os.getpid()}"
    checked = time.time()
    verdict = access_verdict(pin["bucket"], name, ROLES_CALL_SECONDS)
    email, scopes = account() if isinstance(verdict, tuple) else ("", [])
    report("roles", roles_word(verdict, checked, email, scopes))
    return float(BEAT_SECONDS) if isinstance(verdict, tuple) else ROLES_OK_SECONDS


def fetch_launch(pointer: dict[str, Any]) -> dict[str, Any]:
    """launch.json, checked against the pointer's hash and naming the pointer's run."""
    import hashlib

    data = gcs_get(pointer["bucket"], pointer["launch"])
    if hashlib.sha256(data).hexdigest() != pointer["sha256"]:
        raise Refused("launch.json does not match the pointer's sha256")
    launch = json.loads(data)
    if not isinstance(launch, dict) or launch.get("run_id") != pointer["run"] \
            or launch.get("agent_sha") != pointer["agent_sha"]:
        raise Refused("launch.json names another run or agent than the pointer")
    return launch


def fetch_agent(pointer: dict[str, Any]) -> str:
    """The agent's zip, from the host's cache or GCS, checked against the pointer's hash."""
    import hashlib

    sha = pointer["agent_sha"]
    path = os.path.join(home(), AGENTS_DIR, sha + ".zip")
    try:
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == sha:
                return path
    except OSError:
        pass
    data = gcs_get(pointer["bucket"], pointer["agent_object"])
    if hashlib.sha256(data).hexdigest() != sha:
        raise Refused("the agent's zip does not match the pointer's agent_sha")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


def config_for(agent_zip: str, launch: dict[str, Any], host: int) -> dict[str, Any]:
    """host_config.for_host from the agent's own zip (the version the pointer names; a fresh
    namespace each time, so a later run's agent brings its own)."""
    import zipfile

    with zipfile.ZipFile(agent_zip) as z:
        source = z.read("host_config.py")
    namespace: dict[str, Any] = {"__name__": "podctl_host_config"}
    exec(compile(source, agent_zip + "/host_config.py", "exec"), namespace)
    config: dict[str, Any] = namespace["for_host"](launch, host)
    return config


def write_config(run_id: str, config: dict[str, Any]) -> str:
    """The host's config in its run directory, 0600 (it holds the --env values)."""
    d = run_dir(run_id)
    path = os.path.join(d, CONFIG_FILE)
    tmp = path + ".tmp"
    old = os.umask(0o077)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(config, f)
        os.replace(tmp, path)
    finally:
        os.umask(old)
    return path


def start_agent(agent_zip: str, run_id: str) -> None:
    """`python3 ZIP RUN_DIR` in a session of its own, output to agent.out, stdin
    /dev/null (launch.start_command's `setsid nohup`); `setsid -f` forks, so the agent
    is nobody's child here and lives on when the watcher ends."""
    import subprocess

    d = run_dir(run_id)
    old = os.umask(0o077)
    try:
        with open(os.path.join(d, "agent.out"), "ab") as out:
            subprocess.run(["setsid", "-f", "python3", agent_zip, d], cwd=d, stdin=subprocess.DEVNULL,
                           stdout=out, stderr=subprocess.STDOUT, check=True, timeout=30)
    finally:
        os.umask(old)


def start(pointer: dict[str, Any], attrs: dict[str, Any]) -> str | None:
    """Start POINTER's run on this host if it has not been; -> what was reported, or None
    when the run was started (or refused) here before."""
    run_id = pointer["run"]
    if any(os.path.exists(os.path.join(run_dir(run_id), name)) for name in ("started", STATUS_FILE)):
        return None  # claimed here before (claim's rule): its pointer is not judged again
    refusal = pin_refusal(pointer, attrs)
    if refusal is not None:
        return refuse_once(pointer, f"{run_id} refused {refusal}")
    beating = Beating()
    try:
        if not claim(run_id):  # a full disk fails here: a refusal with its cause, said at once
            return None
        beating.start()
        host = host_index(pointer, attrs)
        if host == 0 and pointer.get("access"):  # the run's host 0 asks for all, once
            denied = access_denied(pointer["bucket"], pointer["access"])
            if denied is not None:
                report("access", denial_word(run_id, denied, *account()))
                raise Refused(f"GCS denied the node's account {denied[2]} ({denied[1]})")
        launch = fetch_launch(pointer)
        agent_zip = fetch_agent(pointer)
        config = config_for(agent_zip, launch, host)
        stopping = others(run_id)["stopping"]
        if stopping:  # podctl waits as long as this host does (owner.LET_GO_SECONDS)
            report("run", f"{run_id} letting-go {stopping[0]}")
        busy = wait_for_the_chips(run_id)
        if busy is not None:
            state = f"{run_id} busy {busy}"
        else:
            write_config(run_id, config)
            start_agent(agent_zip, run_id)
            state = f"{run_id} started"
    except Refused as e:
        state = f"{run_id} refused {e}"
    except Exception as e:  # a bad launch.json, a full disk: said, and the watcher goes on
        state = f"{run_id} refused {type(e).__name__}: {e}"
    finally:
        beating.stop()
    log(state)
    report("run", state)
    return state


_refused: list[str] = []  # the last pointers refused by the pin: said once each
REFUSED_KEPT = 8


def refuse_once(pointer: dict[str, Any], state: str) -> str | None:
    """Say STATE for a pointer the pin refuses, once (each answer of the metadata server
    shows it again); -> STATE, or None when said before. Nothing is made on disk: a
    forged pointer cannot claim the run id it names."""
    body = pointer[SIGNED][0]
    if body in _refused:
        return None
    _refused[:] = [*_refused[-(REFUSED_KEPT - 1):], body]
    log(state)
    report("run", state)
    return state


def on_attributes(attrs: dict[str, Any]) -> str | None:
    """What one answer of the metadata server asks of this host."""
    try:
        pointer = parse_pointer(attrs.get(RUN_POINTER_KEY))
    except ValueError as e:
        log(f"ignoring the pointer: {e}")
        return None
    if pointer is None:
        return None
    return start(pointer, attrs)


# ---- the loop ------------------------------------------------------------------------

def lock(directory: str) -> IO[str] | None:
    """The host's one watcher: a lock held for the process's life, or None if another has it."""
    import fcntl

    f = open(os.path.join(directory, LOCK_FILE), "a")  # noqa: SIM115 (held for the process's life)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    with open(os.path.join(directory, PID_NAME), "w") as p:
        p.write(str(os.getpid()))
    return f


def watch(version: str | None = None) -> None:
    """Forever: wait for the node's attributes to change (at most BEAT_SECONDS), act on
    the pointer, beat."""
    etag, delay, said_ready = "NONE", BACKOFF_SECONDS[0], False
    next_beat, next_roles = 0.0, None
    while True:
        failed = False
        try:
            attrs, etag = attributes(etag)
            delay = BACKOFF_SECONDS[0]
        except Exception as e:  # the server restarting, a network hiccup: back off, never exit
            log(f"metadata: {type(e).__name__}: {e}; again in {delay:.0f} s")
            failed, etag = True, "NONE"
            try:  # a server without directory waits still answers a plain read
                attrs, _ = attributes(wait=False)
            except Exception:
                attrs = None
        if attrs is not None:
            if not said_ready:
                said_ready = True
                keep_pin(attrs)  # the first metadata this host saw: its pin, for good
                # first: podctl places a node's answer by it (getGuestAttributes names no
                # worker, and leaves out the hosts that said nothing: those still booting)
                report("worker", str(attrs.get("agent-worker-number", "")))
                beat()  # then: a ready watcher always has a beat to read
                next_beat = time.monotonic() + BEAT_SECONDS
                # before `ready`: a run podctl starts once it is ready finds the roles said
                next_roles = _roles_due(attrs)
                report("watch", f"ready {version or attrs.get(BOOT_KEY) or 'unknown'}")
            elif next_roles is not None and time.monotonic() >= next_roles:
                next_roles = _roles_due(attrs)
            try:
                on_attributes(attrs)
            except Exception as e:  # never exit: the next change may be the one that works
                log(f"pointer: {type(e).__name__}: {e}")
        if said_ready and time.monotonic() >= next_beat:
            beat()
            next_beat = time.monotonic() + BEAT_SECONDS
        if failed:
            time.sleep(min(delay, BEAT_SECONDS))
            delay = min(delay * 2, BACKOFF_SECONDS[1])


def _roles_due(attrs: dict[str, Any]) -> float | None:
    """check_roles now -> when the next is due (monotonic), None for never; a check
    that fails is logged and tried again at the usual pace."""
    try:
        wait = check_roles(attrs)
    except Exception as e:
        log(f"roles: {type(e).__name__}: {e}")
        wait = ROLES_OK_SECONDS
    return None if wait is None else time.monotonic() + wait


def main(argv: list[str]) -> int:
    global PIN_DIR
    directory = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    PIN_DIR = directory
    try:
        held = lock(directory)
    except Exception as e:  # a full disk, a directory it may not write: said, not only logged
        failure = f"failed {type(e).__name__}: {e}"
        log(failure)
        report("watch", failure)
        return 1
    if held is None:
        log("another watcher holds this host's lock; exiting")
        return 0
    log(f"watching {metadata_host()} for {RUN_POINTER_KEY} (pid {os.getpid()})")
    watch()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
