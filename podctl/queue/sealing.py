"""`queue add --env` values in a PostgreSQL queue, sealed so that only the tickers read them.

The database is shared by a team: any role that may log in could read a plain value
(and a database admin always can). The package index's PostgreSQL has no pgcrypto, and
a key kept in the database would be the database's, so the client seals instead:

  - each ticker machine holds an X25519 private key in its state dir
    (`queue-ticker.key`, 0600), made at its first `queue tick`; the public half is
    registered in `podctl.ticker_keys` (only a ticker or admin role may register one);
  - `queue add` seals the env (JSON) to every registered public key: per key an
    ephemeral X25519 exchange, HKDF-SHA256, AES-256-GCM (an ECIES "sealed box");
  - a ticker opens the box made for its key; every other reader sees the env's keys
    (which `queue ls --json` shows anyway), never a value.

A ticker whose key was registered after an entry was added cannot open that entry's env:
the entry fails with a line that says so (copy a registered ticker's key file, or add
the entry again).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

MARK = "podctl-sealed"  # not a possible env variable name: a plain env never has it
SCHEME = "x25519-hkdf-sha256-aes256gcm-v1"
KEY_FILE = "queue-ticker.key"
_INFO = b"podctl queue env v1"


class SealedEnv(dict[str, str]):
    """An env this reader cannot open: its keys, each mapped to "" (never sent to a host)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _raw_public(public: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    raw: bytes = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return raw


def key_id(public_b64: str) -> str:
    return hashlib.sha256(base64.b64decode(public_b64)).hexdigest()[:16]


def load_or_make_key(state_dir: Path) -> Any:
    """This machine's ticker key (X25519PrivateKey), made 0600 on first use."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    path = state_dir / KEY_FILE
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        raw = X25519PrivateKey.generate().private_bytes_raw()
        try:  # O_EXCL: two ticks starting at once keep one key
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
    return load_key(state_dir)


def load_key(state_dir: Path | None) -> Any | None:
    path = None if state_dir is None else state_dir / KEY_FILE
    if path is None or not path.exists():
        return None
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    return X25519PrivateKey.from_private_bytes(path.read_bytes())


def public_b64(private: Any) -> str:
    return _b64(_raw_public(private.public_key()))


def _aead_key(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral + recipient,
                info=_INFO).derive(shared)


def seal(env: dict[str, str], public_keys: list[str]) -> str:
    """ENV as the JSON text the store keeps: sealed to each of PUBLIC_KEYS (base64)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    plain = json.dumps(env).encode()
    boxes = {}
    for public in public_keys:
        recipient = base64.b64decode(public)
        ephemeral = X25519PrivateKey.generate()
        epk = _raw_public(ephemeral.public_key())
        key = _aead_key(ephemeral.exchange(X25519PublicKey.from_public_bytes(recipient)), epk, recipient)
        nonce = os.urandom(12)
        boxes[key_id(public)] = {"epk": _b64(epk), "nonce": _b64(nonce),
                                 "ct": _b64(AESGCM(key).encrypt(nonce, plain, _INFO))}
    return json.dumps({MARK: SCHEME, "keys": sorted(env), "boxes": boxes})


def is_sealed(data: Any) -> bool:
    return isinstance(data, dict) and MARK in data


def open_env(data: dict[str, Any], private: Any | None) -> dict[str, str]:
    """The env of a sealed DATA: its values with PRIVATE's box, else a SealedEnv."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    box = None if private is None else data["boxes"].get(key_id(public_b64(private)))
    if private is None or box is None:
        return SealedEnv.fromkeys(data["keys"], "")
    epk = base64.b64decode(box["epk"])
    recipient = _raw_public(private.public_key())
    key = _aead_key(private.exchange(X25519PublicKey.from_public_bytes(epk)), epk, recipient)
    plain = AESGCM(key).decrypt(base64.b64decode(box["nonce"]), base64.b64decode(box["ct"]), _INFO)
    return dict(json.loads(plain))
