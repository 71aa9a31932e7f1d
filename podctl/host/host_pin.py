"""What a host's watcher accepts: the slice's pin, kept on first boot, and signed pointers.

Runs on the host beside host_watch.py (the startup script writes both; standard library
only, Python 3.10). At its creation podctl puts the pin in the node's metadata under
PIN_KEY (pointer_sign.pin_metadata): the slice's id, the bucket and prefix its runs
live under, and the public keys (RSA: n and e) whose signatures it accepts. The watcher
copies it to PIN_FILE (0600, in its own root-only directory) the first time it reads
the metadata and never again: a later metadata writer cannot change it, even across a
reboot (trust on first use). A slice whose first metadata held no pin keeps "none" and
refuses every pointer.

A pointer is {"v": 2, "body": BODY, "sig": BASE64}: BODY the exact JSON text the client
signed (RSASSA-PKCS1-v1_5 with SHA-256), so nothing is re-encoded before the check. The
body names the run, the bucket, launch.json's and the agent's objects and hashes, the
node it is meant for, the slice's pin id, and when it expires. A pointer signed by no
pinned key, for another node or slice, expired, or naming a bucket or object outside
the pin, is refused (PinRefusal), and the watcher says so in podctl/run.
"""

from __future__ import annotations

import json
import os
from typing import Any

PIN_KEY = "podctl-pin"  # node metadata (pointer_sign.PIN_KEY: test_host_pin holds them equal)
PIN_FILE = "pin.json"
PIN_VERSION = 1
NO_PIN = "none"  # what PIN_FILE holds for a slice created without a pin
POINTER_VERSION = 2
# DER of SHA-256's AlgorithmIdentifier and the digest's OCTET STRING header (RFC 8017 9.2, note 1)
SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")


class PinRefusal(Exception):
    """Why this host will not start what a pointer names (said in podctl/run)."""


def verify(n: int, e: int, signature: bytes, message: bytes) -> bool:
    """RSASSA-PKCS1-v1_5 with SHA-256 (RFC 8017 8.2.2): SIGNATURE is MESSAGE's, by (N, E)."""
    import hashlib
    import hmac

    k = (n.bit_length() + 7) // 8
    if len(signature) != k or k < len(SHA256_DIGEST_INFO) + 32 + 11:
        return False
    s = int.from_bytes(signature, "big")
    if s >= n:
        return False
    em = pow(s, e, n).to_bytes(k, "big")
    t = SHA256_DIGEST_INFO + hashlib.sha256(message).digest()
    expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
    return hmac.compare_digest(em, expected)


def parse_pin(text: str) -> dict[str, Any]:
    """A pin's JSON, checked -> {"id", "bucket" (None: any), "prefix", "keys": [(n, e)]}."""
    try:
        pin = json.loads(text)
    except ValueError:
        raise PinRefusal("the slice's pin is not JSON") from None
    if not isinstance(pin, dict) or pin.get("v") != PIN_VERSION:
        raise PinRefusal("the slice's pin is not one this watcher reads")
    keys = []
    for key in pin.get("keys") or []:
        try:
            n, e = int(key["n"], 16), int(key["e"])
        except (TypeError, KeyError, ValueError):
            raise PinRefusal("a key of the slice's pin is not an RSA public key") from None
        keys.append((n, e))
    bucket, prefix, slice_id = pin.get("bucket"), pin.get("prefix"), pin.get("id")
    if not keys or not isinstance(slice_id, str) or not slice_id or not isinstance(prefix, str) \
            or not (bucket is None or isinstance(bucket, str) and bucket):
        raise PinRefusal("the slice's pin lacks its id, prefix or keys")
    return {"id": slice_id, "bucket": bucket, "prefix": prefix, "keys": keys}


def kept_pin(directory: str, attrs: dict[str, Any]) -> dict[str, Any] | None:
    """The pin this host keeps in DIRECTORY/PIN_FILE; the first call copies it there from
    the metadata (ATTRS: the node's attributes), made whole or not at all and never
    replaced. None: the slice was created without a pin (and accepts no pointer)."""
    path = os.path.join(directory, PIN_FILE)
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = str(attrs.get(PIN_KEY) or NO_PIN)
        tmp = f"{path}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if another process kept one first: that one stands
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        with open(path) as f:
            text = f.read()
    return None if text == NO_PIN else parse_pin(text)


def tpu_env_value(attrs: dict[str, Any], name: str) -> str:
    """NAME's value in the `tpu-env` attribute's lines ("NODE_ID: 'my-slice'"); "" if none."""
    for line in str(attrs.get("tpu-env") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip().strip("'\"")
    return ""


def slice_node(attrs: dict[str, Any]) -> str:
    """The node (slice) this host is a VM of, from what its metadata server says: a Cloud TPU
    node's VM names it in `tpu-env` (NODE_ID); a Compute Engine VM, which no Cloud TPU node
    owns, is named by the MIG that made it, its `created-by` attribute
    (projects/NUMBER/zones/Z/instanceGroupManagers/NAME, set by Compute Engine on every VM a
    MIG makes). "" where neither says."""
    node = tpu_env_value(attrs, "NODE_ID")
    if node:
        return node
    _, sep, mig = str(attrs.get("created-by") or "").rpartition("/instanceGroupManagers/")
    return mig if sep and mig and "/" not in mig else ""


def signed_body(pointer: dict[str, Any]) -> dict[str, Any]:
    """The outer pointer's body, parsed (its signature not checked yet): ValueError for
    an unsigned one."""
    body = pointer.get("body")
    if not isinstance(body, str) or not isinstance(pointer.get("sig"), str):
        raise ValueError("the pointer is not signed (no body and sig)")
    try:
        found = json.loads(body)
    except ValueError:
        raise ValueError("the pointer's body is not JSON") from None
    if not isinstance(found, dict):
        raise ValueError("the pointer's body is not a JSON object")
    return found


def check(text: str, sig: str, body: dict[str, Any], pin: dict[str, Any] | None, attrs: dict[str, Any],
          now: float) -> None:
    """PinRefusal unless SIG is a pinned key's signature of TEXT (the body's exact JSON)
    and its BODY fits the pin, this node and NOW (the host's clock, epoch seconds)."""
    import base64

    if pin is None:
        raise PinRefusal("this slice was created without a pin: its watchers accept no pointer")
    try:
        signature = base64.b64decode(sig, validate=True)
    except ValueError:
        raise PinRefusal("the pointer's signature is not base64") from None
    message = text.encode()
    if not any(verify(n, e, signature, message) for n, e in pin["keys"]):
        raise PinRefusal("the pointer is signed by no key pinned at the slice's creation")
    if body.get("pin") != pin["id"]:
        raise PinRefusal("the pointer was signed for another slice")
    node = slice_node(attrs)
    if not node or body.get("node") != node:
        raise PinRefusal(f"the pointer was signed for node {body.get('node')!r}, not this one ({node!r})")
    expires = body.get("expires")
    if not isinstance(expires, int) or isinstance(expires, bool) or now > expires:
        raise PinRefusal("the pointer has expired")
    if pin["bucket"] is not None and body.get("bucket") != pin["bucket"]:
        raise PinRefusal(f"the pointer names bucket {body.get('bucket')!r}, not the pinned {pin['bucket']!r}")
    for key in ("launch", "agent_object", "access"):
        name = body.get(key)
        if name is not None and (not isinstance(name, str) or not name.startswith(pin["prefix"])
                                 or ".." in name.split("/")):
            raise PinRefusal(f"the pointer's {key} is outside the pinned prefix {pin['prefix']!r}")
