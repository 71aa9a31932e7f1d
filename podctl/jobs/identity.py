"""Can the slice's nodes use the run's bucket? Asked once, from worker 0, before any agent
starts.

A TPU VM reaches GCS as the node's service account, with the node's scopes (its metadata
server's token). Either can shut it out: a scope list without `cloud-platform` or
`devstorage.read_write` (fixed when the slice is made), or an account without a role on
the bucket (the default compute account has none in organisations made since 2024-05).
Then every agent would fail at its first upload, each with a 403 in a log nobody can
read (the logs go through that same GCS). So podctl asks first: worker 0 writes, reads
and deletes one object under the run's prefix with its own token, and a refusal ends
the run before it starts, in one line that names the account, what is missing and the
command that fixes it. It also reads the bucket's metadata (storage.buckets.get): the
object roles do not grant it, and orbax's checkpoint saves (through tensorstore) need
it, so a node with roles/storage.objectAdmin alone would train and then fail at its
first checkpoint (keras-team/kinetic#251); roles/storage.legacyBucketReader adds it.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from dataclasses import dataclass

from podctl.base.errors import JobError, StoragePermissionError
from podctl.cloud.storage import Grant, gcloud_grant
from podctl.host import run_layout
from podctl.jobs.ssh import Fleet

CHECK_SECONDS = 60.0  # the three calls take well under a second; a host's network may not
WRITE_SCOPES = ("cloud-platform", "devstorage.read_write", "devstorage.full_control")
SCOPE_PREFIX = "https://www.googleapis.com/auth/"

# Run on worker 0 as `python3 -c CHECK BUCKET OBJECT` (the image's Python 3.10, standard
# library only). Prints one JSON line: the account, its scopes and the first call refused
# (with GCS's status and message). The token stays on the host.
CHECK = r"""
import json, os, sys, urllib.error, urllib.parse, urllib.request
bucket, name = sys.argv[1], sys.argv[2]
md = "http://%s/computeMetadata/v1/instance/service-accounts/default/" % (
    os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal")
def call(url, headers, data=None, method="GET"):
    try:
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e).encode()
status, body = call(md + "?recursive=true", {"Metadata-Flavor": "Google"})
if status != 200:
    print(json.dumps({"unknown": "metadata server: %s %s" % (status, body[:200].decode(errors="replace"))}))
    sys.exit()
account = json.loads(body)
out = {"email": account.get("email", ""), "scopes": account.get("scopes", [])}
status, body = call(md + "token", {"Metadata-Flavor": "Google"})
if status != 200:
    print(json.dumps(dict(out, unknown="no token from the metadata server (%s)" % status)))
    sys.exit()
