"""Backend selection: the Cloud TPU provider (providers/cloud_tpu.py) for Google Cloud or
for the local fake cloud; `connect` is its opener in cloud/provider.py's registry.

This is the one place (besides the demo and tests) that knows the fake exists:
with backend "fake" it starts the fake cloud's daemon if it is not running and
points the real client at it. The seam is the network address, nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials

from podctl.base.settings import FAKE_ACCOUNT, Settings, endpoint_override
from podctl.cloud.firewall import COORDINATOR_PORT, ComputeReader
from podctl.cloud.oslogin import GOOGLE_COMPUTE, GOOGLE_OSLOGIN, OsLogin
from podctl.cloud.provider import SliceProvider
from podctl.cloud.providers.cloud_tpu import CloudTpu
from podctl.cloud.storage import Grant, fake_grant, gcloud_grant
from podctl.cloud.tpu_client import RetryPolicy
from podctl.cloud.translate import translate

if TYPE_CHECKING:
    from google.cloud import tpu_v2
else:  # imported at first use: lazy_tpu.py says why
    from podctl.cloud.lazy_tpu import tpu_v2

if TYPE_CHECKING:  # imported when chosen (compute_engine_at)
    from podctl.cloud.providers.compute_engine import ComputeEngine

GOOGLE_ENDPOINT = "tpu.googleapis.com"
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def api_for_endpoint(endpoint: str, credentials: Credentials | None = None,
                     retry: RetryPolicy = RetryPolicy(), override: str | None = None) -> CloudTpu:
    """The Cloud TPU provider (a TpuApi) on the REST transport at ENDPOINT (e.g. the fake's
    http://127.0.0.1:PORT); OVERRIDE names the setting that moved it there, if one did."""
    def client() -> tpu_v2.TpuClient:  # made at the first request (tpu_client.TpuApi.client)
        return tpu_v2.TpuClient(
            transport="rest",
            credentials=credentials or AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=endpoint),
        )

    return CloudTpu(client, endpoint=endpoint, retry=retry, override=override)


def google_credentials() -> Credentials:
    """Application Default Credentials with podctl's scopes, for every Google client; a
    missing or broken set is said in one line (translate)."""
    import google.auth

    try:
        credentials, _ = google.auth.default(scopes=_SCOPES)
    except Exception as e:  # DefaultCredentialsError and friends
        raise translate(e, "loading Application Default Credentials") from e
    found: Credentials = credentials
    return found


def bucket_grant(settings: Settings) -> Grant:
    """How a denied node's service account is given a role on a bucket, in the words of
    SETTINGS' backend: gcloud's on Google, `podctl fake grant` on the fake cloud."""
    return fake_grant if settings.backend == "fake" else gcloud_grant


# The backend switch: the one place below the CLI that knows the fake cloud (a daemon
# on loopback that the fake backend starts on first use). Callers above ask here.
def fake_running(settings: Settings) -> bool:
    from podctl.fake.admin import daemon

    return bool(daemon.status(settings.fake_dir).get("running"))


def stop_fake(settings: Settings) -> None:
    from podctl.fake.admin import daemon

    daemon.stop(settings.fake_dir)


def fake_endpoint(settings: Settings) -> str:
    from podctl.fake.admin import daemon

    url: str = daemon.start(settings.fake_dir, project=settings.project, zone=settings.zone)["tpu_api"]
    return url


def connect(settings: Settings) -> CloudTpu:
    if settings.backend == "fake":
        return api_for_endpoint(fake_endpoint(settings))
    credentials = google_credentials()
    if settings.tpu_endpoint:
        return api_for_endpoint(settings.tpu_endpoint, credentials,
                                override="CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU or podctl.toml tpu_endpoint")
    return api_for_endpoint(GOOGLE_ENDPOINT, credentials)


def compute_engine_at(endpoint: str, credentials: Credentials | None = None,
                      retry: RetryPolicy = RetryPolicy()) -> ComputeEngine:
    """The Compute Engine provider at ENDPOINT (the fake's server, or Google's). Imported
    here, when chosen: google-cloud-compute's types take seconds of CPU to import, which
    no Cloud TPU command should pay."""
    from podctl.cloud.compute_client import ComputeApi
    from podctl.cloud.providers.compute_engine import ComputeEngine

    return ComputeEngine(ComputeApi(endpoint, credentials, retry))


def connect_compute(settings: Settings) -> ComputeEngine:
    """The Compute Engine provider (TPU7x; v5p and v6e with --api compute): the fake's on
    its one server, Google's with Application Default Credentials otherwise."""
    if settings.backend == "fake":
        return compute_engine_at(fake_endpoint(settings))
    credentials = google_credentials()
    return compute_engine_at(endpoint_override("compute") or GOOGLE_COMPUTE, credentials)


def compute_reader(settings: Settings, api: SliceProvider) -> ComputeReader:
    """The Compute Engine API, for what podctl reads of VPC networks (firewall.py): the
    fake's on its slice API's server (API's endpoint), Google's with ADC otherwise."""
    if settings.backend == "fake":
        return ComputeReader(api.endpoint)
    credentials = google_credentials()
    return ComputeReader(endpoint_override("compute") or GOOGLE_COMPUTE, credentials)


def oslogin_client(settings: Settings, api: SliceProvider) -> OsLogin:
    """Project metadata and the OS Login API (oslogin.py): the fake's on its TPU API's
    server (API's endpoint) as its one user, Google's with ADC and gcloud's account."""
    if settings.backend == "fake":
        return OsLogin(api.endpoint, api.endpoint, settings.account or FAKE_ACCOUNT)
    credentials = google_credentials()
    # a service account's credentials say who they are; a user's are gcloud's account
    account = getattr(credentials, "service_account_email", None)
    if not account or "@" not in str(account):
        account = settings.account
    return OsLogin(endpoint_override("compute") or GOOGLE_COMPUTE,
                   endpoint_override("oslogin") or GOOGLE_OSLOGIN, account, credentials)


def storage_endpoint(settings: Settings) -> str | None:
    """Where GCS is: None for Google's, the fake's emulator for the fake backend."""
    if settings.backend != "fake":
        return None
    from podctl.fake.admin import daemon

    url: str | None = daemon.start(settings.fake_dir, project=settings.project, zone=settings.zone)["gcs"]
    return url


def job_ports(settings: Settings) -> tuple[int | None, int]:
    """(SSH port, JAX coordinator port) for the job layer: the same on both backends,
    the endpoint's address at the SSH port. TPU VMs take SSH on 22 and JAX's coordinator
    on 8476 (jobs/launch.py says why). The fake's hosts each have a loopback address of their own and serve SSH on
    22 there, or on one port for all that the fake reports (`ssh_port`); None only
    where every fake host shares 127.0.0.1 (macOS), where each endpoint names its port.
    """
    if settings.backend != "fake":
        return 22, COORDINATOR_PORT
    from podctl.fake.admin import daemon

    info = daemon.start(settings.fake_dir, project=settings.project, zone=settings.zone)
    return info.get("ssh_port"), COORDINATOR_PORT
