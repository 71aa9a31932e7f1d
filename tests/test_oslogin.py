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
from podctl.errors import PermissionDeniedError
from podctl.fake.admin_client import FakeAdmin
from podctl.fake.oslogin import FAKE_ACCOUNT, posix_username
from podctl.settings import FAKE_ACCOUNT as CLIENT_ACCOUNT
from tests.conftest import Podctl, _share_env_signing_key, assert_one_line_error, slice_on_daemon

SCRIPT = str(Path(__file__).parent / "scripts" / "show_env.py")
POSIX_USER = "fake_user_example_com"


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    tmp = tmp_path_factory.mktemp("oslogin")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    with slice_on_daemon(Podctl(tmp), "v5p-8", "osl") as podctl:
        yield podctl


def _admin(cli: Podctl) -> FakeAdmin:
    return FakeAdmin(cli.json("fake", "status")["admin"])


def _user_seen(proc) -> str | None:
    line = next(line for line in proc.stdout.splitlines() if "ENV " in line)
    return json.loads(line.split("ENV ", 1)[1])["USER"]


def test_with_os_login_on_a_run_logs_in_as_the_posix_username(cli):
    said = cli("fake", "inject", "os-login").stdout
    assert "OS Login on (enable-oslogin=TRUE)" in said
    proc = cli("run", "osl", SCRIPT, "USER")
    assert _user_seen(proc) == POSIX_USER
    assert _admin(cli).status()["account"] == FAKE_ACCOUNT == CLIENT_ACCOUNT
    exec_proc = cli("exec", "osl", "--", "bash", "-c", "echo $USER")
    assert exec_proc.stdout.strip().endswith(POSIX_USER)


def test_with_podctls_os_login_path_off_the_run_fails_as_on_google(cli):
    cli("fake", "inject", "os-login")
    before = len(json.loads(cli("runs", "--json").stdout))
    proc = cli("run", "osl", SCRIPT, "USER", check=False, env={"PODCTL_OSLOGIN": "off"})
    assert_one_line_error(proc, 1, "refused podctl's SSH key for podctl", "OS Login",
                          "PODCTL_OSLOGIN=off")
    # nothing runs on the host: no SSH session is open, and no run of it goes on
    hosts = _admin(cli).hosts()["nodes"]
    assert all(node["sessions"] == 0 and node["connections"] == 0 for node in hosts.values()), hosts
    runs = json.loads(cli("runs", "--json").stdout)
    assert all(r["state"] not in ("running", "starting") for r in runs[:len(runs) - before]), runs


def test_an_import_the_api_refuses_stops_the_run_before_it_starts(cli):
    cli("fake", "inject", "os-login")
    proc = cli("run", "osl", SCRIPT, "USER", check=False, env={"CLOUDSDK_CORE_ACCOUNT": "other@example.com"})
    assert_one_line_error(proc, 1, "uses OS Login", "other@example.com", "roles/compute.osAdminLogin",
                          "gcloud projects add-iam-policy-binding fake-project --member=user:other@example.com")


def test_os_login_off_gives_the_metadata_keys_back(cli):
    assert "OS Login off" in cli("fake", "inject", "os-login", "--off").stdout
    proc = cli("run", "osl", SCRIPT, "USER", env={"PODCTL_OSLOGIN": "off"})
    assert _user_seen(proc) == "podctl"
    assert _user_seen(cli("run", "osl", SCRIPT, "USER")) == "podctl"  # detected off: as before


def test_each_user_logs_in_to_their_own_home_as_the_login_profile_says(cli):
    """A TPU VM gives every user /home/USER: the OS Login user and podctl's own user
    (ssh-keys metadata) do not share one home, and neither sees what the other left."""
    said = 'echo "HOME=$HOME PWD=$PWD"; ls; echo mine > left-by-$USER'
    cli("fake", "inject", "os-login")
    on = cli("exec", "osl", "--", "bash", "-c", said).stdout
    profile = requests.get(f"{cli.json('fake', 'status')['tpu_api']}/v1/users/{FAKE_ACCOUNT}/loginProfile",
                           params={"projectId": "fake-project"}, timeout=10).json()
    home = profile["posixAccounts"][0]["homeDirectory"]
    assert home == f"/home/{POSIX_USER}"
    assert f"/host-0000{home} PWD=" in on and on.count(f"/host-0000{home}") == 2, on
    cli("fake", "inject", "os-login", "--off")
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
    from podctl.fake.oslogin import login_keys

    assert login_keys(fake.world) == []  # expired (1 µs after 1970): no host takes it


