from pathlib import Path

import pytest

from podctl.base import settings
from podctl.base.durations import format_duration, parse_duration
from podctl.base.errors import ConfigError, InvalidValueError


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("45m", 2700), ("6h", 21600),
                                           ("1h30m", 5400), ("2d", 172800), ("120", 120)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "6x", "h", "-5m", "0", "0s", "1.5h"])
def test_bad_durations(text):
    with pytest.raises(InvalidValueError, match="--valid-for"):
        parse_duration(text, "--valid-for")


def test_format_duration():
    assert [format_duration(s) for s in (5, 90, 5400, 90000)] == ["5s", "1m", "1h30m", "1d1h"]


def _gcloud(tmp: Path, project: str, zone: str) -> dict[str, str]:
    conf = tmp / "gcloud"
    (conf / "configurations").mkdir(parents=True)
    (conf / "active_config").write_text("work\n")
    (conf / "configurations" / "config_work").write_text(
        f"[core]\nproject = {project}\n[compute]\nzone = {zone}\n")
    return {"CLOUDSDK_CONFIG": str(conf)}


def test_precedence_flags_env_toml_gcloud(tmp_path):
    env = _gcloud(tmp_path, "from-gcloud", "us-east5-a")
    s = settings.resolve(env=env, cwd=tmp_path)
    assert (s.backend, s.project, s.zone) == ("gcp", "from-gcloud", "us-east5-a")
    (tmp_path / "podctl.toml").write_text('project = "from-toml"\nzone = "us-south1-a"\n')
    s = settings.resolve(env=env, cwd=tmp_path)
    assert (s.project, s.zone) == ("from-toml", "us-south1-a")
    env = {**env, "CLOUDSDK_CORE_PROJECT": "from-env", "CLOUDSDK_COMPUTE_ZONE": "us-east5-b"}
    s = settings.resolve(env=env, cwd=tmp_path)
    assert (s.project, s.zone) == ("from-env", "us-east5-b")
    s = settings.resolve(project="from-flag", zone="us-east5-c", env=env, cwd=tmp_path)
    assert (s.project, s.zone) == ("from-flag", "us-east5-c")


def test_fake_backend_has_its_own_defaults(tmp_path):
    env = {"PODCTL_BACKEND": "fake", **_gcloud(tmp_path, "real-project", "us-east5-a")}
    s = settings.resolve(env=env, cwd=tmp_path)
    assert (s.backend, s.project, s.zone) == ("fake", settings.FAKE_PROJECT, settings.FAKE_ZONE)


def test_missing_project_and_bad_values(tmp_path):
    env = {"CLOUDSDK_CONFIG": str(tmp_path / "none")}
    with pytest.raises(ConfigError, match="no Google Cloud project: pass --project"):
        settings.resolve(env=env, cwd=tmp_path)
    with pytest.raises(ConfigError, match="no zone"):
        settings.resolve(project="my-project", env=env, cwd=tmp_path)
    with pytest.raises(InvalidValueError, match="not a zone name"):
        settings.resolve(project="my-project", zone="Mars", env=env, cwd=tmp_path)
    with pytest.raises(InvalidValueError, match="not a Google Cloud project id"):
        settings.resolve(project="X", zone="us-central1-a", env=env, cwd=tmp_path)
    with pytest.raises(InvalidValueError, match="unknown backend"):
        settings.resolve(backend="aws", env=env, cwd=tmp_path)
    (tmp_path / "podctl.toml").write_text("project = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        settings.resolve(env=env, cwd=tmp_path)


def test_directories_follow_env(tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xc"), "XDG_STATE_HOME": str(tmp_path / "xs")}
    assert settings.config_dir(env) == tmp_path / "xc" / "podctl"
    assert settings.state_dir(env) == tmp_path / "xs" / "podctl"
    assert settings.config_dir({"PODCTL_CONFIG_DIR": "/x"}) == Path("/x")


def test_os_login_switch_and_account(tmp_path):
    env = {**_gcloud(tmp_path, "my-project", "us-east5-a")}
    (tmp_path / "gcloud" / "configurations" / "config_work").write_text(
        "[core]\nproject = my-project\naccount = jane@example.com\n[compute]\nzone = us-east5-a\n")
    s = settings.resolve(env=env, cwd=tmp_path)
    assert (s.oslogin, s.account) == (True, "jane@example.com")
    s = settings.resolve(env={**env, "PODCTL_OSLOGIN": "off", "CLOUDSDK_CORE_ACCOUNT": "ci@x.com"}, cwd=tmp_path)
    assert (s.oslogin, s.account) == (False, "ci@x.com")
    (tmp_path / "podctl.toml").write_text("oslogin = false\n")
    assert not settings.resolve(env=env, cwd=tmp_path).oslogin
    with pytest.raises(InvalidValueError, match="PODCTL_OSLOGIN"):
        settings.resolve(env={**env, "PODCTL_OSLOGIN": "maybe"}, cwd=tmp_path)
    fake = settings.resolve(env={**env, "PODCTL_BACKEND": "fake"}, cwd=tmp_path)
    assert fake.account == settings.FAKE_ACCOUNT


@pytest.mark.parametrize("value, on", [("1", True), ("TRUE", True), ("Yes", True), (" on ", True),
                                       ("0", False), ("False", False), ("NO", False), ("off", False),
                                       ("", None), (None, None), (True, True), (False, False)])
def test_boolean_settings_read_only_yes_and_no_words(value, on):
    assert settings.switch(value, "PODCTL_X") is on


def test_a_boolean_setting_that_is_neither_yes_nor_no_is_refused_naming_it():
    with pytest.raises(InvalidValueError, match=r"PODCTL_X='maybe' is not a yes/no value"):
        settings.switch("maybe", "PODCTL_X")
