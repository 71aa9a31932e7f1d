"""Where podctl works: backend, project and zone, and its own directories.

Each value comes from the first of: a command-line flag, the environment
(`PODCTL_BACKEND`, `CLOUDSDK_CORE_PROJECT`, `CLOUDSDK_COMPUTE_ZONE`), `podctl.toml`
in the current directory, and, against Google Cloud, the active gcloud
configuration (read from its files, without running gcloud). The fake backend
falls back to its own project and zone instead of gcloud's.

Against Google Cloud the Cloud TPU and Cloud Storage endpoints may be moved as
gcloud's are (Private Service Connect, regional endpoints, a local replay in
tests): `CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU` / `_STORAGE` / `_COMPUTE` / `_OSLOGIN`, else
`tpu_endpoint` / `storage_endpoint` / ... in podctl.toml. Credentials stay Application
Default ones; the account OS Login knows podctl by is gcloud's (`CLOUDSDK_CORE_ACCOUNT`,
`gcloud config set account`) unless the credentials are a service account's.

With OS Login on for a slice's project or node, podctl imports its SSH key through the
OS Login API and logs in as the profile's POSIX username (cloud/oslogin.py);
`PODCTL_OSLOGIN=off` (or `oslogin = false` in podctl.toml) turns that path off.
"""

from __future__ import annotations

import configparser
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podctl.base.errors import ConfigError, InvalidValueError