auth = {"Authorization": "Bearer " + json.loads(body)["access_token"]}
gcs = (os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com").rstrip("/")
b, o = urllib.parse.quote(bucket, safe=""), urllib.parse.quote(name, safe="")
for step, url, data, method in (
        ("write", "%s/upload/storage/v1/b/%s/o?uploadType=media&name=%s" % (gcs, b, o), b"podctl", "POST"),
        ("read", "%s/download/storage/v1/b/%s/o/%s?alt=media" % (gcs, b, o), None, "GET"),
        ("delete", "%s/storage/v1/b/%s/o/%s" % (gcs, b, o), None, "DELETE"),
        ("bucket", "%s/storage/v1/b/%s?fields=name" % (gcs, b), None, "GET")):
    headers = dict(auth, **({"Content-Type": "text/plain"} if data else {}))
    status, body = call(url, headers, data, method)
    if status == 0 or status >= 300:
        try:
            message = json.loads(body)["error"]["message"]
        except Exception:
            message = body[:200].decode(errors="replace")
        out.update(refused=step, status=status, message=message)
        break
print(json.dumps(out))
"""


@dataclass(frozen=True)
class NodeAccess:
    """What worker 0 found: its account and scopes, and the first call GCS refused."""

    email: str
    scopes: tuple[str, ...]
    refused: str | None = None  # "write", "read", "delete", "bucket"; None: all went through
    status: int = 0
    message: str = ""
    unknown: str | None = None  # the check itself could not be made (no metadata server, ...)

    @property
    def can_write(self) -> bool:
        return any(SCOPE_PREFIX + s in self.scopes for s in WRITE_SCOPES)

    @property
    def permission(self) -> str:
        found = re.search(r"Permission '([\w.]+)'", self.message)
        if found:
            return found.group(1)
        return {"bucket": "storage.buckets.get", "write": "storage.objects.create",
                "delete": "storage.objects.delete"}.get(self.refused or "", "storage.objects.get")


def parse(output: str) -> NodeAccess | None:
    """The check's JSON line -> NodeAccess; None when there is none (no python3, ...)."""
    for line in reversed(output.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return NodeAccess(email=str(found.get("email", "")),
                              scopes=tuple(str(s) for s in found.get("scopes") or []),
                              refused=found.get("refused"), status=int(found.get("status") or 0),
                              message=str(found.get("message", "")), unknown=found.get("unknown"))
    return None


def refusal(access: NodeAccess, *, bucket: str, slice_name: str, slice_type: str,
            grant: Grant = gcloud_grant, slice_kept: bool = True) -> str | None:
    """The one line that ends the run (account, what is missing, the fix: GRANT's
    command), or None. SLICE_KEPT: the line says the slice is still up (a caller that
    deletes it, the queue or the demo, says so itself)."""
    if access.unknown or access.refused is None or access.status not in (401, 403):
        return None  # not a matter of identity (GCS down, a network): the agents will say
    still_up = (f"; slice {slice_name} is still up (`podctl down {slice_name}` stops its bill)"
                if slice_kept else "")
    short = ",".join(s.removeprefix(SCOPE_PREFIX) for s in access.scopes) or "none"
    if not access.can_write or "scope" in access.message.lower():
        account = ("" if access.email.endswith("-compute@developer.gserviceaccount.com")
                   else f" --service-account {access.email}")
        return (f"the nodes of {slice_name} ({access.email}) lack a storage scope to write "
                f"gs://{bucket} (their scopes: {short}); scopes are fixed when a slice is made: "
                f"`podctl down {slice_name} && podctl up --slice {slice_type} --name {slice_name}"
                f"{account} --scopes cloud-platform`{still_up}.")
    bind = grant(access.email, bucket)
    if access.refused == "bucket":
        return (f"the nodes' service account {access.email} may not read gs://{bucket}'s metadata "
                f"({access.permission} denied; orbax's checkpoint saves need it, and the object "
                f"roles do not grant it): `{bind}roles/storage.legacyBucketReader`, then run "
                f"again; {still_up}.")
    return (f"the nodes' service account {access.email} may not use gs://{bucket} "
            f"({access.permission} denied: it needs roles/storage.objectAdmin on the bucket, and "
            f"roles/storage.legacyBucketReader for orbax's checkpoints): "
            f"`{bind}roles/storage.objectAdmin && {bind}roles/storage.legacyBucketReader`, then run "
            f"again{still_up}.")


async def check_node_access(fleet: Fleet, *, bucket: str, run_id: str, slice_name: str,
                            slice_type: str, grant: Grant = gcloud_grant) -> NodeAccess | None:
    """Ask worker 0 whether the nodes' identity can write, read and delete under the run's
    prefix -> what it found (None: it could not say); StoragePermissionError if GCS
    refused it."""
    import asyncssh

    target = fleet.targets[0]
    conn = fleet.connections[target.index]
    name = run_layout.identity_check_object(run_id)
    command = f"python3 -c {shlex.quote(CHECK)} {shlex.quote(bucket)} {shlex.quote(name)}"
    try:
        result = await asyncio.wait_for(conn.run(command, check=False), CHECK_SECONDS)
    except (TimeoutError, OSError):
        return None  # the agents meet whatever this was, and say so
    except asyncssh.Error as e:  # the host went since the fleet opened (as Fleet.each says it)
        raise JobError(f"lost the SSH connection to {target.name} ({target.address}): "
                       f"{e or e.__class__.__name__}") from e
    access = parse(str(result.stdout or ""))
    if access is None:
        return None
    error = refusal_error(access, bucket=bucket, slice_name=slice_name, slice_type=slice_type, grant=grant)
    if error is not None:
        raise error
    return access


def refusal_error(access: NodeAccess, *, bucket: str, slice_name: str, slice_type: str,
                  grant: Grant = gcloud_grant) -> StoragePermissionError | None:
    """refusal's line as the error that ends a run (with the words for a caller that
    deletes the slice: the queue, the demo), or None when ACCESS is no refusal."""
    line = refusal(access, bucket=bucket, slice_name=slice_name, slice_type=slice_type, grant=grant)
    if line is None:
        return None
    return StoragePermissionError(line, without_slice=refusal(
        access, bucket=bucket, slice_name=slice_name, slice_type=slice_type, grant=grant, slice_kept=False))
