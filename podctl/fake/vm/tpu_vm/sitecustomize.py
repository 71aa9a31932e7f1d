"""Python on a fake TPU VM host: JAX finds the slice by itself, as on a real one.

On a real TPU VM, `jax.distributed.initialize()` with no arguments works: libtpu is
there, so JAX asks the metadata server for the worker list and this worker's number
(its GceTpuCluster). A fake host has CPU devices and no libtpu, so JAX would look for
no TPU cluster and fail ("Number of processes must be defined"). The fake puts this
directory on its hosts' PYTHONPATH; when JAX's distributed module loads, this adds a
cluster that asks the host's metadata server the same (`agent-worker-number`,
`worker-network-endpoints`), as GceTpuCluster does; where the environment names the slice
(TPU_WORKER_HOSTNAMES, TPU_WORKER_ID, as podctl's agent gives every run, and as GKE's
webhook gives pods) it reads that instead, as GkeTpuCluster does; MEGASCALE_* for
multislice. A host's SSH sessions carry no TPU_WORKER_* (a GCE TPU VM sets none). Scripts
run unchanged on both.

And, a fake host being this machine: the coordinator JAX starts on process 0 binds
the host's own (loopback) address, not every interface, unless the script chose.

Rules of a real TPU VM kept here too:
- The default VPC's firewall: from a host, another host's (or its own) external address
  answers on SSH only, and no host can bind an external address (Google NATs it; the
  VM's interface has only its internal one: EADDRNOTAVAIL). Python's socket.connect() to an external address on another
  port fails as a dropped SYN does, with ETIMEDOUT (at once, not after the kernel's
  retries). A C library's connect (gRPC in JAX's coordinator client) is not seen here;
  it finds nothing listening at the external address instead, because what a host
  opens binds its internal address (JAX_COORDINATOR_BIND_ADDRESS), and keeps retrying
  until JAX's timeout, as on Google.
- One TPU owner: libtpu opens the host's /tmp/libtpu_lockfile (O_CREAT|O_RDWR, 0644) and
  takes a lockf lock when JAX starts its backend; a second process then fails with
  libtpu's message until the first exits. The file stays after its holder exits, its
  owner's: another user (not root) cannot open a file it may not write, and libtpu then
  says the TPU is in use "by another process probably owned by another user". The fake
  host's /tmp is its own TMPDIR (PODCTL_FAKE_LIBTPU_LOCKFILE names the file); its users
  share one uid, so the file's owner is kept beside it (`_LockFile`).
- The image's Python has no ensurepip (Ubuntu's python3 without python3.10-venv):
  `python3 -m ensurepip` says "No module named ensurepip" and `python3 -m venv X` fails
  with Ubuntu's message (`--without-pip` works), for the image's interpreter only
  (PODCTL_FAKE_IMAGE_PYTHON), not for uv's.

And one of its identity: google-cloud-storage takes the node's credentials (the metadata
server's token) as on a TPU VM, rather than going anonymous for the emulator
(`_node_credentials`).

Only the standard library; nothing happens until (and unless) JAX, venv or
google-cloud-storage is imported. A JAX whose insides differ is left as it is (the
script then passes the values itself).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


def _metadata(key: str) -> str | None:
    """instance/attributes/KEY from the host's metadata server (GCE_METADATA_IP, as JAX's
    get_metadata), None where it has no such key."""
    import urllib.error
    import urllib.request

    host = os.environ.get("GCE_METADATA_IP") or os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    request = urllib.request.Request(f"http://{host}/computeMetadata/v1/instance/attributes/{key}",
                                     headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            value: str = answer.read().decode()
            return value
    except urllib.error.HTTPError:
        return None


def _fake_tpu_vm_cluster() -> None:
    from jax._src.clusters import cloud_tpu_cluster

    class FakeTpuVmCluster(cloud_tpu_cluster.BaseTpuCluster):  # registers itself with JAX
        name = "podctl-fake-tpu-vm"

        @classmethod
        def is_env_present(cls) -> bool:
            return os.environ.get("PODCTL_FAKE_HOST") == "1" and bool(
                os.environ.get("TPU_WORKER_HOSTNAMES") or _metadata("agent-worker-number"))

        @staticmethod
        def _get_process_id_in_slice() -> int:
            if os.environ.get("TPU_WORKER_HOSTNAMES"):  # GKE's way, and podctl's agent's
                return int(os.environ["TPU_WORKER_ID"])
            return int(_metadata("agent-worker-number") or 0)  # GCE's

        @staticmethod
        def _get_worker_list_in_slice() -> list[str]:
            if os.environ.get("TPU_WORKER_HOSTNAMES"):
                return os.environ["TPU_WORKER_HOSTNAMES"].split(",")
            # GCE's NAME:NUMBER:IP triples, as GceTpuCluster reads them
            return [w.split(":")[-1] for w in (_metadata("worker-network-endpoints") or "").split(",")]

        # a real TPU VM may also find these in its metadata; a fake host has only its env
        @staticmethod
        def _get_num_slices() -> int:
            return int(os.environ.get("MEGASCALE_NUM_SLICES") or 1)

        @staticmethod
        def _get_slice_id() -> int:
            return int(os.environ.get("MEGASCALE_SLICE_ID") or 0)

        @classmethod
        def get_coordinator_address(cls, timeout_secs: int | None,
                                    override_coordinator_port: str | None) -> str:
            host = (os.environ.get("MEGASCALE_COORDINATOR_ADDRESS")
                    or cls._get_worker_list_in_slice()[0]).split(":")[0]
            return f"{host}:{override_coordinator_port or cloud_tpu_cluster.coordinator_port}"

        @classmethod
        def get_local_process_id(cls) -> int | None:
            return None  # one process per host, seeing all of its devices


IN_USE = ("ABORTED: The TPU is already in use by process with pid {pid}. "
          "Not attempting to load libtpu.so in this process.")
# libtpu's words where the lock file cannot be opened (or its holder cannot be seen)
ANOTHER_USER = ('ABORTED: The TPU is already in use by another process probably owned by another user. '
                'Run "$ sudo lsof -w /dev/accel0" to figure out which process is using the TPU. '
                'If you still get this message, run "$ sudo rm /tmp/libtpu_lockfile".')


class _LockFile:
    """libtpu's lock file on a host whose users share one uid: its owner (the user who
    made it) is kept in OWNER_SUFFIX's file beside it, so that another user's open for
    writing fails as the kernel would refuse it (EACCES: mode 0644, not theirs, not
    root). A mode its owner widened (chmod o+w) lets anyone in, as on a VM."""

    OWNER_SUFFIX = ".fake-owner"

    def __init__(self, path: str) -> None:
        self.path, self.user = path, os.environ.get("USER") or "root"

    def open(self) -> int:
        """-> an fd open for writing; PermissionError as a VM's kernel would say it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            with open(self.path + self.OWNER_SUFFIX, "w") as f:
                f.write(self.user)
            return fd
        try:
            with open(self.path + self.OWNER_SUFFIX) as f:
                owner = f.read().strip()
        except OSError:
            owner = self.user  # made by a hand other than libtpu's: taken as the caller's
        if self.user != "root" and owner != self.user and not os.stat(self.path).st_mode & 0o002:
            raise PermissionError(13, f"Permission denied: {self.path!r} (owned by {owner})")
        return os.open(self.path, os.O_RDWR)


