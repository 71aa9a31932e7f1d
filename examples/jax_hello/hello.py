"""Multi-host JAX as a user would write it: one process per host, explicit init.

Runs unchanged on a real v5p slice (4 TPU chips per host) and on podctl's fake
(4 CPU devices per host): the coordinator, process count and id come from podctl.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

jax.distributed.initialize(
    coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
    num_processes=int(os.environ["PODCTL_NUM_PROCESSES"]),
    process_id=int(os.environ["PODCTL_PROCESS_ID"]),
)
mesh = Mesh(np.array(jax.devices()), ("data",))
sharding = NamedSharding(mesh, P("data"))
n = jax.device_count()
# each process supplies its own shard of a global array 0..n*4-1
local = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
global_array = jax.make_array_from_callback((n, 4), sharding, lambda index: local[index])
total = jax.jit(lambda x: jnp.sum(x * 2), out_shardings=NamedSharding(mesh, P()))(global_array)
print(f"process {jax.process_index()} of {jax.process_count()}: devices {n}, "
      f"local {jax.local_device_count()}, sum {float(total)}", flush=True)
jax.distributed.shutdown()
