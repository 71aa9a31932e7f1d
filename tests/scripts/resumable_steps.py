"""Steps 1..N, one each 0.2 s, printing `step K` (host 0 only). On SIGTERM (podctl's stop:
the queue's preemption, the budget) it checkpoints its place, as the training template
does, to PODCTL_CHECKPOINT_DIR/step.json, and exits 143; started again with that
directory (a retry, a preempted entry's next attempt) it goes on after the saved step.

Standard library only, as on a bare host: GCS's JSON API with the token of the host's
metadata server (GCE_METADATA_HOST), at STORAGE_EMULATOR_HOST on the fake cloud.
"""

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

TOTAL = int(sys.argv[1])
BUCKET, _, PREFIX = os.environ["PODCTL_CHECKPOINT_DIR"].removeprefix("gs://").partition("/")
NAME = f"{PREFIX.rstrip('/')}/step.json"
ENDPOINT = (os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com").rstrip("/")
LEADER = os.environ.get("PODCTL_PROCESS_ID", "0") == "0"


def token() -> str:
    host = os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    request = urllib.request.Request(
        f"http://{host}/computeMetadata/v1/instance/service-accounts/default/token",
        headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["access_token"]


def load() -> int:
    url = (f"{ENDPOINT}/download/storage/v1/b/{BUCKET}/o/{urllib.parse.quote(NAME, safe='')}"
           "?alt=media")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token()}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(json.loads(response.read())["step"])
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return 0
        raise


def save(step: int) -> None:
    boundary = "b" + os.urandom(8).hex()
    body = b"".join([
        f"--{boundary}\r\nContent-Type: application/json\r\n\r\n".encode(),
        json.dumps({"name": NAME}).encode(),
        f"\r\n--{boundary}\r\nContent-Type: application/json\r\n\r\n".encode(),
        json.dumps({"step": step}).encode(), f"\r\n--{boundary}--\r\n".encode()])
    request = urllib.request.Request(
        f"{ENDPOINT}/upload/storage/v1/b/{BUCKET}/o?uploadType=multipart", data=body, method="POST",
        headers={"Authorization": f"Bearer {token()}",
                 "Content-Type": f'multipart/related; boundary="{boundary}"'})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


step = load()
print(f"start at {step}", flush=True)


def on_term(signum, frame):
    if LEADER:
        save(step)
        print(f"checkpoint at {step}", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
while step < TOTAL:
    time.sleep(0.2)
    if LEADER:  # printed, then counted: a SIGTERM between the two repeats a step, never skips one
        print(f"step {step + 1}", flush=True)
    step += 1