def _take_the_chips(module: object) -> None:
    """Backend start opens the host's lock file and takes a lockf lock on it (held until
    this process exits; not by its children), as libtpu does; a second holder fails at
    start, and so does a user who may not write another user's file."""
    lockfile = os.environ.get("PODCTL_FAKE_LIBTPU_LOCKFILE")
    init = getattr(module, "_init_backend", None)
    if not lockfile or init is None:
        return
    held: list[int] = []

    def take() -> None:
        import fcntl

        if held:
            return
        try:
            fd = _LockFile(lockfile).open()
        except PermissionError:
            raise RuntimeError(ANOTHER_USER) from None  # lockf(-1) fails; no holder to be seen
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RuntimeError(IN_USE.format(pid=holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        held.append(fd)

    def init_backend(platform: str) -> object:
        take()
        return init(platform)

    module._init_backend = init_backend  # type: ignore[attr-defined]


# Ubuntu's venv (Debian's patch to it) when ensurepip is missing: its words, on stdout, exit 1
NO_ENSUREPIP = """\
The virtual environment was not created successfully because ensurepip is not
available.  On Debian/Ubuntu systems, you need to install the python3-venv
package using the following command.

    apt install python{}.{}-venv

You may need to use sudo with that command.  After installing the python3-venv
package, recreate your virtual environment.

Failing command: {}
"""


def _the_image_python() -> bool:
    """Is this (or this venv's base) the image's interpreter, which has no ensurepip?"""
    image = os.environ.get("PODCTL_FAKE_IMAGE_PYTHON")
    if not image:
        return False
    # PREFIX/bin/python3.X
    return os.path.realpath(sys.base_prefix) == os.path.dirname(os.path.dirname(os.path.realpath(image)))


def _no_ensurepip() -> None:
    """The image's Python has no ensurepip module (Ubuntu ships it in python3.10-venv)."""
    sys.modules["ensurepip"] = None  # type: ignore[assignment]  # `-m ensurepip`: "No module named"


def _venv_without_ensurepip(module: object) -> None:
    """venv's pip step fails as Ubuntu's venv says it (its child runs isolated, `-I`,
    where this module is not loaded: the step is answered here)."""
    builder = module.EnvBuilder  # type: ignore[attr-defined]

    def setup_pip(self: object, context: object) -> None:
        cmd = [context.env_exec_cmd, "-Im", "ensurepip", "--upgrade", "--default-pip"]  # type: ignore[attr-defined]
        sys.stdout.write(NO_ENSUREPIP.format(*sys.version_info[:2], cmd))
        sys.exit(1)

    builder._setup_pip = setup_pip


class _Network:
    """What this host may reach, as the fake wrote it for the node (hosts.py's
    network.json, from fake/api/vpc.py: Google APIs with an external IP or Private Google
    Access; each host of the VPC at the TCP ports its firewall rules admit from here),
    read again whenever the fake rewrites it (a rule added, a subnet changed)."""

    def __init__(self) -> None:
        import ipaddress

        self.path = os.environ.get("PODCTL_FAKE_NETWORK", "")
        self.me = os.environ.get("PODCTL_FAKE_ADDRESS", "")
        self.metadata = os.environ.get("GCE_METADATA_HOST", "")
        self.external_net: ipaddress.IPv4Network | ipaddress.IPv6Network | None
        try:
            self.external_net = ipaddress.ip_network(os.environ.get("PODCTL_FAKE_EXTERNAL_NET", ""))
            self.ssh_port = int(os.environ.get("PODCTL_FAKE_SSH_PORT") or 22)
        except ValueError:
            self.external_net, self.ssh_port = None, 22
        self.stamp: object = None
        self.data: dict[str, Any] = {}
        # family -> (listener, filler, address): where dropped SYNs go
        self.hole: dict[int, tuple[object, object, tuple[Any, ...]]] = {}
        self.kept: list[object] = []  # sockets that must live as long as the process

    def current(self) -> dict[str, Any]:
        import json

        try:
            info = os.stat(self.path)
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
            if stamp != self.stamp:
                with open(self.path) as f:
                    self.data, self.stamp = json.load(f), stamp
        except (OSError, ValueError):
            pass  # not written yet (or no fake): as before, the last known, else open
        return self.data

    def peer_ports(self, host: str) -> list[list[int]] | None:
        """The TCP spans HOST (a host of this VPC) admits from here; None: not such a host."""
        for peer in self.current().get("peers", []):
            if host in peer.get("addresses", ()):
                spans: list[list[int]] = peer.get("tcp", [])  # [[low, high], ...]
                return spans
        return None

    def verdict(self, host: str, port: int) -> tuple[bool, bool]:
        """(let through, outside): outside is a connection to anything but GCS and Google's
        APIs, the metadata server, this VM itself and its VPC's hosts."""
        import ipaddress

        if host == self.me or f"{host}:{port}" == self.metadata:
            return True, False
        data = self.current()
        if f"{host}:{port}" in data.get("google", ()):
            return bool(data.get("google_apis", True)), False
        spans = self.peer_ports(host)
        if spans is not None:
            return any(low <= port <= high for low, high in spans), False
        if f"{host}:{port}" in data.get("proxies", ()):
            return bool(data.get("external", True)), True  # this machine's way to the internet
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return True, False  # not an address: not judged
        if ip.is_loopback and host in ("127.0.0.1", "::1"):
            return True, False  # the VM's own loopback
        if not data.get("external", True):
            return False, True  # no external IP: no route out (no Cloud NAT modelled)
        at_external = self.external_net is not None and ip in self.external_net
        return not (at_external and port != self.ssh_port), True  # NAT'd: SSH only there

    def count(self, host: str, port: int) -> None:
        log = self.current().get("outside_log", "")
        if not log or not self.me:
            return
        try:
            fd = os.open(log.replace("{address}", self.me), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{host}:{port}\n".encode())
            finally:
                os.close(fd)
        except OSError:
            pass

    def black_hole(self, family: int, bind: Callable[..., None], connect: Callable[..., None]) -> tuple[Any, ...]:
        """An address where every SYN is dropped, as a firewall drops it: a listener whose
        accept queue (backlog 0) one connection fills, so the kernel drops every later
        SYN and the connecting socket retries until its timeout (blocking without one:
        the kernel's own, about 127 s on Linux), non-blocking sockets included."""
        import socket

        if family not in self.hole:
            listener = socket.socket(socket.AF_INET)
            bind(listener, ("127.0.0.1", 0))
            listener.listen(0)
            filler = socket.socket(socket.AF_INET)
            connect(filler, listener.getsockname())
            host, port = listener.getsockname()[:2]
            where = (host, port) if family == socket.AF_INET else (f"::ffff:{host}", port, 0, 0)
            self.hole[family] = (listener, filler, where)
        return self.hole[family][2]


_NET: _Network | None = None


def _firewall() -> None:
    """Python's connects judged by the VPC (_Network.verdict): a dropped one hangs until
    its timeout, as a dropped SYN does; one outside is logged where the fake counts it."""
    import errno
    import socket

    global _NET
    net = _NET = _Network()
    connect, connect_ex, bind = socket.socket.connect, socket.socket.connect_ex, socket.socket.bind

    def judged(sock: socket.socket, address: object) -> object:
        """ADDRESS, or the black hole that stands for it when the firewall drops it."""
        # TCP only: a UDP connect sends nothing (a library finding its own address by it works)
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM \
                or not isinstance(address, tuple) or len(address) < 2:
            return address
        host, port = str(address[0]), int(address[1])
        try:
            # a name is resolved as the C library would, then judged by its address
            found = socket.getaddrinfo(host, port, sock.family, socket.SOCK_STREAM)
            host = str(found[0][4][0]) if found else host
        except (OSError, UnicodeError):
            return address  # the real connect says why
        host = host.removeprefix("::ffff:")
        allowed, outside = net.verdict(host, port)
        if outside:
            net.count(host, port)
        return address if allowed else net.black_hole(sock.family, bind, connect)

    def guarded_connect(self: socket.socket, address: object) -> None:
        return connect(self, judged(self, address))  # type: ignore[arg-type]

    def guarded_connect_ex(self: socket.socket, address: object) -> int:
        return connect_ex(self, judged(self, address))  # type: ignore[arg-type]

    def guarded_bind(self: socket.socket, address: object) -> None:
        # a VM's interface has only its internal address; Google NATs the external one
        if isinstance(address, tuple) and address and net.external_net is not None:
            try:
                import ipaddress

                if ipaddress.ip_address(str(address[0]).removeprefix("::ffff:")) in net.external_net:
                    raise OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL))
            except ValueError:
                pass
        return bind(self, address)  # type: ignore[arg-type]

    socket.socket.bind = guarded_bind  # type: ignore[method-assign,assignment]
    socket.socket.connect = guarded_connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign,assignment]


