"""The TPU VM idiom: jax.distributed.initialize() with no arguments. Process 0 also
says which addresses its coordinator listens on."""

import json
import os
import socket

import jax

jax.distributed.initialize()
print(f"process {jax.process_index()} of {jax.process_count()}, {jax.device_count()} devices",
      flush=True)


def listening(port: int) -> list[str]:
    found = []
    for name, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for row in open(name).read().splitlines()[1:]:
            fields = row.split()
            address, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host order words
                found.append(socket.inet_ntop(family, raw))
    return found


if jax.process_index() == 0:
    port = int(os.environ["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[1])
    print("LISTEN " + json.dumps(listening(port)), flush=True)
jax.distributed.shutdown()
