"""Python on a fake TPU VM host: JAX finds the slice by itself, as on a real one.

On a real TPU VM, `jax.distributed.initialize()` with no arguments works: libtpu is
there, so JAX asks the metadata server for the worker list and this worker's number
(its GceTpuCluster). A fake host has CPU devices and no libtpu, so JAX would look for
no TPU cluster and fail ("Number of processes must be defined"). The fake puts this
directory on its hosts' PYTHONPATH; when JAX's distributed module loads, this adds a
cluster that reads what the host's environment says of the slice (TPU_WORKER_HOSTNAMES,
TPU_WORKER_ID, and MEGASCALE_* for multislice; podctl's agent gives every run these
and JAX_COORDINATOR_ADDRESS, as on a real slice). Scripts run unchanged on both.

And, a fake host being this machine: the coordinator JAX starts on process 0 binds
the host's own (loopback) address, not every interface, unless the script chose.

Two rules of a real TPU VM are kept here too:
- The default VPC's firewall: from a host, another host's (or its own) external address
  answers on SSH only, and no host can bind an external address (Google NATs it; the
  VM's interface has only its internal one: EADDRNOTAVAIL). Python's socket.connect() to an external address on another
  port fails as a dropped SYN does, with ETIMEDOUT (at once, not after the kernel's
  retries). A C library's connect (gRPC in JAX's coordinator client) is not seen here;
  it finds nothing listening at the external address instead, because what a host
  opens binds its internal address (JAX_COORDINATOR_BIND_ADDRESS), and keeps retrying
  until JAX's timeout, as on Google.
- One TPU owner: libtpu takes the host's /tmp/libtpu_lockfile when JAX starts its
  backend; a second process then fails with libtpu's message until the first exits.
  The fake host's /tmp is its own TMPDIR (PODCTL_FAKE_LIBTPU_LOCKFILE names the file).

And one of its identity: google-cloud-storage takes the node's credentials (the metadata
server's token) as on a TPU VM, rather than going anonymous for the emulator
(`_node_credentials`).

Only the standard library; nothing happens until (and unless) JAX (or
google-cloud-storage) is imported. A JAX whose insides differ is left as it is (the
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



def _fake_tpu_vm_cluster() -> None:
    from jax._src.clusters import cloud_tpu_cluster

    class FakeTpuVmCluster(cloud_tpu_cluster.BaseTpuCluster):  # registers itself with JAX
        name = "podctl-fake-tpu-vm"

        @classmethod
        def is_env_present(cls) -> bool:
            return os.environ.get("PODCTL_FAKE_HOST") == "1" and bool(
                os.environ.get("TPU_WORKER_HOSTNAMES"))

        @staticmethod
        def _get_process_id_in_slice() -> int:
            return int(os.environ["TPU_WORKER_ID"])

        @staticmethod
        def _get_worker_list_in_slice() -> list[str]:
            return os.environ["TPU_WORKER_HOSTNAMES"].split(",")

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


def _take_the_chips(module: object) -> None:
    """Backend start takes the host's lock file (flock, held until this process and the
    children it forks have exited), as libtpu does; a second holder fails at start."""
    lockfile = os.environ.get("PODCTL_FAKE_LIBTPU_LOCKFILE")
    init = getattr(module, "_init_backend", None)
    if not lockfile or init is None:
        return
    held: list[int] = []

    def take() -> None:
        import fcntl

        if held:
            return
        fd = os.open(lockfile, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RuntimeError(f"ABORTED: The TPU is already in use by process with pid {holder}. "
                               "Not attempting to load libtpu.so in this process.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        held.append(fd)

    def init_backend(platform: str) -> object:
        take()
        return init(platform)

    module._init_backend = init_backend  # type: ignore[attr-defined]


def _firewall() -> None:
    """Python's connects to an external address on any port but SSH's time out (above)."""
    import errno
    import ipaddress
    import socket

    try:
        external = ipaddress.ip_network(os.environ.get("PODCTL_FAKE_EXTERNAL_NET", ""))
        ssh_port = int(os.environ.get("PODCTL_FAKE_SSH_PORT") or 22)
    except ValueError:
        return

    def _in(host: object) -> bool:
        try:
            return ipaddress.ip_address(host) in external  # type: ignore[arg-type]
        except (ValueError, TypeError):
            return False  # a name: resolved by the C library, not checked here

    def dropped(address: object) -> bool:
        return isinstance(address, tuple) and len(address) >= 2 and _in(address[0]) \
            and address[1] != ssh_port

    def refusal(address: tuple) -> TimeoutError:
        return TimeoutError(errno.ETIMEDOUT, f"{os.strerror(errno.ETIMEDOUT)} ({address[0]}:{address[1]} "
                            "is an external address; the VPC's firewall admits only SSH there)")

    connect, connect_ex, bind = socket.socket.connect, socket.socket.connect_ex, socket.socket.bind

    def guarded_connect(self: socket.socket, address: object) -> None:
        if dropped(address):
            raise refusal(address)  # type: ignore[arg-type]
        return connect(self, address)  # type: ignore[arg-type]

    def guarded_connect_ex(self: socket.socket, address: object) -> int:
        return errno.ETIMEDOUT if dropped(address) else connect_ex(self, address)  # type: ignore[arg-type]

    def guarded_bind(self: socket.socket, address: object) -> None:
        # a VM's interface has only its internal address; Google NATs the external one
        if isinstance(address, tuple) and address and _in(address[0]):
            raise OSError(errno.EADDRNOTAVAIL, os.strerror(errno.EADDRNOTAVAIL))
        return bind(self, address)  # type: ignore[arg-type]

    socket.socket.bind = guarded_bind  # type: ignore[method-assign,assignment]
    socket.socket.connect = guarded_connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign,assignment]


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
    """Adapts each of _ADAPT's modules (JAX's, google-cloud-storage's) once it has loaded."""

    def __init__(self) -> None:
        self.waiting: dict[str, Callable[[ModuleType], None]] = dict(_ADAPT)

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        adapt = self.waiting.pop(name, None)
        if adapt is None:
            return None
        sys.meta_path.remove(self)  # the real spec, found without this finder
        try:
            spec = importlib.util.find_spec(name)
        finally:
            if self.waiting:
                sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_adapt(module: ModuleType) -> None:
            exec_module(module)
            try:
                adapt(module)
            except Exception as e:  # a JAX whose insides differ: left as it is
                sys.stderr.write(f"podctl fake host: {name} not adapted ({e!r})\n")

        spec.loader.exec_module = exec_then_adapt  # type: ignore[method-assign]
        return spec


def _distributed(module: object) -> None:
    _fake_tpu_vm_cluster()
    _bind_to_the_coordinators_own_address(module)


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

        def __init__(self, check: Callable[..., None], plain: Callable) -> None:
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
    sys.meta_path.insert(0, _AfterJaxModules())
