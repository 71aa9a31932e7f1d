"""Take this fake host's chips as JAX's backend start does there (the fake's stand-in for
libtpu: podctl/fake/vm/tpu_vm/sitecustomize.py, its lock file and the file's owner), say
"CHIPS taken" (or "CHIPS refused: WHY", exit 1), then hold them SECONDS (argv[1]).
No JAX: what is under test is the host's rule, whoever started the run."""

import sys
import time
import types

import sitecustomize  # the fake host's (on its PYTHONPATH)

backend = types.SimpleNamespace(_init_backend=lambda platform: platform)
sitecustomize._take_the_chips(backend)
try:
    backend._init_backend("tpu")
except RuntimeError as e:
    print(f"CHIPS refused: {e}", flush=True)
    sys.exit(1)
print("CHIPS taken", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
