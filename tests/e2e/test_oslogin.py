"""OS Login (issue 23, item 5): with `enable-oslogin=TRUE` in the project's metadata the
hosts ignore `ssh-keys` and take only keys imported through the OS Login API, for the
profile's POSIX username; podctl sees it and logs in that way, as gcloud does.

The CLI cases share one v5p-8 on one fake daemon (CI time); each sets the switch it needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from podctl.cloud.oslogin import OsLogin, enabled
from podctl.base.errors import PermissionDeniedError
from podctl.fake.admin.admin_client import FakeAdmin
from podctl.fake.api.oslogin import FAKE_ACCOUNT, posix_username
from podctl.base.settings import FAKE_ACCOUNT as CLIENT_ACCOUNT
from tests.boot_support import fake_status, run_states
from tests.conftest import Podctl, _share_env_signing_key, assert_one_line_error, slice_on_daemon

SCRIPT = str(Path(__file__).parents[1] / "scripts" / "show_env.py")
# OS Login is who SSH logs in as: these runs take SSH (`auto` would start them through
# the slice's watchers, which run the agent as root and need no login)
SSH = ("--via", "ssh")
POSIX_USER = "fake_user_example_com"


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    tmp = tmp_path_factory.mktemp("oslogin")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    with slice_on_daemon(Podctl(tmp), "v5p-8", "osl") as podctl:
        yield podctl


def _admin(cli: Podctl) -> FakeAdmin:
    """The shared daemon's admin, its address asked of `podctl fake status` once per module
    (tests/boot_support.py), not once per look (about a second of CPU each)."""
    return FakeAdmin(fake_status(cli)["admin"])


def _os_login(cli: Podctl, on: bool = True) -> None:
    """The switch a case needs, through the daemon's admin in this process: `podctl fake
    inject os-login` (and its --off) keep their own words checked in the cases that say them."""
    _admin(cli).inject("os-login", off=not on)


def _user_seen(proc) -> str | None:
    line = next(line for line in proc.stdout.splitlines() if "ENV " in line)
    return json.loads(line.split("ENV ", 1)[1])["USER"]


def test_with_os_login_on_a_run_logs_in_as_the_posix_username(cli):
    said = cli("fake", "inject", "os-login").stdout
    assert "OS Login on (enable-oslogin=TRUE)" in said
    proc = cli("run", "osl", *SSH, SCRIPT, "USER")
    assert _user_seen(proc) == POSIX_USER
    assert _admin(cli).status()["account"] == FAKE_ACCOUNT == CLIENT_ACCOUNT
    exec_proc = cli("exec", "osl", "--", "bash", "-c", "echo $USER")
    assert exec_proc.stdout.strip().endswith(POSIX_USER)


def test_with_podctls_os_login_path_off_the_run_fails_as_on_google(cli):
    _os_login(cli)
    before = set(run_states(cli))  # the runs' records in GCS, read in this process
    proc = cli("run", "osl", *SSH, SCRIPT, "USER", check=False, env={"PODCTL_OSLOGIN": "off"})
    assert_one_line_error(proc, 1, "refused podctl's SSH key for podctl", "OS Login",
                          "PODCTL_OSLOGIN=off")
    # nothing runs on the host: no SSH session is open, and no run of it goes on
    hosts = _admin(cli).hosts()["nodes"]
    assert all(node["sessions"] == 0 and node["connections"] == 0 for node in hosts.values()), hosts
    runs = json.loads(cli("runs", "--json").stdout)
    assert all(r["state"] not in ("running", "starting") for r in runs if r["run_id"] not in before), runs


def test_an_import_the_api_refuses_stops_the_run_before_it_starts(cli):
    _os_login(cli)
    proc = cli("run", "osl", *SSH, SCRIPT, "USER", check=False, env={"CLOUDSDK_CORE_ACCOUNT": "other@example.com"})
    assert_one_line_error(proc, 1, "uses OS Login", "other@example.com", "roles/compute.osAdminLogin",
                          "gcloud projects add-iam-policy-binding fake-project --member=user:other@example.com")


def test_os_login_off_gives_the_metadata_keys_back(cli):
    assert "OS Login off" in cli("fake", "inject", "os-login", "--off").stdout
    proc = cli("run", "osl", *SSH, SCRIPT, "USER", env={"PODCTL_OSLOGIN": "off"})
    assert _user_seen(proc) == "podctl"
    assert _user_seen(cli("run", "osl", *SSH, SCRIPT, "USER")) == "podctl"  # detected off: as before


def test_each_user_logs_in_to_their_own_home_as_the_login_profile_says(cli):
    """A TPU VM gives every user /home/USER: the OS Login user and podctl's own user
    (ssh-keys metadata) do not share one home, and neither sees what the other left."""
    said = 'echo "HOME=$HOME PWD=$PWD"; ls; echo mine > left-by-$USER'
    _os_login(cli)
    on = cli("exec", "osl", "--", "bash", "-c", said).stdout
    profile = requests.get(f"{fake_status(cli)['tpu_api']}/v1/users/{FAKE_ACCOUNT}/loginProfile",
                           params={"projectId": "fake-project"}, timeout=10).json()
    home = profile["posixAccounts"][0]["homeDirectory"]
    assert home == f"/home/{POSIX_USER}"
    assert f"/host-0000{home} PWD=" in on and on.count(f"/host-0000{home}") == 2, on
    _os_login(cli, on=False)
    off = cli("exec", "osl", "--", "bash", "-c", said).stdout
    assert "/host-0000/home/podctl PWD=" in off and f"left-by-{POSIX_USER}" not in off, off


def test_a_refused_import_is_one_line_naming_the_role_and_the_fix(fake):
    with pytest.raises(PermissionDeniedError) as refused:
        OsLogin(fake.url, fake.url, "someone@else.example").import_key("fake-project", "ssh-ed25519 AAAA")
    message = str(refused.value)
    assert "\n" not in message
    assert "roles/compute.osAdminLogin" in message
    assert ("gcloud projects add-iam-policy-binding fake-project --member=user:someone@else.example"
            in message)


def test_the_fake_os_login_api_answers_in_its_shapes(fake):

    from podctl.cloud.sshkey import ensure_ssh_key

    key = ensure_ssh_key(Path(fake.describe()["hosts_root"]).parent / "client").public_key
    base = f"{fake.url}/v1/users/{FAKE_ACCOUNT}"
    bad = requests.post(f"{base}:importSshPublicKey", json={"key": "not a key"}, timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"
    done = requests.post(f"{base}:importSshPublicKey", params={"projectId": "fake-project"},
                         json={"key": key + " me", "expirationTimeUsec": "1"}, timeout=10).json()
    profile = done["loginProfile"]
    account = profile["posixAccounts"][0]
    assert account == {"primary": True, "username": POSIX_USER, "uid": account["uid"],
                       "gid": account["gid"], "homeDirectory": f"/home/{POSIX_USER}",
                       "operatingSystemType": "LINUX", "accountId": "fake-project",
                       "name": f"users/{FAKE_ACCOUNT}/projects/fake-project"}
    (fingerprint, entry), = profile["sshPublicKeys"].items()
    assert len(fingerprint) == 64 and entry["fingerprint"] == fingerprint
    assert entry["key"] == key + " me" and entry["expirationTimeUsec"] == "1"
    assert requests.get(f"{base}/loginProfile", timeout=10).json()["sshPublicKeys"] == profile["sshPublicKeys"]
    from podctl.fake.api.oslogin import login_keys

    assert login_keys(fake.world) == []  # expired (1 µs after 1970): no host takes it


