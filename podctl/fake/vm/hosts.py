"""Fake TPU VM hosts: an SSH server and a metadata server per host of every READY
node, each host on its own loopback address (addresses.py), running commands as
local processes in a per-host directory, with the machine's system python3 and
nothing else (a fresh TPU VM's image: podctl installs what a run needs).

The world (world.py) stays pure: it only says which nodes are READY. After every
`world.advance()` and every request that changes the world, the server calls
`HostManager.sync(world)`, which is synchronous: it binds (and listens on) the
sockets of newly READY nodes and writes their addresses into `networkEndpoints`
before any answer leaves, so no client ever sees a READY node without its hosts
(asyncssh starts accepting on those sockets a moment later; until then the kernel
queues the connections). Nodes that are no longer READY (deleted, preempted,
stopped, suspended, forgotten) lose their hosts in the same call: listeners
closed, connections cut, and every process the host started killed. A preempted
node's processes get a spot VM's notice instead: SIGTERM at once, SIGKILL after
`world.preempt_grace(node)` wall-clock seconds, with GCS still there to save a
checkpoint to; a node that leaves the world during its grace (deleted, reset)
and the manager's close() kill them at once. Detached
processes (setsid, nohup) are found by a token that each host puts into the
environment of everything it starts (TOKEN_VAR), by scanning /proc/*/environ;
Linux only. A process that wipes its own environment escapes; nothing else does.

When a node's hosts are up (listening), each runs the node's `startup-script` (boot.py),
as at every boot of a TPU VM; the `reboot` fault kills a host's processes and runs it
again, and the `no-ssh` fault (the world node's `_no_ssh`, so it outlives the hosts)
closes their SSH listeners. Per host, `boots`, `ssh_total` and `sessions_total` count
on the world's node (count, host_counters) and show in describe().

On disk, under the hosts root (HOSTS_ROOT/<project>/<zone>/<node-id>/):
`.ssh_host_ed25519_key` (one host key per node, kept across daemon restarts),
`.node-id` (the node's unique id: a re-created node gets a fresh directory and
key) and `host-NNNN/`, each host's own (its `/`: `startup-script`, `startup-script.log`,
`root/`, root's HOME, boot.py): `home/USER/`, the HOME of each user who
logs in (podctl's own user, an OS Login POSIX user: /home/USER as the profile's
homeDirectory says), and `tmp/`, the host's /tmp. A node's directory goes when it
leaves the world.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import asyncssh

from podctl.base import topology
from podctl.fake.api import oslogin, vpc
from podctl.fake.api.node_fields import host_metadata
from podctl.fake.storage import iam
from podctl.fake.vm import addresses, boot, image_python
from podctl.fake.vm.host_counters import COUNTERS, count, host_counters  # noqa: F401 (hosts' public names)
from podctl.fake.vm.host_ssh import ShellSession, SshServer, authorized_keys, public_blob
from podctl.fake.vm.metadata import MetadataServer, hostname

TOKEN_VAR = "PODCTL_FAKE_HOST_TOKEN"
# A TPU VM's login PATH (Ubuntu's default): the image's python3, nothing of podctl's.
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin"
# The fake's CPU stand-in for a TPU compiles at XLA CPU's -O0 (fake/README.md's table)
CPU_COMPILE_FLAGS = "--xla_backend_optimization_level=0"
JAX_COORDINATOR_PORT = 8476  # podctl's (jobs/launch.py): the port Google's TPU firewall opens
_POSIX_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")  # useradd's NAME_REGEX (Ubuntu's default)
MACHINE_NETWORK_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                        "http_proxy", "https_proxy", "no_proxy")
_KEY_FILE = ".ssh_host_ed25519_key"
NETWORK_FILE = "network.json"  # what the node's hosts may reach (vpc.reach), read by tpu_vm/sitecustomize.py
_ID_FILE = ".node-id"
_BACKLOG = 128
log = logging.getLogger(__name__)


def uv_cache_dir(root: Path) -> Path:
    """The fake hosts' uv cache: beside the shared environment store when there is one
    (every fake cloud of a test session), else the fake's own."""
    store = os.environ.get("PODCTL_FAKE_ENV_STORE")
    return Path(store) / "uv-cache" if store else root / ".uv-cache"


def _devices_per_host(node: dict[str, Any]) -> int:
    """CPU devices per fake host = what JAX sees on one of the node's real hosts
    (generations.toml: 4 on a v5p host, 8 on a one-VM v6e-8)."""
    return topology.parse_slice(str(node.get("acceleratorType", ""))).devices_per_host


