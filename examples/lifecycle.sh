#!/usr/bin/env bash
# The whole lifecycle on the local fake cloud: start it; bring up a v5p-4096 (512
# hosts, 8x16x16), list and describe it, tear it down; bring up a v5p-16 (2 hosts x
# 4 devices), see the bare python3 on every host, run a multi-host JAX job (its
# requirements.txt built once into the hosts' environment) and read its logs
# back from GCS; tear everything down and stop the fake. Nothing is left running or
# billing at the end, even if a step fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PODCTL_BACKEND=fake
podctl fake start
cleanup() {
  podctl down demo-v5p-4096 --yes >/dev/null 2>&1 || true
  podctl down demo-v5p-16 --yes >/dev/null 2>&1 || true
  podctl fake stop
}
trap cleanup EXIT
podctl up --slice v5p-4096 --name demo-v5p-4096 > /dev/null
podctl ls
podctl status demo-v5p-4096 --json | python3 -c 'import json, sys; s = json.load(sys.stdin); print("%s: %s, %d hosts, topology %s" % (s["name"], s["state"], s["hosts"], s["topology"]))'
podctl down demo-v5p-4096 --yes
podctl up --slice v5p-16 --name demo-v5p-16 > /dev/null
podctl exec demo-v5p-16 -- python3 --version   # a bare TPU VM: the image's python3, no jax yet
podctl run demo-v5p-16 --hosts all "$here/jax_hello/hello.py"
podctl runs
podctl down demo-v5p-16 --yes
podctl ls