def _coordinator_behind_the_firewall(module: object) -> None:
    """JAX's coordinator service and clients are C++ (gRPC), unseen by the socket calls
    above. Where the VPC admits no TCP between the slice's hosts on the coordinator's
    port, process 0 binds the service at a port of its own that only it knows and puts a
    black hole at the announced one: its own client (to its own address: never through
    the firewall on a VM) reaches the service; every peer's SYNs are dropped and gRPC
    retries until JAX's initialization timeout, as on Google."""
    import socket

    net, real = _NET, module._jax  # type: ignore[attr-defined]
    if net is None or not net.me:
        return
    moved: dict[int, str] = {}

    def service(address: str, *args: object, **kwargs: object) -> object:
        host, _, port = address.rpartition(":")
        spans = net.peer_ports(net.me)
        if host.strip("[]") in (net.me, "::", "0.0.0.0", "") and spans is not None and \
                not any(low <= int(port) <= high for low, high in spans):
            probe = socket.socket()
            probe.bind((net.me, 0))
            hidden = f"{net.me}:{probe.getsockname()[1]}"
            probe.close()
            hole = socket.socket()
            hole.bind((net.me, int(port)))
            hole.listen(0)
            # the accept queue's one slot, taken by this connect or by a peer's SYN that
            # came first (a peer retries from the moment it starts): either fills it. Not
            # waited for: after a peer's, a blocking connect here would itself be dropped
            # and wait out the kernel's SYN retries (~130 s) before the service started.
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex((net.me, int(port)))
            net.kept += [hole, filler]
            moved[int(port)] = address = hidden
        return real.get_distributed_runtime_service(address, *args, **kwargs)

    def client(address: str, *args: object, **kwargs: object) -> object:
        host, _, port = address.rpartition(":")
        if host == net.me and int(port) in moved:
            address = moved[int(port)]
        return real.get_distributed_runtime_client(address, *args, **kwargs)

    class Seen:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

    seen = Seen()
    seen.get_distributed_runtime_service = service  # type: ignore[attr-defined]
    seen.get_distributed_runtime_client = client  # type: ignore[attr-defined]
    module._jax = seen  # type: ignore[attr-defined]


