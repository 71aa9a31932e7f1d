#!/usr/bin/env bash
# The whole provisioning lifecycle on the local fake cloud: start it, bring up a
# v5p-4096 (512 hosts, 8x16x16), list it, describe it, tear it down, stop the fake.
# Nothing is left running or billing at the end, even if a step fails.
set -euo pipefail
export PODCTL_BACKEND=fake
podctl fake start
trap 'podctl down demo-v5p-4096 --yes >/dev/null 2>&1 || true; podctl fake stop' EXIT
podctl up --slice v5p-4096 --name demo-v5p-4096
podctl ls
podctl status demo-v5p-4096 --json | python3 -c 'import json, sys; s = json.load(sys.stdin); print("%s: %s, %d hosts, topology %s" % (s["name"], s["state"], s["hosts"], s["topology"]))'
podctl down demo-v5p-4096 --yes
podctl ls