def raise_nofile_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit: a v5p-12288 has 1,536 listeners."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def kill_tagged(match: Callable[[str], bool], sig: int = signal.SIGKILL) -> int:
    """Send SIG (SIGKILL) to every process whose TOKEN_VAR matches; repeat until a scan
    finds none new (a process may fork between the scan and the kill). Returns how many."""
    needle, me, sent = f"{TOKEN_VAR}=".encode(), os.getpid(), set()
    for _ in range(50):
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in sent or int(entry.name) == me:
                continue
            try:
                environ = Path(entry.path, "environ").read_bytes()
            except OSError:
                continue  # gone, or not ours
            for item in environ.split(b"\0"):
                if item.startswith(needle) and match(item[len(needle):].decode(errors="replace")):
                    found.append(int(entry.name))
                    break
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        sent.update(found)
    return len(sent)


def _proxies() -> list[str]:
    """HOST:PORT of this machine's proxies (its way to the internet, which a host with an
    external IP is given): a connection there is one outside, whatever its address."""
    from urllib.parse import urlsplit

    found = []
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        with contextlib.suppress(ValueError):
            url = urlsplit(os.environ.get(name) or "")
            if url.hostname:
                found.append(f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}")
    return sorted(set(found))


class Host:
    """One VM of a node: its port, its listener, its live connections and commands."""

    __slots__ = ("node", "index", "sock", "port", "address", "meta_sock", "meta_where", "meta_site", "acceptor",
                 "token", "alive", "conns", "sessions", "grace", "hostname", "external", "ext_sock",
                 "ext_acceptor", "ext_port")

    def __init__(self, node: NodeHosts, index: int, sock: socket.socket, meta_sock: socket.socket,
                 token: str):
        self.node, self.index, self.sock, self.token = node, index, sock, token
        self.address, self.port = sock.getsockname()[:2]  # the internal address
        # With external IPs: a second address where SSH (and nothing else) answers
        self.external: str | None = None
        self.ext_sock: socket.socket | None = None
        self.ext_acceptor: asyncssh.SSHAcceptor | None = None
        self.ext_port = 0
        self.meta_sock = meta_sock
        self.meta_site: Any = None  # the metadata server's aiohttp site, while it serves
        self.meta_where: tuple[str, int] = tuple(meta_sock.getsockname()[:2])
        self.hostname = hostname(node.node, index)
        self.acceptor: asyncssh.SSHAcceptor | None = None
        self.alive = True
        self.conns: set[asyncssh.SSHServerConnection] = set()
        self.sessions: set[ShellSession] = set()
        self.grace = 0.0  # > 0 once preempted: how long its commands may take to end

    @property
    def preempted(self) -> bool:
        return self.grace > 0

    @property
    def metadata_host(self) -> str:
        host, port = self.meta_where
        return f"{host}:{port}"

    @property
    def root(self) -> Path:
        """The host's own directory: what its users' homes and its /tmp are under."""
        return self.node.directory / f"host-{self.index:04d}"

    def home_of(self, user: str) -> Path:
        """USER's home on this host, ROOT/home/USER: each user their own, as the OS Login
        profile's homeDirectory (oslogin.home_directory) and Ubuntu give every user."""
        if not _POSIX_USER.match(user):
            # the guest agent makes no account for such a name; nobody can log in as one
            raise OSError(f"no user {user!r} on this host")
        home = self.root / oslogin.home_directory(user).lstrip("/")
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        return home

    def environment(self, user: str, client_env: Mapping[str, str]) -> dict[str, str]:
        """What a command sees: the host's identity, never the daemon's own env."""
        home, tmp = self.home_of(user), self.root / "tmp"  # /tmp is the host's, shared by its users
        env = dict(self.node.base_env)
        env.update({"HOME": str(home), "USER": user, "LOGNAME": user, "TMPDIR": str(tmp),
                    # no TPU_WORKER_*: a GCE TPU VM's sessions have none (GKE's webhook sets
                    # them in pods); the worker number is the metadata server's
                    "HOSTNAME": self.hostname, TOKEN_VAR: self.token,
                    # google-auth and podctl's agent find the metadata server by this name,
                    # tensorstore (orbax's arrays: the node's token for GCS) by the older one
                    "GCE_METADATA_HOST": self.metadata_host, "GCE_METADATA_IP": self.metadata_host,
                    "GCE_METADATA_ROOT": self.metadata_host,
                    # jax binds [::]:PORT by default, which two fake slices on one machine share
                    "JAX_COORDINATOR_BIND_ADDRESS": f"{self.address}:{JAX_COORDINATOR_PORT}",
                    # the one port the firewall admits at external addresses (sitecustomize.py)
                    "PODCTL_FAKE_SSH_PORT": str(self.port),
                    # who this host is in the node's network.json (sitecustomize.py's firewall)
                    "PODCTL_FAKE_ADDRESS": self.address,
                    # libtpu's /tmp/libtpu_lockfile, in this host's own /tmp (sitecustomize.py)
                    "PODCTL_FAKE_LIBTPU_LOCKFILE": str(tmp / "libtpu_lockfile")})
        if self.index in self.node.node.get("_no_zstd", ()):  # the `no-zstd` fault (faults.py)
            env["PATH"] = image_python.path_without_zstd(self.node.manager.image, HOST_PATH)
        # Like Ubuntu's sshd (AcceptEnv LANG LC_*): a client may set only the locale.
        env.update({k: v for k, v in client_env.items() if k == "LANG" or k.startswith("LC_")})
        tmp.mkdir(exist_ok=True)
        return env

    def vanish(self, grace: float = 0.0) -> None:
        """Listener closed, connections cut; command groups killed now, or with GRACE > 0
        (a preemption) left to the manager's SIGTERM now and SIGKILL after GRACE."""
        self.alive = False
        self.grace = grace
        if grace <= 0:
            self.close_metadata()
        for acceptor in (self.acceptor, self.ext_acceptor):
            if acceptor is not None:
                acceptor.close()
        for conn in list(self.conns):
            conn.abort()
        if grace <= 0:
            for session in list(self.sessions):
                session.kill()

    def close_metadata(self) -> None:
        """Its metadata server goes (at once, or at the end of a preemption's notice)."""
        manager = self.node.manager
        manager.metadata.forget(self)
        if self.meta_site is not None:
            manager.track(asyncio.ensure_future(self.meta_site.stop()))
            self.meta_site = None
        elif self.meta_sock.fileno() >= 0:
            self.meta_sock.close()