def _bind_to_the_coordinators_own_address(module: object) -> None:
    state = module.State  # type: ignore[attr-defined]
    initialize = state.initialize

    def bound(self: object, *args: object, **kwargs: object) -> object:
        import inspect

        call = inspect.signature(initialize).bind(self, *args, **kwargs)
        given = call.arguments
        address = given.get("coordinator_address") or os.environ.get("JAX_COORDINATOR_ADDRESS")
        if given.get("coordinator_bind_address") is None and address and \
                "JAX_COORDINATOR_BIND_ADDRESS" not in os.environ:
            given["coordinator_bind_address"] = address  # host:port, a loopback host here
        return initialize(*call.args, **call.kwargs)

    state.initialize = bound


class _AfterJaxModules(importlib.abc.MetaPathFinder):
    """Adapts each of _ADAPT's modules (JAX's, google-cloud-storage's, venv's) once it has
    loaded. A module is crossed off when it runs, not when its spec is asked for: runpy
    (`python3 -m venv`) asks for a package's spec, then imports it anew."""

    def __init__(self) -> None:
        self.waiting: dict[str, Callable[[ModuleType], None]] = dict(_ADAPT)

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in self.waiting:
            return None
        sys.meta_path.remove(self)  # the real spec, found without this finder
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_adapt(module: ModuleType) -> None:
            exec_module(module)
            adapt = self.waiting.pop(name, None)
            if not self.waiting and self in sys.meta_path:
                sys.meta_path.remove(self)
            if adapt is None:
                return
            try:
                adapt(module)
            except Exception as e:  # a JAX whose insides differ: left as it is
                sys.stderr.write(f"podctl fake host: {name} not adapted ({e!r})\n")

        spec.loader.exec_module = exec_then_adapt  # type: ignore[method-assign]
        return spec