def test_project_metadata_and_the_nodes_own_switch():
    from google.cloud import tpu_v2

    from podctl.cloud.convert import node_info
    from podctl.fake import oslogin
    from podctl.fake.world import World

    node = tpu_v2.Node(name="projects/p/locations/z/nodes/n", accelerator_type="v5p-8",
                       metadata={"enable-oslogin": "FALSE", "ssh-keys": "podctl:ssh-ed25519 AAAA podctl"})
    assert node_info(node).os_login == "FALSE"
    world = World()
    oslogin.set_enabled(world, "p", True)
    assert oslogin.enabled(world, "p", {}) and not oslogin.enabled(world, "other", {})
    assert not oslogin.enabled(world, "p", {"enable-oslogin": "false"})  # the fake's hosts too
    oslogin.set_enabled(world, "p", False)
    assert not oslogin.enabled(world, "p", {}) and oslogin.enabled(world, "p", {"enable-oslogin": "True"})
    assert enabled({"enable-oslogin": "true"}, [None])
    assert not enabled({"enable-oslogin": "TRUE"}, ["FALSE"])  # the node's own wins
    assert enabled({}, [None, "True"])
    assert not enabled({"enable-oslogin": "FALSE"}, [])
    assert posix_username("Jane.Doe@example.com") == "jane_doe_example_com"
    assert posix_username("ci@proj.iam.gserviceaccount.com").startswith("sa_")


def test_a_node_without_its_own_value_follows_the_project_whatever_a_sibling_slice_sets():
    """Multislice: one node says FALSE, the other sets nothing under a project with OS Login
    on. That other node ignores ssh-keys (as the fake's hosts do), so podctl must log in
    through OS Login; it used to let the one node's FALSE turn it off for the whole slice."""
    from podctl.fake import oslogin
    from podctl.fake.world import World

    world = World()
    oslogin.set_enabled(world, "p", True)
    assert oslogin.enabled(world, "p", {}) and not oslogin.enabled(world, "p", {"enable-oslogin": "FALSE"})
    assert enabled({"enable-oslogin": "TRUE"}, [None, "FALSE"])
    assert enabled({"enable-oslogin": "TRUE"}, ["FALSE", None])
    assert not enabled({"enable-oslogin": "TRUE"}, ["FALSE", "false"])
    assert not enabled({}, [None, "FALSE"])


def test_a_slice_whose_nodes_disagree_on_os_login_is_refused_in_one_line_naming_them():
    """One login user serves the whole fleet: where one node's hosts take only OS Login's
    user and another's only podctl's metadata key, no user gets in everywhere; say so
    before connecting instead of a host's refusal that blames a role."""
    import asyncio

    from types import SimpleNamespace

    from podctl.cloud.oslogin import login_user
    from podctl.errors import ConfigError

    class Client:
        def project_metadata(self, project):
            return {"enable-oslogin": "TRUE"}

        def import_key(self, project, key):
            return "jane_example_com"

    def sliced(*own):
        nodes = tuple(SimpleNamespace(name=f"ms-{i}", os_login=v) for i, v in enumerate(own))
        return SimpleNamespace(name="ms", project="p", nodes=nodes)  # a SliceInfo's fields used

    with pytest.raises(ConfigError) as mixed:
        asyncio.run(login_user(Client(), sliced(None, "FALSE"), "ssh-ed25519 AAAA"))
    assert "\n" not in str(mixed.value)
    assert "mixes OS Login on (ms-0) and off (ms-1" in str(mixed.value)
    assert asyncio.run(login_user(Client(), sliced(None, "true"), "k")) == "jane_example_com"
    assert asyncio.run(login_user(Client(), sliced("FALSE", "false"), "k")) is None
