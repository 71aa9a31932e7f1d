"""The client's side of what a slice's watchers accept: its signing key, the pin put in
every slice podctl makes, and the signed pointers of `run --via boot`.

    pin_metadata(config_dir, bucket, trusted) -> {"podctl-pin": PIN}   (up, the queue's ask)
    Signer.load(config_dir).pointer(body) -> the `podctl-run` value       (boot_channel.py)

The key is RSA-3072, made on first use and kept in the config directory beside podctl's
SSH key (KEY_DIR, 0600: where a user already keeps what lets podctl reach their hosts);
its public half is written beside it (PUBLIC_NAME) for a colleague's `up --trust-key`.
A pointer is RSASSA-PKCS1-v1_5 with SHA-256 over its body's exact JSON text, which the
hosts check with the standard library only (host_pin.py, which also documents the pin
and the body's fields): so a metadata writer or a bucket writer alone cannot make a host
run anything, only the holder of a key pinned when the slice was made.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podctl.base.errors import ConfigError, InvalidValueError
from podctl.cloud.sshkey import write_private
from podctl.host import host_pin, run_layout

PIN_KEY = host_pin.PIN_KEY  # node metadata: the slice's pin (JSON, public keys only)
KEY_DIR = "keys"
KEY_NAME = "pointer_rsa3072.pem"  # PKCS#8, unencrypted, 0600
PUBLIC_NAME = "pointer_rsa3072.pub.pem"  # SubjectPublicKeyInfo: what `--trust-key` reads
KEY_BITS = 3072
MIN_TRUSTED_BITS = 2048  # a trusted key shorter than this is refused (NIST SP 800-131A)
PREFIX = f"{run_layout.ROOT}/"  # every object a pointer names lives under it


def canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def public_numbers(key: object) -> tuple[int, int]:
    """(n, e) of an RSA public key as `cryptography` loads it."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    if not isinstance(key, rsa.RSAPublicKey):
        raise TypeError("not an RSA key")
    numbers = key.public_numbers()
    return numbers.n, numbers.e


@dataclass(frozen=True)
class Signer:
    """This client's signing key, and where it and its public half live."""

    private: object  # cryptography's RSAPrivateKey (kept untyped: imported when used)
    path: Path

    @property
    def public_path(self) -> Path:
        return self.path.with_name(PUBLIC_NAME)

    @property
    def numbers(self) -> tuple[int, int]:
        return public_numbers(self.private.public_key())  # type: ignore[attr-defined]

    @classmethod
    def load(cls, config_dir: Path) -> Signer:
        """The key in CONFIG_DIR/KEY_DIR, made there (with its public half) on first use."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key_dir = config_dir / KEY_DIR
        key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(key_dir, 0o700)
        path = key_dir / KEY_NAME
        if not path.exists():
            made = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
            write_private(path, made.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
        os.chmod(path, 0o600)
        try:
            private = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(private, rsa.RSAPrivateKey):
                raise ValueError("not an RSA key")
        except (ValueError, TypeError, OSError) as e:
            raise ConfigError(f"podctl's signing key {path} is unreadable ({e}); remove it and podctl "
                              "makes a new one (slices made with the old one then take runs only over SSH).") from e
        signer = cls(private=private, path=path)
        if not signer.public_path.exists():
            write_private(signer.public_path, private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        return signer

    def pointer(self, body: dict[str, Any]) -> str:
        """The `podctl-run` value for BODY: {"v", "body": its canonical JSON, "sig"}."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        text = canonical(body)
        sig = self.private.sign(text.encode(), padding.PKCS1v15(), hashes.SHA256())  # type: ignore[attr-defined]
        return canonical({"v": host_pin.POINTER_VERSION, "body": text, "sig": base64.b64encode(sig).decode()})


def read_trusted_key(path: Path) -> tuple[int, int]:
    """`--trust-key PATH`: an RSA public key, PEM (podctl's PUBLIC_NAME) or OpenSSH's
    `ssh-rsa` line -> (n, e); InvalidValueError in one line otherwise."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    try:
        data = path.read_bytes()
    except OSError as e:
        raise InvalidValueError(f"--trust-key {path}: cannot read it ({e.strerror or e}).") from None
    for load in (serialization.load_pem_public_key, serialization.load_ssh_public_key):
        try:
            numbers = public_numbers(load(data.strip()))
        except (ValueError, TypeError, UnsupportedAlgorithm):
            continue
        if numbers[0].bit_length() < MIN_TRUSTED_BITS:
            raise InvalidValueError(f"--trust-key {path}: an RSA key of {numbers[0].bit_length()} bits; "
                                    f"podctl trusts {MIN_TRUSTED_BITS} bits or more.")
        return numbers
    raise InvalidValueError(f"--trust-key {path}: not an RSA public key (PEM, as podctl writes to "
                            f"~/.config/podctl/{KEY_DIR}/{PUBLIC_NAME}, or an `ssh-rsa` line).")


def pin_metadata(signer: Signer, bucket: str | None, trusted: tuple[tuple[int, int], ...] = ()) -> dict[str, str]:
    """The node metadata that pins a new slice: a fresh id (a pointer signed for another
    slice of the same name is refused), the bucket (None: any) and prefix its runs live
    under, and the keys whose pointers its watchers accept (SIGNER's, then TRUSTED)."""
    keys: list[tuple[int, int]] = []
    for key in (signer.numbers, *trusted):
        if key not in keys:
            keys.append(key)
    pin = {"v": host_pin.PIN_VERSION, "id": uuid.uuid4().hex, "bucket": bucket, "prefix": PREFIX,
           "keys": [{"n": format(n, "x"), "e": e} for n, e in keys]}
    return {PIN_KEY: canonical(pin)}


def pin_of(metadata: dict[str, str]) -> dict[str, Any] | None:
    """A node's pin as its metadata shows it now (None: made without one). The hosts keep
    the one they saw at their first boot; this copy only tells podctl what to sign for."""
    text = metadata.get(PIN_KEY)
    if text is None:
        return None
    try:
        return host_pin.parse_pin(text)
    except host_pin.PinRefusal:
        return None
