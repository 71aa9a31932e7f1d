"""The TPU VM idiom: jax.distributed.initialize() with no arguments. Process 0 also
says which addresses its coordinator listens on; process 1 dials the coordinator at
worker 0's internal address and at its external one (argv[1], if given), as a peer
would, and says what each gave; a second process on its host then tries to start
JAX while this one holds the chips (libtpu's lock)."""

import errno
import json
import os
import socket
import subprocess
import sys

import jax

jax.distributed.initialize()
print(f"process {jax.process_index()} of {jax.process_count()}, {jax.device_count()} devices",
      flush=True)
port = int(os.environ["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[1])


def listening(port: int) -> list[str]:
    found = []
    for name, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(name) as f:
            rows = f.read().splitlines()[1:]
        for row in rows:
            fields = row.split()
            address, hex_port = fields[1].split(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host order words
                found.append(socket.inet_ntop(family, raw))
    return found


def dial(host: str) -> str:
    s = socket.socket()
    s.settimeout(3)  # a dropped SYN hangs until then
    try:
        s.connect((host, port))
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, str(e))
    finally:
        s.close()


if jax.process_index() == 0:
    print("LISTEN " + json.dumps(listening(port)), flush=True)
if jax.process_index() == 1 and len(sys.argv) > 1:
    internal = os.environ["TPU_WORKER_HOSTNAMES"].split(",")[0]
    print("DIAL " + json.dumps({"internal": dial(internal), "external": dial(sys.argv[1])}), flush=True)
    second = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], capture_output=True,
                            text=True, timeout=300)
    print("SECOND " + json.dumps({"exit": second.returncode,
                                  "in use": "The TPU is already in use by process with pid "
                                            f"{os.getpid()}" in second.stderr}), flush=True)
jax.distributed.shutdown()
