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

Only the standard library; nothing happens until (and unless) JAX is imported. A JAX
whose insides differ is left as it is (the script then passes the values itself).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_TARGET = "jax._src.distributed"


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


class _AfterJaxDistributed(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object, target: object = None) -> object:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_adapt(module: object) -> None:
            exec_module(module)
            try:
                _fake_tpu_vm_cluster()
                _bind_to_the_coordinators_own_address(module)
            except Exception as e:  # a JAX whose insides differ: left as it is
                sys.stderr.write(f"podctl fake host: JAX's cluster detection not adapted ({e!r})\n")

        spec.loader.exec_module = exec_then_adapt  # type: ignore[method-assign]
        return spec


if os.environ.get("PODCTL_FAKE_HOST") == "1":
    sys.meta_path.insert(0, _AfterJaxDistributed())