def _distributed(module: object) -> None:
    _fake_tpu_vm_cluster()
    _bind_to_the_coordinators_own_address(module)
    _coordinator_behind_the_firewall(module)


def _node_credentials(module: object) -> None:
    """google-cloud-storage goes anonymous when STORAGE_EMULATOR_HOST is set and no
    credentials are given (a rule of the library for emulators); a TPU VM has no such
    variable, so there the same `storage.Client()` (orbax's bucket lookup among others)
    takes Application Default Credentials: the node's service account, from the metadata
    server. The fake's GCS wants a token as GCS does, so here it gets the same ones."""
    client = module.Client  # type: ignore[attr-defined]
    init = client.__init__

    def with_node_credentials(self: object, *args: object, **kwargs: object) -> None:
        if kwargs.get("credentials") is None and len(args) < 2 and os.environ.get("STORAGE_EMULATOR_HOST"):
            import google.auth

            kwargs["credentials"], project = google.auth.default()
            if not args and kwargs.get("project") is None:
                kwargs["project"] = project
        init(self, *args, **kwargs)

    client.__init__ = with_node_credentials


DISK_FULL_FILE = ".fake-disk-full"  # faults.DISK_FULL_FILE: in the host's directory while its disk is full


def _disk_full() -> None:
    """The `disk-full` fault: while the host's directory (TMPDIR's parent) holds
    DISK_FULL_FILE, opening a file to write and making a directory anywhere under it fail
    with ENOSPC, as on a full disk (the writes of open files and of non-Python programs
    are not seen)."""
    import builtins
    import errno
    import io

    tmp = os.environ.get("TMPDIR")
    if not tmp:
        return
    root = os.path.dirname(os.path.abspath(tmp))
    marker = os.path.join(root, DISK_FULL_FILE)

    def refuse(path: object) -> None:
        if not isinstance(path, (str, bytes, os.PathLike)) or not os.path.exists(marker):
            return
        where = os.path.abspath(os.fsdecode(path))
        if where == root or where.startswith(root + os.sep):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsdecode(path))

    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def opening(file: object, mode: object = "r", *args: object, **kwargs: object) -> None:
        if isinstance(mode, str) and any(c in mode for c in "wax+"):
            refuse(file)

    def os_opening(path: object, flags: int = 0, *args: object, **kwargs: object) -> None:
        if flags & writes:
            refuse(path)

    def making(path: object, *args: object, **kwargs: object) -> None:
        refuse(path)

    class Checked:
        """CHECK, then PLAIN. Not a function: pathlib (3.10) keeps io.open and os.mkdir as
        class attributes, where a function would be bound to the path."""

        def __init__(self, check: Callable[..., None], plain: Callable[..., object]) -> None:
            self.check, self.plain = check, plain

        def __call__(self, *args: object, **kwargs: object) -> object:
            self.check(*args, **kwargs)
            return self.plain(*args, **kwargs)

    builtins.open = io.open = Checked(opening, builtins.open)  # type: ignore[assignment]
    os.open = Checked(os_opening, os.open)  # type: ignore[assignment]
    os.mkdir = Checked(making, os.mkdir)  # type: ignore[assignment]


_ADAPT = {"jax._src.distributed": _distributed, "jax._src.xla_bridge": _take_the_chips,
          "google.cloud.storage.client": _node_credentials}

if os.environ.get("PODCTL_FAKE_HOST") == "1":
    _firewall()
    _disk_full()
    if _the_image_python():
        _no_ensurepip()
        _ADAPT["venv"] = _venv_without_ensurepip
    sys.meta_path.insert(0, _AfterJaxModules())
