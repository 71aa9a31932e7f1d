"""What a slice's watchers accept (host/host_pin.py, standard library) against what the
client signs (jobs/pointer_sign.py, `cryptography`): the verifier against signatures
`cryptography` makes and tampered ones, the pin kept once, and each refusal."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from podctl.base import vocabulary
from podctl.base.errors import ConfigError, InvalidValueError
from podctl.host import host_pin, host_watch, run_layout
from podctl.jobs import pointer_sign

NODE = "pin8"
ATTRS = {"tpu-env": f"ACCELERATOR_TYPE: 'v5p-8'\nNODE_ID: '{NODE}'\nWORKER_ID: '0'\n"}


@pytest.fixture(scope="module")
def signer(tmp_path_factory) -> pointer_sign.Signer:
    return pointer_sign.Signer.load(tmp_path_factory.mktemp("config"))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory) -> pointer_sign.Signer:
    """Someone else's key: a metadata writer's, say."""
    return pointer_sign.Signer.load(tmp_path_factory.mktemp("stranger"))


def _body(pin_id: str, **over) -> dict:
    body = {"run": "r-1", "bucket": "b", "launch": run_layout.launch_object("r-1"), "sha256": "ab" * 32,
            "agent_sha": "ab" * 32, "agent_object": run_layout.agent_object("ab" * 32), "first_host": 0,
            "access": run_layout.identity_check_object("r-1"), "node": NODE, "pin": pin_id,
            "expires": int(time.time()) + 600}
    body.update(over)
    return body


def _check(pointer: str, pin: dict | None, now: float | None = None) -> None:
    parsed = host_watch.parse_pointer(pointer)
    text, sig = parsed[host_watch.SIGNED]
    host_pin.check(text, sig, parsed, pin, ATTRS, time.time() if now is None else now)


def test_the_host_and_the_client_share_their_names():
    assert host_watch.POINTER_VERSION == host_pin.POINTER_VERSION
    assert pointer_sign.PIN_KEY == host_pin.PIN_KEY == "podctl-pin"
    assert pointer_sign.PREFIX == f"{run_layout.ROOT}/"
    assert pointer_sign.KEY_BITS == 3072
    # a host that boots late, on the biggest slice, still takes its pointer
    assert vocabulary.pointer_valid_seconds(4096) > vocabulary.boot_wait_seconds(4096) + 1800


@pytest.mark.parametrize("bits", [2048, 3072, 4096])
def test_the_standard_library_verifier_accepts_what_cryptography_signs_and_nothing_tampered(bits):
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    n, e = key.public_key().public_numbers().n, key.public_key().public_numbers().e
    for message in (b"", b"x", json.dumps({"run": "r", "n": 1}).encode(), bytes(range(256)) * 40):
        sig = key.sign(message, padding.PKCS1v15(), hashes.SHA256())
        assert host_pin.verify(n, e, sig, message)
        assert not host_pin.verify(n, e, sig, message + b" ")  # another message
        flipped = bytearray(sig)
        flipped[len(sig) // 2] ^= 1
        assert not host_pin.verify(n, e, bytes(flipped), message)  # a bit of the signature
        assert not host_pin.verify(n, e, sig[1:], message)  # short
        assert not host_pin.verify(n, e, b"\0" + sig, message)  # long
        assert not host_pin.verify(n, e, n.to_bytes(len(sig), "big"), message)  # s >= n
    message = b"the same message"
    other = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    assert not host_pin.verify(n, e, other.sign(message, padding.PKCS1v15(), hashes.SHA256()), message)
    # another padding or hash of the same key is not this scheme's
    assert not host_pin.verify(n, e, key.sign(message, padding.PKCS1v15(), hashes.SHA512()), message)
    assert not host_pin.verify(n, e, key.sign(message, padding.PSS(padding.MGF1(hashes.SHA256()), 32),
                                              hashes.SHA256()), message)


def test_the_signing_key_is_made_once_private_and_its_public_half_is_what_trust_key_reads(tmp_path):
    first = pointer_sign.Signer.load(tmp_path)
    assert first.path == tmp_path / "keys" / pointer_sign.KEY_NAME
    assert first.path.stat().st_mode & 0o777 == 0o600 and first.path.parent.stat().st_mode & 0o777 == 0o700
    assert first.path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert pointer_sign.Signer.load(tmp_path).numbers == first.numbers  # kept, not made again
    assert first.numbers[0].bit_length() == 3072
    assert pointer_sign.read_trusted_key(first.public_path) == first.numbers
    ssh = tmp_path / "id_rsa.pub"
    ssh.write_bytes(first.private.public_key().public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b" alice@laptop\n")
    assert pointer_sign.read_trusted_key(ssh) == first.numbers
    first.path.write_text("garbage")
    with pytest.raises(ConfigError, match="unreadable"):
        pointer_sign.Signer.load(tmp_path)


def test_a_trusted_key_that_is_no_rsa_public_key_of_2048_bits_is_refused_in_one_line(tmp_path):
    cases = {"missing.pem": None, "text.pem": b"hello\n",
             "ec.pem": ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
                 serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
             "short.pem": rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key().public_bytes(
                 serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)}
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        with pytest.raises(InvalidValueError) as caught:
            pointer_sign.read_trusted_key(tmp_path / name)
        assert str(caught.value).startswith(f"--trust-key {tmp_path / name}: ") and "\n" not in str(caught.value)
    assert "1024 bits" in _said(tmp_path / "short.pem")


def _said(path: Path) -> str:
    with pytest.raises(InvalidValueError) as caught:
        pointer_sign.read_trusted_key(path)
    return str(caught.value)


def test_the_pin_is_kept_at_first_sight_0600_and_never_replaced_from_metadata(tmp_path, signer, stranger):
    ours = pointer_sign.pin_metadata(signer, "b")
    pin = host_pin.kept_pin(str(tmp_path), {**ATTRS, **ours})
    kept = tmp_path / host_pin.PIN_FILE
    assert kept.stat().st_mode & 0o777 == 0o600 and kept.read_text() == ours[host_pin.PIN_KEY]
    assert pin["keys"] == [signer.numbers] and pin["bucket"] == "b" and pin["prefix"] == "podctl/"
    # a metadata writer's pin (their key, any bucket) later, or after a reboot: the first stands
    theirs = pointer_sign.pin_metadata(stranger, None)
    assert host_pin.kept_pin(str(tmp_path), {**ATTRS, **theirs}) == pin
    assert host_pin.kept_pin(str(tmp_path), ATTRS) == pin
    # a slice whose first metadata had no pin accepts nothing, even once one is added
    bare = tmp_path / "bare"
    bare.mkdir()
    assert host_pin.kept_pin(str(bare), ATTRS) is None
    assert host_pin.kept_pin(str(bare), {**ATTRS, **theirs}) is None
    with pytest.raises(host_pin.PinRefusal, match="created without a pin"):
        _check(stranger.pointer(_body(json.loads(theirs[host_pin.PIN_KEY])["id"])), None)


def test_a_pointer_the_pin_does_not_accept_is_refused_saying_why(signer, stranger):
    metadata = pointer_sign.pin_metadata(signer, "b")
    pin = host_pin.parse_pin(metadata[host_pin.PIN_KEY])
    assert pointer_sign.pin_of(metadata) == pin
    _check(signer.pointer(_body(pin["id"])), pin)  # the client's own: accepted
    now = time.time()
    refused = {
        "signed by no key pinned": stranger.pointer(_body(pin["id"])),
        "for another slice": signer.pointer(_body("0" * 32)),  # an old slice of the same name's
        "for node 'other8'": signer.pointer(_body(pin["id"], node="other8")),
        "has expired": signer.pointer(_body(pin["id"], expires=int(now) - 1)),
        "not the pinned 'b'": signer.pointer(_body(pin["id"], bucket="evil")),
        "launch is outside the pinned prefix": signer.pointer(_body(pin["id"], launch="evil/runs/x/launch.json")),
        "agent_object is outside": signer.pointer(_body(pin["id"], agent_object="podctl/../evil.zip")),
    }
    for why, pointer in refused.items():
        with pytest.raises(host_pin.PinRefusal, match=why):
            _check(pointer, pin, now)
    # the copied pointer with its body changed (another launch.json, one PATCH): its signature fails
    outer = json.loads(signer.pointer(_body(pin["id"])))
    body = json.loads(outer["body"])
    body.update(launch="evil/runs/r-1/launch.json", sha256="cd" * 32)
    forged = json.dumps({**outer, "body": json.dumps(body)})
    with pytest.raises(host_pin.PinRefusal, match="signed by no key pinned"):
        _check(forged, pin)
    with pytest.raises(host_pin.PinRefusal, match="not base64"):
        _check(json.dumps({**outer, "sig": "not base64!"}), pin)
    trusted = pointer_sign.pin_metadata(signer, None, (stranger.numbers, signer.numbers))
    both = host_pin.parse_pin(trusted[host_pin.PIN_KEY])
    assert both["keys"] == [signer.numbers, stranger.numbers] and both["bucket"] is None
    _check(stranger.pointer(_body(both["id"], bucket="any")), both)  # --trust-key's key, any bucket


def test_a_pin_that_is_not_one_is_refused(signer):
    good = json.loads(pointer_sign.pin_metadata(signer, "b")[host_pin.PIN_KEY])
    for bad in ("{", "[]", json.dumps({**good, "v": 9}), json.dumps({**good, "keys": []}),
                json.dumps({**good, "keys": [{"n": "zz", "e": 3}]}), json.dumps({**good, "id": ""}),
                json.dumps({**good, "prefix": None}), json.dumps({**good, "bucket": ""})):
        with pytest.raises(host_pin.PinRefusal):
            host_pin.parse_pin(bad)
    assert base64.b64decode(json.loads(signer.pointer({"a": 1}))["sig"])  # base64, as the host reads it


def test_a_host_finds_its_slice_in_tpu_env_or_on_compute_engine_in_the_mig_that_made_it():
    """A Cloud TPU node's VM: NODE_ID in tpu-env. A Compute Engine VM has none (no Cloud TPU
    node owns it); its `created-by` attribute names its MIG, which is podctl's slice."""
    assert host_pin.slice_node(ATTRS) == NODE
    made = {"tpu-env": "ACCELERATOR_TYPE: 'tpu7x-16'\nWORKER_ID: '1'\n",
            "created-by": "projects/123456789012/zones/us-central1-c/instanceGroupManagers/iw16"}
    assert host_pin.slice_node(made) == "iw16"
    for other in ({}, {"created-by": "projects/1/zones/z/instanceGroups/iw16"},
                  {"created-by": "projects/1/zones/z/instanceGroupManagers/"}):
        assert host_pin.slice_node(other) == ""