BACKENDS = ("gcp", "fake")
FAKE_PROJECT = "fake-project"
# A v5p zone whose price podctl knows, so that `ls` and `cost` on the fake show dollars.
FAKE_ZONE = "us-east5-a"
FAKE_BUCKET = "podctl-fake"  # made by the fake cloud's GCS emulator at start
FAKE_ACCOUNT = "fake-user@example.com"  # the fake's one user (podctl/fake/api/oslogin.py), its OS Login
# The user's own access token on the fake cloud, as `gcloud auth print-access-token` gives
# one on Google's: the fake has no OAuth server to mint it, so it is fixed. Its GCS takes
# it as FAKE_ACCOUNT, the project's owner (podctl/fake/storage/iam.py); the hosts' tokens come from their
# metadata servers. Not a secret: the fake listens on loopback only.
FAKE_USER_TOKEN = "ya29.fake-user-of-the-fake-project"
_PROJECT = re.compile(r"^([a-z][a-z0-9.-]*:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_ENDPOINT = re.compile(r"^(https?)://([A-Za-z0-9.-]+|\[[0-9a-fA-F:]+\])(:[0-9]{1,5})?(/.*)?$")
# The API path gcloud's override may carry, which the Python clients add themselves.
_API_PATHS = {"tpu": ("/v2",), "storage": ("/storage/v1",), "compute": ("/compute/v1",),
              "oslogin": ("/v1",)}
_SWITCH = {"on": True, "true": True, "1": True, "yes": True,
           "off": False, "false": False, "0": False, "no": False}


def switch(value: object, name: str) -> bool | None:
    """VALUE of the boolean setting NAME (an environment variable or a podctl.toml key):
    None when unset or empty, else strictly one of _SWITCH's words, any case. The one
    parser for every boolean podctl reads, so that `False` or `no` never reads as on."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):  # podctl.toml's own true/false
        return value
    word = str(value).strip().lower()
    if word not in _SWITCH:
        raise InvalidValueError(f"{name}={value!r} is not a yes/no value: use 1, true, yes or on, "
                                "or 0, false, no or off.")
    return _SWITCH[word]


@dataclass(frozen=True)
class Settings:
    backend: str
    project: str
    zone: str
    config_dir: Path
    state_dir: Path
    bucket: str | None = None  # where runs keep bundles, logs, status, checkpoints
    tpu_endpoint: str | None = None  # an override of https://tpu.googleapis.com (gcp only)
    # Use OS Login where the project or node turns it on (PODCTL_OSLOGIN=off, or oslogin = false
    # in podctl.toml: never, as podctl before it, so that a test can show what that meets)
    oslogin: bool = True
    account: str | None = None  # who podctl is to OS Login: gcloud's account (gcp), the fake's user
    # How runs reach their hosts when `run --via` does not say (PODCTL_VIA, or via = "..." in
    # podctl.toml): a channel's name or auto, checked where channels are chosen
    # (jobs/channels/__init__.py, the one registry); None: the registry's default (auto).
    via: str | None = None
    via_from: str = "PODCTL_VIA"  # where VIA was said, for the line that refuses it
    # Which API makes and finds slices (--api, PODCTL_API, or api = "..." in podctl.toml):
    # "tpu" (the Cloud TPU API) or "compute" (Compute Engine MIGs); None: the slice type's
    # own (TPU7x: Compute Engine; the others: the Cloud TPU API).
    api: str | None = None

    def require_bucket(self) -> str:
        if not self.bucket:
            raise ConfigError("no GCS bucket for runs: pass --bucket, set PODCTL_BUCKET, or put "
                              "bucket = \"NAME\" in podctl.toml.")
        return self.bucket

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}"

    @property
    def fake_dir(self) -> Path:
        return self.state_dir / "fake"


def _home_dir(env: Mapping[str, str], own: str, xdg: str, default: str) -> Path:
    if env.get(own):
        return Path(env[own])
    base = Path(env[xdg]) if env.get(xdg) else Path.home() / default
    return base / "podctl"


def config_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Keys and user settings: $PODCTL_CONFIG_DIR, else $XDG_CONFIG_HOME/podctl."""
    return _home_dir(env, "PODCTL_CONFIG_DIR", "XDG_CONFIG_HOME", ".config")


def state_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The fake cloud's daemon and other state: $PODCTL_STATE_DIR, else $XDG_STATE_HOME/podctl."""
    return _home_dir(env, "PODCTL_STATE_DIR", "XDG_STATE_HOME", ".local/state")


def load_podctl_toml(directory: Path) -> dict[str, Any]:
    """The whole of DIRECTORY/podctl.toml ({} when there is none), checked."""
    path = directory / "podctl.toml"
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid TOML ({e}); fix or remove it.") from e


def read_podctl_toml(directory: Path) -> dict[str, Any]:
    """Its settings: the [podctl] table, or the top level."""
    data = load_podctl_toml(directory)
    settings: dict[str, Any] = data.get("podctl", data)
    return settings


def read_gcloud_config(env: Mapping[str, str]) -> dict[str, str]:
    """The active gcloud configuration's project and zone, from its INI files."""
    root = Path(env["CLOUDSDK_CONFIG"]) if env.get("CLOUDSDK_CONFIG") else Path.home() / ".config/gcloud"
    name = env.get("CLOUDSDK_ACTIVE_CONFIG_NAME")
    if not name:
        active = root / "active_config"
        name = active.read_text().strip() if active.exists() else "default"
    parser = configparser.ConfigParser()
    try:
        parser.read(root / "configurations" / f"config_{name}")
    except configparser.Error:
        return {}
    out = {}
    if parser.has_option("core", "project"):
        out["project"] = parser.get("core", "project")
    if parser.has_option("compute", "zone"):
        out["zone"] = parser.get("compute", "zone")
    if parser.has_option("core", "account"):
        out["account"] = parser.get("core", "account")
    return out


def endpoint_override(service: str, env: Mapping[str, str] = os.environ,
                      toml: dict[str, Any] | None = None, cwd: Path | None = None) -> str | None:
    """Where SERVICE ("tpu", "storage", "compute" or "oslogin") is, when gcloud's override or podctl.toml moves it:
    a root URL such as http://127.0.0.1:8080 (no trailing slash, no API path)."""
    var = f"CLOUDSDK_API_ENDPOINT_OVERRIDES_{service.upper()}"
    if toml is None:
        toml = read_podctl_toml(cwd or Path.cwd())
    value = env.get(var) or toml.get(f"{service}_endpoint")
    if not value:
        return None
    found = _ENDPOINT.match(str(value).strip())
    if not found:
        raise InvalidValueError(f"{var} / {service}_endpoint {value!r} is not an http(s) URL "
                                f"such as https://{service}.googleapis.com/.")
    url = str(value).strip().rstrip("/")
    for path in _API_PATHS[service]:
        url = url.removesuffix(path)
    return url


def _oslogin(env: Mapping[str, str], toml: dict[str, Any]) -> bool:
    if env.get("PODCTL_OSLOGIN"):
        on = switch(env["PODCTL_OSLOGIN"], "PODCTL_OSLOGIN")
    else:
        on = switch(toml.get("oslogin"), "oslogin (podctl.toml)")
    return True if on is None else on


def _via(env: Mapping[str, str], toml: dict[str, Any]) -> tuple[str | None, str]:
    """(the channel asked for, unchecked: the registry knows the names; where it was said)."""
    if env.get("PODCTL_VIA"):
        return env["PODCTL_VIA"], "PODCTL_VIA"
    via = toml.get("via")
    return (None if via in (None, "") else str(via)), "via (podctl.toml)"


APIS = ("tpu", "compute")


def _api(api: str | None, env: Mapping[str, str], toml: dict[str, Any]) -> str | None:
    chosen = api or env.get("PODCTL_API") or toml.get("api") or None
    if chosen is not None and chosen not in APIS:
        raise InvalidValueError(f"unknown api {chosen!r}: use --api tpu (the Cloud TPU API) or "
                                "--api compute (Compute Engine).")
    return chosen


def _backend(backend: str | None, env: Mapping[str, str], toml: dict[str, Any]) -> str:
    backend = backend or env.get("PODCTL_BACKEND") or toml.get("backend") or "gcp"
    if backend not in BACKENDS:
        raise InvalidValueError(f"unknown backend {backend!r}: use --backend gcp or --backend fake.")
    return backend


def _fallback(backend: str, env: Mapping[str, str]) -> dict[str, str]:
    return {"project": FAKE_PROJECT, "zone": FAKE_ZONE} if backend == "fake" else read_gcloud_config(env)


def _zone(zone: str | None, env: Mapping[str, str], toml: dict[str, Any], fallback: dict[str, str]) -> str | None:
    return zone or env.get("CLOUDSDK_COMPUTE_ZONE") or toml.get("zone") or fallback.get("zone")


def resolve_zone(*, backend: str | None = None, zone: str | None = None,
                 env: Mapping[str, str] = os.environ, cwd: Path | None = None) -> str | None:
    """The zone alone, in the same order as `resolve` (no project needed: `podctl plan`
    prices in it), or None when nothing names one."""
    toml = read_podctl_toml(cwd or Path.cwd())
    return _zone(zone, env, toml, _fallback(_backend(backend, env, toml), env))


def _account(backend: str, env: Mapping[str, str]) -> str | None:
    return env.get("CLOUDSDK_CORE_ACCOUNT") or (
        FAKE_ACCOUNT if backend == "fake" else read_gcloud_config(env).get("account"))


def resolve_account(*, backend: str | None = None, env: Mapping[str, str] = os.environ,
                    cwd: Path | None = None) -> str | None:
    """The account alone (no project needed: `queue ls --mine` asks who you are)."""
    return _account(_backend(backend, env, read_podctl_toml(cwd or Path.cwd())), env)


def resolve(*, backend: str | None = None, project: str | None = None, zone: str | None = None,
            bucket: str | None = None, env: Mapping[str, str] = os.environ,
            cwd: Path | None = None, api: str | None = None) -> Settings:
    toml = read_podctl_toml(cwd or Path.cwd())
    backend = _backend(backend, env, toml)
    fallback = _fallback(backend, env)
    project = project or env.get("CLOUDSDK_CORE_PROJECT") or toml.get("project") or fallback.get("project")
    zone = _zone(zone, env, toml, fallback)
    if not project:
        raise ConfigError("no Google Cloud project: pass --project, set CLOUDSDK_CORE_PROJECT, "
                          "or run `gcloud config set project PROJECT` (or use --backend fake).")
    if not zone:
        raise ConfigError("no zone: pass --zone (v5p: us-central1-a, us-east5-a; v6e: us-east5-b), set "
                          "CLOUDSDK_COMPUTE_ZONE, or run `gcloud config set compute/zone ZONE`.")
    if not _PROJECT.match(project):
        raise InvalidValueError(f"{project!r} is not a Google Cloud project id (6-30 lowercase "
                                "letters, digits and hyphens, starting with a letter).")
    if not _ZONE.match(zone):
        raise InvalidValueError(f"{zone!r} is not a zone name (e.g. us-central1-a).")
    bucket = (bucket or env.get("PODCTL_BUCKET") or toml.get("bucket")
              or (FAKE_BUCKET if backend == "fake" else None))
    if bucket is not None:
        bucket = bucket.removeprefix("gs://").rstrip("/")
        if not _BUCKET.match(bucket):
            raise InvalidValueError(f"{bucket!r} is not a GCS bucket name (3-63 lowercase letters, "
                                    "digits, -, _ and .).")
    tpu_endpoint = endpoint_override("tpu", env, toml) if backend == "gcp" else None
    account = _account(backend, env)
    via, via_from = _via(env, toml)
    return Settings(backend=backend, project=project, zone=zone,
                    config_dir=config_dir(env), state_dir=state_dir(env), bucket=bucket,
                    tpu_endpoint=tpu_endpoint, oslogin=_oslogin(env, toml), account=account,
                    via=via, via_from=via_from, api=_api(api, env, toml))
