"""`podctl --backend gcp` as on Google Cloud, offline (issue 11, items 2 and 4).

The gcp backend's whole path runs: Application Default Credentials from a
service-account key file (GOOGLE_APPLICATION_CREDENTIALS) whose `token_uri` is the
replay server's token endpoint (a signed JWT is exchanged for a token, as with
Google's), the Cloud TPU endpoint moved by gcloud's
CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU (or podctl.toml), and answers replayed from
recorded real traffic (tests/replay_tpu.py). Then each real-only error gives its one line.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from podctl.base.errors import InvalidValueError
from podctl.base.settings import endpoint_override, resolve
from tests.cli_in_process import podctl_here
from tests.conftest import Podctl, assert_one_line_error
from tests.replay_tpu import PROJECT_NUMBER, Replay

PROJECT = "replay-project"


def _key_file(tmp: Path, token_uri: str) -> Path:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp / "sa.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "replay-key",
        "private_key": pem, "client_email": f"podctl-test@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": token_uri}))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def key_pem(tmp_path_factory) -> str:
    return _key_file(tmp_path_factory.mktemp("key"), "http://unused").read_text()


@pytest.fixture
def gcp(tmp_path: Path, key_pem: str):
    """A podctl CLI on the gcp backend, with ADC and the endpoint pointed at a replay."""
    with Replay(project=PROJECT) as replay:
        key = json.loads(key_pem)
        key["token_uri"] = f"{replay.url}/token"
        (tmp_path / "sa.json").write_text(json.dumps(key))
        private = serialization.load_pem_private_key(key["private_key"].encode(), None)
        replay.public_keys.append(private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode())
        cli = Podctl(tmp_path)
        cli.env.update({"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "sa.json"),
                        "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": f"{replay.url}/",
                        "CLOUDSDK_CORE_PROJECT": PROJECT, "CLOUDSDK_COMPUTE_ZONE": "us-central1-a"})
        cli.replay = replay  # type: ignore[attr-defined]
        yield cli
        assert not replay.nodes and not replay.queued, "the test left billable resources"


def _here(gcp: Podctl, *args: str) -> subprocess.CompletedProcess:
    """`podctl ARGS` on the gcp backend in this process (tests/cli_in_process.py): the
    one-line errors below; the lifecycles and test_api_disabled_gives_the_link_and_the_command
    keep their `podctl` processes, the whole path as a user runs it."""
    return podctl_here(gcp.tmp, *args, env=gcp.env)


def test_up_status_ls_down_a_node(gcp):
    up = gcp.json("--backend", "gcp", "up", "--slice", "v5p-8", "--name", "real")
    assert up["created"] and up["ready"] and up["state"] == "READY"
    # ADC signed with the key file: a self-signed JWT, or a token from the local token_uri
    assert gcp.replay.jwts_verified + gcp.replay.tokens_issued >= 1
    status = gcp("--backend", "gcp", "status", "real").stdout
    assert "10.20.30.40" in status and "8.8.8.8" in status  # internal and external addresses
    listed = json.loads(_here(gcp, "--backend", "gcp", "ls", "--json").stdout)
    assert [s["name"] for s in listed] == ["real"]
    down = gcp.json("--backend", "gcp", "down", "real", "--yes")
    assert down["deleted"] and down["kind"] == "node"
    assert json.loads(_here(gcp, "--backend", "gcp", "ls", "--json").stdout) == []


def test_up_status_down_a_queued_resource(gcp):
    up = gcp.json("--backend", "gcp", "up", "--slice", "v5p-8", "--name", "qr", "--queued")
    assert up["kind"] == "queued-resource" and up["ready"] and up["state"] == "ACTIVE"
    status = gcp("--backend", "gcp", "status", "qr").stdout
    assert "10.20.30.40" in status and "8.8.8.8" in status
    assert gcp.json("--backend", "gcp", "down", "qr", "--yes")["kind"] == "queued-resource"


def test_endpoint_override_from_podctl_toml(gcp, tmp_path: Path):
    url = gcp.env.pop("CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU")
    (tmp_path / "podctl.toml").write_text(f'tpu_endpoint = "{url}"\n')
    assert json.loads(_here(gcp, "--backend", "gcp", "ls", "--json").stdout) == []


def test_endpoint_override_forms():
    env = {"CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": "https://tpu.googleapis.com/",
           "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": "https://storage.googleapis.com/storage/v1/"}
    assert endpoint_override("tpu", env, {}) == "https://tpu.googleapis.com"
    assert endpoint_override("storage", env, {}) == "https://storage.googleapis.com"
    assert endpoint_override("tpu", {}, {"tpu_endpoint": "http://127.0.0.1:8080/v2/"}) == "http://127.0.0.1:8080"
    assert endpoint_override("tpu", {}, {}) is None
    with pytest.raises(InvalidValueError, match="not an http"):
        endpoint_override("tpu", {"CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU": "tpu.googleapis.com"}, {})
    settings = resolve(backend="gcp", project=PROJECT, zone="us-central1-a", env=env, cwd=Path("/"))
    assert settings.tpu_endpoint == "https://tpu.googleapis.com"


# ---- item 4: each real-only error in one line -------------------------------------

def _error(status: int, code: str, message: str, *details: dict) -> dict:
    return {"error": {"code": status, "message": message, "status": code, "details": list(details)}}


def test_missing_permission_names_it_and_the_fix(gcp):
    resource = f"projects/{PROJECT}/locations/us-central1-a"
    gcp.replay.errors.append(("GET", r"v2/.*/queuedResources", 403, _error(
        403, "PERMISSION_DENIED",
        f"Permission 'tpu.queuedResources.list' denied on resource '//tpu.googleapis.com/{resource}' "
        "(or it may not exist).",
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "IAM_PERMISSION_DENIED",
         "domain": "iam.googleapis.com",
         "metadata": {"permission": "tpu.queuedResources.list", "resource": resource}})))
    proc = _here(gcp, "--backend", "gcp", "ls")
    assert_one_line_error(proc, 1, "tpu.queuedResources.list", PROJECT, "roles/tpu.admin",
                          "gcloud projects add-iam-policy-binding")


def test_api_disabled_gives_the_link_and_the_command(gcp):
    url = f"https://console.developers.google.com/apis/api/tpu.googleapis.com/overview?project={PROJECT_NUMBER}"
    gcp.replay.errors.append(("GET", r"v2/.*", 403, _error(
        403, "PERMISSION_DENIED",
        f"Cloud TPU API has not been used in project {PROJECT_NUMBER} before or it is disabled. "
        f"Enable it by visiting {url} then retry.",
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED",
         "domain": "googleapis.com",
         "metadata": {"consumer": f"projects/{PROJECT_NUMBER}", "service": "tpu.googleapis.com",
                      "activationUrl": url}})))
    proc = gcp("--backend", "gcp", "ls", check=False)
    assert_one_line_error(proc, 1, url, "gcloud services enable tpu.googleapis.com")


def test_quota_names_the_quota_the_region_and_where_to_ask(gcp):
    gcp.replay.errors.append(("POST", r"v2/.*/nodes", 429, _error(
        429, "RESOURCE_EXHAUSTED",
        "Quota limit 'TPUV5PPerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-central1.",
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
            "subject": f"project:{PROJECT}",
            "description": "Quota limit 'TPUV5PPerProjectPerRegionForTPUAPI' has been exceeded."}]})))
    proc = _here(gcp, "--backend", "gcp", "up", "--slice", "v5p-8", "--name", "big")
    assert_one_line_error(proc, 1, "TPUV5PPerProjectPerRegionForTPUAPI", "region us-central1",
                          "iam-admin/quotas")


def test_no_credentials_says_how_to_sign_in(gcp):
    del gcp.env["GOOGLE_APPLICATION_CREDENTIALS"]
    proc = _here(gcp, "--backend", "gcp", "ls")
    assert_one_line_error(proc, 2, "gcloud auth application-default login")


def test_endpoint_override_that_does_not_answer(gcp):
    with socket.socket() as s:  # a port with nobody behind it
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/"
    gcp.env["CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU"] = dead
    proc = _here(gcp, "--backend", "gcp", "ls")
    assert_one_line_error(proc, 2, dead.rstrip("/"), "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU")


def test_storage_endpoint_override_with_adc(fake, tmp_path: Path, key_pem: str, monkeypatch):
    """Google's GCS code path (ADC, no emulator switch) moved by CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE:
    here to the fake's GCS emulator, in gcloud's form (with /storage/v1/)."""
    import asyncio

    from podctl.base.settings import FAKE_BUCKET, FAKE_USER_TOKEN
    from podctl.cloud.storage import Storage

    # only its token endpoint is used, handing out the token the fake's GCS takes as the
    # user's (the fake checks every bearer, as GCS does)
    with Replay(project=PROJECT, token=FAKE_USER_TOKEN) as replay:
        key = json.loads(key_pem)
        key["token_uri"] = f"{replay.url}/token"
        (tmp_path / "sa.json").write_text(json.dumps(key))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "sa.json"))
        monkeypatch.setenv("CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE", f"{fake.gcs_url}/storage/v1/")
        storage = Storage.connect(FAKE_BUCKET, project=PROJECT)
        assert storage.endpoint is None  # Google's path, not the emulator's
        asyncio.run(storage.upload_bytes("override/x", b"hello"))
        assert asyncio.run(storage.download_bytes("override/x")) == b"hello"
        assert replay.tokens_issued >= 1  # ADC got its token from the key's token_uri