class NodeHosts:
    """The hosts of one READY node, sharing one host key and one server-options object."""

    def __init__(self, manager: HostManager, node: dict[str, Any], directory: Path, key: asyncssh.SSHKey):
        self.manager, self.node, self.directory = manager, node, directory
        self.name, self.id = node["name"], node["id"]
        self.hosts: list[Host] = []
        self.by_socket: dict[tuple[str, int], Host] = {}
        self.base_env: dict[str, str] = {}
        self._keys: tuple[Any, frozenset[tuple[str, bytes]]] = (None, frozenset())
        # Set (and replaced) when the metadata its hosts see changes: wakes the metadata
        # servers' hanging GETs (metadata.py); metadata_seq is the world's count it follows
        self.changed = asyncio.Event()
        self.metadata_seq = int(node.get("_metadata_seq", 0))
        self.options = asyncssh.SSHServerConnectionOptions(
            server_host_keys=[key], server_factory=partial(SshServer, self), encoding=None,
            allow_pty=False, x11_forwarding=False, agent_forwarding=False, login_timeout=60)

    def authorized(self) -> frozenset[tuple[str, bytes]]:
        """(user, key) pairs that may log in: with OS Login on for the node (oslogin.py),
        only keys imported into OS Login profiles, each for its POSIX username, and the
        node's `ssh-keys` are ignored, as a TPU VM's guest agent does; else `ssh-keys`."""
        metadata = host_metadata(self.node)  # a patched key works once it has propagated
        world = self.manager.world
        project = self.name.split("/")[1]
        if world is not None and oslogin.enabled(world, project, metadata):
            return frozenset((user, blob) for user, key in oslogin.login_keys(world)
                             if (blob := public_blob(key)) is not None)
        text = (metadata or {}).get("ssh-keys", "")
        if self._keys[0] != text:
            self._keys = (text, authorized_keys(metadata))
        return self._keys[1]

    def notify(self) -> None:
        """Wake every hanging GET of this node's metadata servers (they look again)."""
        self.changed.set()
        self.changed = asyncio.Event()

    async def listen(self) -> None:
        await asyncio.gather(*(self._listen(host) for host in self.hosts))
        boot.boot_node(self)  # the hosts are up: their startup-script runs (boot.py)

    async def _listen(self, host: Host) -> None:
        if not host.alive:
            host.sock.close()
            if host.ext_sock is not None:
                host.ext_sock.close()
            return
        try:
            if host.grace <= 0 and host.meta_sock.fileno() >= 0:
                host.meta_site = await self.manager.metadata.serve(host)
        except OSError as e:
            log.warning("fake host %s/%d cannot serve metadata: %s", self.name, host.index, e)
        if not host.alive:
            host.close_metadata()
            host.sock.close()
            return
        await self.serve_ssh(host)

    async def serve_ssh(self, host: Host) -> None:
        """SSH on the host's sockets; with the node's `no-ssh` fault on, none: its
        sockets are closed, so a connection is refused (faults.py)."""
        if self.node.get("_no_ssh"):
            for sock in (host.sock, host.ext_sock):
                if sock is not None:
                    sock.close()
            return
        try:
            acceptor = await asyncssh.listen(sock=host.sock, options=self.options, backlog=_BACKLOG)
        except (OSError, asyncssh.Error) as e:
            log.warning("fake host %s/%d cannot serve SSH: %s", self.name, host.index, e)
            host.sock.close()
            return
        host.acceptor = acceptor
        if host.ext_sock is not None:
            try:
                host.ext_acceptor = await asyncssh.listen(sock=host.ext_sock, options=self.options,
                                                          backlog=_BACKLOG)
            except (OSError, asyncssh.Error) as e:
                log.warning("fake host %s/%d cannot serve SSH at its external address: %s",
                            self.name, host.index, e)
                host.ext_sock.close()
        if not host.alive or self.node.get("_no_ssh"):  # it vanished (or no-ssh came) meanwhile
            for each in (host.acceptor, host.ext_acceptor):
                if each is not None:
                    each.close()
            host.acceptor = host.ext_acceptor = None


class HostManager:
    """Every fake host of one fake cloud; see the module docstring."""

    def __init__(self, root: Path, gcs_url: str = "", latency: float = 0.0):
        self.root, self.gcs_url, self.latency = Path(root), gcs_url, latency
        self.tokens = iam.Tokens()  # the GCS's own (FakeCloud sets it): metadata servers mint here
        self.nodes: dict[str, NodeHosts] = {}
        self.dirs: dict[str, tuple[str, Path]] = {}  # node name -> (node id, directory)
        self.failed: dict[str, str] = {}  # node name -> id of a node whose hosts could not start
        # Preempted nodes in their grace: name -> (node id, host tokens, the SIGKILL timer)
        self.dying: dict[str, tuple[str, list[Host], asyncio.TimerHandle | None]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self.prefix = hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:16]
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.plan = addresses.AddressPlan(str(self.root.resolve()))
        self.image = image_python.prepare(self.root)  # the hosts' python3: 3.10 where there is one
        self.metadata = MetadataServer(self)
        self.world: Any = None
        self.api_url = ""  # the fake's own API (a Google API for the hosts: the server sets it)
        self._network_key = ""

    def adopt(self) -> int:
        """At start: kill what a crashed predecessor on this root left running, and
        remember the node directories on disk so that those of gone nodes are removed."""
        for directory in self.root.glob("*/*/*"):
            project, zone, node_id = directory.relative_to(self.root).parts
            if project.startswith("."):
                continue  # trash on its way out
            with contextlib.suppress(OSError):
                name = f"projects/{project}/locations/{zone}/nodes/{node_id}"
                self.dirs[name] = ((directory / _ID_FILE).read_text().strip(), directory)
        return kill_tagged(lambda token: token.startswith(self.prefix + "."))

    def track(self, future: asyncio.Future[Any]) -> None:
        self._tasks.add(future)
        future.add_done_callback(self._tasks.discard)

    # ---- following the world ---------------------------------------------------

    def sync(self, world: Any) -> None:
        """Hosts for exactly the READY nodes of WORLD, now (see the module docstring)."""
        self.world = world
        ready = {name: n for name, n in world.nodes.items()
                 if n.get("state") == "READY" and not n.get("_hosts_down")}  # maintenance.py
        for name, (node_id, _, _) in list(self.dying.items()):
            node = world.nodes.get(name)
            if node is None or node.get("id") != node_id or node.get("state") != "PREEMPTED":
                self._kill_dying(name)  # deleted (or forgotten) during its grace: no more notice
        gone = [nh for name, nh in self.nodes.items()
                if ready.get(name) is not nh.node or ready[name].get("id") != nh.id]
        if gone:
            self._vanish(gone, world)
        for nh in self.nodes.values():
            seq = int(nh.node.get("_metadata_seq", 0))
            if seq != nh.metadata_seq:  # a patched map reached the hosts (world.py)
                nh.metadata_seq = seq
                nh.notify()
        for name, node in ready.items():
            if name not in self.nodes and self.failed.get(name) != node.get("id"):
                try:
                    self._start(node)
                except OSError as e:  # e.g. out of file descriptors: say so once, serve on
                    self.failed[name] = node.get("id")
                    log.error("the fake hosts of %s cannot start: %s", name, e)
        live = {name: node.get("id") for name, node in world.nodes.items()}
        self.failed = {name: i for name, i in self.failed.items() if live.get(name) == i}
        self.write_networks(world)
        for name, (node_id, directory) in list(self.dirs.items()):
            if live.get(name) != node_id and name not in self.nodes:
                del self.dirs[name]
                self._trash(directory)

    def _vanish(self, nodes: Iterable[NodeHosts], world: Any = None) -> None:
        tokens: set[str] = set()
        for nh in nodes:
            self.nodes.pop(nh.name, None)
            node = world.nodes.get(nh.name) if world is not None else None
            preempted = node is nh.node and node.get("state") == "PREEMPTED"
            grace = world.preempt_grace(node) if preempted else 0.0
            for host in nh.hosts:
                host.vanish(grace)
            nh.notify()  # their hanging metadata GETs end now
            if grace > 0:
                self._notice(nh, grace)
            else:
                tokens.update(host.token for host in nh.hosts)
        if tokens:
            kill_tagged(tokens.__contains__)

    def _notice(self, nh: NodeHosts, grace: float) -> None:
        """A spot VM's preemption notice: SIGTERM to everything the node's hosts started,
        SIGKILL after GRACE wall-clock seconds (by the loop's timer, since sync must not wait)."""
        kill_tagged(frozenset(host.token for host in nh.hosts).__contains__, signal.SIGTERM)
        try:
            timer = asyncio.get_running_loop().call_later(grace, self._kill_dying, nh.name)
        except RuntimeError:  # no loop to wait in (never so in the server): no grace then
            timer = None
        self.dying[nh.name] = (nh.id, list(nh.hosts), timer)
        if timer is None:
            self._kill_dying(nh.name)

    def _kill_dying(self, name: str) -> None:
        """The end of a preempted node's grace, or its cut short: SIGKILL what is left."""
        entry = self.dying.pop(name, None)
        if entry is None:
            return
        _, hosts, timer = entry
        if timer is not None:
            timer.cancel()
        for host in hosts:
            host.close_metadata()
        kill_tagged(frozenset(host.token for host in hosts).__contains__)

    def _start(self, node: dict[str, Any]) -> None:
        directory, key = self._node_dir(node)
        nh = NodeHosts(self, node, directory, key)
        # In place: the create operation's response, taken in world.advance(), shares
        # these dicts, so whoever reads the operation sees the addresses too.
        endpoints = node.setdefault("networkEndpoints", [])
        external = bool((node.get("networkConfig") or {}).get("enableExternalIps"))
        try:
            for i in range(int(node["_hosts"])):
                if i == len(endpoints):
                    endpoints.append({})
                _, ssh_sock, meta_sock = self.plan.take(str(endpoints[i].get("ipAddress") or ""))
                host = Host(nh, i, ssh_sock, meta_sock, f"{self.prefix}.{secrets.token_hex(8)}")
                nh.hosts.append(host)
                host.root.mkdir(exist_ok=True, mode=0o700)
                nh.by_socket[(host.address, host.port)] = host
                if external:
                    wanted = str((endpoints[i].get("accessConfig") or {}).get("externalIp") or "")
                    host.external, host.ext_sock = self.plan.take_external(wanted)
                    host.ext_port = host.ext_sock.getsockname()[1]
                    nh.by_socket[tuple(host.ext_sock.getsockname()[:2])] = host
        except OSError:
            for host in nh.hosts:
                for sock in (host.sock, host.meta_sock, host.ext_sock):
                    if sock is not None:
                        sock.close()
            raise
        for host, endpoint in zip(nh.hosts, endpoints):
            # As on Google Cloud: port 8470 is the TPU runtime's; SSH is on the address's
            # port 22 (or the fake's one SSH port). Only the macOS fallback, all hosts on
            # 127.0.0.1, names each host's own SSH port here.
            endpoint.update({"ipAddress": host.address,
                             "port": addresses.TPU_RUNTIME_PORT if self.plan.shared else host.port})
            if host.external is not None:
                endpoint["accessConfig"] = {"externalIp": host.external}
        # The node's name resolution (host_ssh.uts_preexec mounts it as /etc/hosts)
        (directory / "etc-hosts").write_text("127.0.0.1\tlocalhost\n" + "".join(
            f"{h.address}\t{h.hostname}\n" for h in nh.hosts))
        nh.base_env = self._base_env(node)
        self.nodes[nh.name] = nh
        self.track(asyncio.ensure_future(nh.listen()))

    def _base_env(self, node: dict[str, Any]) -> dict[str, str]:
        return {
            "PATH": f"{self.image.bin_dir}:{HOST_PATH}", "SHELL": "/bin/bash",
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            # a host's chips are XLA CPU devices; their compile at LLVM's -O0 (a TPU's is
            # libtpu's, which no CPU stands in for): half a small program's compile CPU
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={_devices_per_host(node)} {CPU_COMPILE_FLAGS}",
            "JAX_PLATFORMS": "cpu",
            "STORAGE_EMULATOR_HOST": self.gcs_url,
            "TENSORSTORE_GCS_HTTP_URL": self.gcs_url,
            "PODCTL_FAKE_HOST": "1",
            "PODCTL_FAKE_EXTERNAL_NET": addresses.EXTERNAL_NET,  # the firewall's (sitecustomize.py)
            # JAX finds the slice itself, as on a TPU VM (see tpu_vm/sitecustomize.py)
            "PYTHONPATH": str(Path(__file__).with_name("tpu_vm")),
            # the image's interpreter, which has no ensurepip (tpu_vm/sitecustomize.py)
            "PODCTL_FAKE_IMAGE_PYTHON": self.image.path,
            # templates/requirements.txt asks for jax[${PODCTL_JAX_EXTRA}]: CPU wheels here
            "PODCTL_JAX_EXTRA": "cpu",
            # uv's Python "downloads" come from the machine's interpreters (image_python.py)
            "UV_PYTHON_INSTALL_DIR": str(self.image.store), "UV_PYTHON_DOWNLOADS": "never",
            # what the node's hosts may reach (vpc.reach), kept current by write_networks
            "PODCTL_FAKE_NETWORK": str(self.nodes_dir(node) / NETWORK_FILE),
            **self._internet(node),
        }

    def _internet(self, node: dict[str, Any]) -> dict[str, str]:
        """With external IPs a host has the internet: here, how this machine reaches the
        package index (its proxy, its CA: a fake host is this machine) and the fake's uv
        cache shared by its hosts, as a nearby index mirror. Without, none of it: no route
        out (sitecustomize.py drops Python's connections; uv, pip and curl find no proxy),
        and an empty uv cache of the node's own, as a fresh VM has."""
        if not (node.get("networkConfig") or {}).get("enableExternalIps"):
            return {"UV_CACHE_DIR": str(self.nodes_dir(node) / ".uv-cache")}
        return {"UV_CACHE_DIR": str(uv_cache_dir(self.root)),
                **{k: v for k, v in os.environ.items() if k in MACHINE_NETWORK_VARS}}

    def nodes_dir(self, node: dict[str, Any]) -> Path:
        parts = node["name"].split("/")  # projects/P/locations/Z/nodes/ID
        return self.root.joinpath(parts[1], parts[3], parts[5])

    def write_networks(self, world: Any) -> None:
        """Each live node's network.json, again when a node, a rule or a subnet changed:
        what its hosts may reach (vpc.reach), Google's APIs' addresses, where each host
        counts its connections outside (outside-ADDRESS.log)."""
        key = json.dumps([sorted((name, nh.id, json.dumps(nh.node.get("networkConfig"), sort_keys=True),
                                  nh.node.get("tags") or []) for name, nh in self.nodes.items()),
                          world.networks, world.subnets, self.api_url], sort_keys=True, default=str)
        if key == self._network_key:
            return
        self._network_key = key
        peers = {name: [h.address for h in nh.hosts] for name, nh in self.nodes.items()}
        google = [u.split("://", 1)[-1].rstrip("/") for u in (self.gcs_url, self.api_url) if u]
        for nh in self.nodes.values():
            text = json.dumps({**vpc.reach(world, nh.node, peers), "google": google, "proxies": _proxies(),
                               "outside_log": str(nh.directory / "outside-{address}.log")}, indent=1)
            target = nh.directory / NETWORK_FILE
            with contextlib.suppress(OSError):
                if target.exists() and target.read_text() == text:
                    continue
                scratch = target.with_name(f".{NETWORK_FILE}.{os.getpid()}")
                scratch.write_text(text)
                os.replace(scratch, target)

    def outside(self, host: Host) -> list[str]:
        """HOST's connections outside GCS, the metadata server and its VPC's hosts, as its
        Pythons logged them (tpu_vm/sitecustomize.py): one "ADDRESS:PORT" each."""
        try:
            return (host.node.directory / f"outside-{host.address}.log").read_text().split()
        except OSError:
            return []

    def _node_dir(self, node: dict[str, Any]) -> tuple[Path, asyncssh.SSHKey]:
        """The node's directory and host key: kept for the same node, new for a new one."""
        parts = node["name"].split("/")  # projects/P/locations/Z/nodes/ID
        directory = self.root.joinpath(parts[1], parts[3], parts[5])
        id_file, key_file = directory / _ID_FILE, directory / _KEY_FILE
        node_id = str(node["id"])
        if directory.exists():
            try:
                same = id_file.read_text().strip() == node_id
                key = asyncssh.read_private_key(key_file) if same else None
            except (OSError, asyncssh.KeyImportError):
                key = None
            if key is not None:
                self.dirs[node["name"]] = (node_id, directory)
                return directory, key
            self._trash(directory)
        directory.mkdir(parents=True, mode=0o700)
        key = asyncssh.generate_private_key("ssh-ed25519", comment=node["name"])
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.export_private_key())
        id_file.write_text(node_id + "\n")
        self.dirs[node["name"]] = (node_id, directory)
        return directory, key

    def _trash(self, directory: Path) -> None:
        """Remove a node's directory: renamed away now, deleted in the background."""
        trash = self.root / f".trash-{secrets.token_hex(6)}"
        try:
            directory.rename(trash)
        except OSError:
            return
        threading.Thread(target=shutil.rmtree, args=(trash, True), daemon=True).start()

    # ---- admin -----------------------------------------------------------------

    def host(self, node_name: str, worker: int) -> Host:
        """Live host WORKER of a READY node; LookupError (saying why) if there is none."""
        nh = self.nodes.get(node_name)
        if nh is None:
            raise LookupError(f"{node_name} has no live hosts (it is not READY)")
        if not 0 <= worker < len(nh.hosts):
            raise LookupError(f"{node_name} has workers 0 to {len(nh.hosts) - 1}, not {worker}")
        if not nh.hosts[worker].alive:
            raise LookupError(f"worker {worker} of {node_name} was dropped already")
        return nh.hosts[worker]

    def drop_host(self, node_name: str, worker: int) -> None:
        """One host of a READY node vanishes (the node stays READY): a lost VM."""
        host = self.host(node_name, worker)
        host.vanish()
        kill_tagged(host.token.__eq__)

    def kill_processes(self, node_name: str, worker: int, sig: int = signal.SIGKILL) -> int:
        """Every process one host started gets SIG (a crash, an OOM kill); the host stays
        up and takes new SSH connections. Returns how many were signalled."""
        return kill_tagged(self.host(node_name, worker).token.__eq__, sig)

    def cut_ssh(self, node_name: str, worker: int) -> int:
        """Abort one host's SSH connections (no SSH disconnect: the client sees the TCP
        connection drop, as when a network path breaks); the listener stays. Their
        commands end as for any lost connection (host_ssh.ShellSession.connection_lost)."""
        conns = list(self.host(node_name, worker).conns)
        for conn in conns:
            conn.abort()
        return len(conns)

    def reboot(self, node_name: str, worker: int | None = None) -> list[int]:
        """Host WORKER of a READY node (every live host: None) reboots: its SSH
        connections cut, every process it started killed, then its startup-script runs
        again (boot.py). Its addresses, listeners and metadata server stay. Returns the
        workers rebooted."""
        if worker is not None:
            hosts = [self.host(node_name, worker)]
        else:
            nh = self.nodes.get(node_name)
            if nh is None:
                raise LookupError(f"{node_name} has no live hosts (it is not READY)")
            hosts = [h for h in nh.hosts if h.alive]
        for host in hosts:
            for conn in list(host.conns):
                conn.abort()
            for session in list(host.sessions):
                session.kill()
        kill_tagged(frozenset(h.token for h in hosts).__contains__)
        boot.boot_hosts(hosts)
        return [h.index for h in hosts]

    def apply_no_ssh(self, node_name: str) -> None:
        """The node's `no-ssh` switch (world node `_no_ssh`) on its live hosts now:
        listeners closed (connections refused; those open stay), or opened again."""
        nh = self.nodes.get(node_name)
        if nh is None:
            return  # not READY: its hosts read the switch when they come up
        off = bool(nh.node.get("_no_ssh"))
        for host in nh.hosts:
            if not host.alive:
                continue
            if off:
                for acceptor in (host.acceptor, host.ext_acceptor):
                    if acceptor is not None:
                        acceptor.close()
                host.acceptor = host.ext_acceptor = None
                for sock in (host.sock, host.ext_sock):
                    if sock is not None:
                        sock.close()
            elif host.acceptor is None and host.sock.fileno() < 0:  # else: serve_ssh is on its way
                try:
                    host.sock = addresses.bind_again(host.address, host.port)
                    if host.external is not None:
                        host.ext_sock = addresses.bind_again(host.external, host.ext_port)
                except OSError as e:
                    log.warning("fake host %s/%d cannot take SSH again: %s", nh.name, host.index, e)
                    continue
                self.track(asyncio.ensure_future(nh.serve_ssh(host)))

    # ---- guest attributes (the metadata server writes, getGuestAttributes reads) ----

    def guest(self, node_name: str, worker: int) -> dict[str, dict[str, str]]:
        node = self.world.nodes.get(node_name) if self.world is not None else None
        attributes: dict[str, dict[str, str]] = ((node or {}).get("_guest") or {}).get(str(worker), {})
        return attributes

    def set_guest(self, host: Host, namespace: str, key: str, value: str) -> None:
        """Kept on the world's node, so that World.guest_attributes answers with it."""
        store = host.node.node.setdefault("_guest", {}).setdefault(str(host.index), {})
        store.setdefault(namespace, {})[key] = value

    @property
    def ssh_port(self) -> int | None:
        """The one SSH port of every host; None in the fallback (each endpoint's port)."""
        return self.plan.ssh_port if self.plan.shared else None

    def describe(self) -> dict[str, Any]:
        return {name: {"addresses": [h.address for h in nh.hosts], "ports": [h.port for h in nh.hosts],
                       "external_addresses": [h.external for h in nh.hosts],
                       # each host's metadata server (its GCE_METADATA_HOST), as HOST:PORT
                       "metadata": [h.metadata_host for h in nh.hosts],
                       "alive": sum(h.alive for h in nh.hosts),
                       "connections": sum(len(h.conns) for h in nh.hosts),
                       "sessions": sum(len(h.sessions) for h in nh.hosts),
                       "no_ssh": bool(nh.node.get("_no_ssh")),
                       "workers": [host_counters(nh.node, h.index) | {"alive": h.alive}
                                   | self._outside_of(h) for h in nh.hosts]}
                for name, nh in self.nodes.items()}

    def _outside_of(self, host: Host) -> dict[str, Any]:
        seen = self.outside(host)
        return {"outside_total": len(seen), "outside_last": seen[-10:]}

    def outside_counts(self) -> dict[str, list[int]]:
        """Node name -> per worker, its connections outside GCS, the metadata server and
        its VPC's hosts (`podctl fake status --json`'s `outside_requests`)."""
        return {name: [len(self.outside(h)) for h in nh.hosts] for name, nh in self.nodes.items()}

    async def close(self) -> None:
        """Every host vanishes; waits for their listeners and commands to wind down."""
        conns = [c for nh in self.nodes.values() for h in nh.hosts for c in h.conns]
        for name in list(self.dying):
            self._kill_dying(name)  # no grace outlives the fake cloud
        self._vanish(list(self.nodes.values()))
        waits = [*self._tasks, *(asyncio.ensure_future(c.wait_closed()) for c in conns)]
        if waits:
            await asyncio.wait(waits, timeout=10)
        await self.metadata.close()
        trash = [str(directory) for directory in self.root.glob(".trash-*")]
        if trash:  # deleted by a process of its own: gone nodes' hosts hold their environments
            # (GBs, tens of thousands of files), which took the daemon past its stop timeout
            subprocess.Popen(["rm", "-rf", "--", *trash], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
