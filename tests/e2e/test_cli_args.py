"""How `podctl` reads its command line: click's usage errors as podctl's one line,
`--backend` after the subcommand, a required option after SCRIPT."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.cli_in_process import nothing_started, podctl_here, shared_daemon
from tests.conftest import Podctl, assert_one_line_error


@pytest.mark.parametrize("args, words", [
    (["ls", "--bogus"], ["No such option '--bogus'", "podctl ls --help"]),
    (["up"], ["Missing option '--slice'", "podctl up --help"]),
    (["nosuch"], ["No such command 'nosuch'"]),
    (["ls", "--backend", "aws"], ["'aws' is not one of 'gcp', 'fake'"]),
    (["run", "--recover", "x", "n", "s.py"], ["--recover"]),
])
def test_a_usage_error_is_one_podctl_error_line_with_exit_2(tmp_path, args, words):
    assert_one_line_error(podctl_here(tmp_path, *args), 2, *words)
    assert nothing_started(tmp_path)


def test_a_usage_error_through_a_podctl_process(podctl):
    """The cases above run in this process; one through `podctl` itself, as a user types it."""
    assert_one_line_error(podctl("ls", "--bogus", check=False), 2, "No such option '--bogus'",
                          "podctl ls --help")


def test_backend_works_after_the_subcommand_too(podctl):
    proc = podctl("ls", "--backend", "fake", "--json")
    assert json.loads(proc.stdout) == []
    assert json.loads(podctl("fake", "status", "--json").stdout)["running"]


def test_a_required_option_after_the_script_is_podctls_as_there_is_no_other_reading(podctl, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    podctl("queue", "add", "--backend", "fake", str(script), "--slice", "v5p-8", "--lr", "3", "--json")
    entries = json.loads(podctl("queue", "ls", "--json").stdout)
    assert [(e["accelerator_type"], e["args"]) for e in entries] == [("v5p-8", ["--lr", "3", "--json"])]
    podctl("queue", "cancel", "--backend", "fake", str(entries[0]["id"]))


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One fake daemon for every refusal below (tests/cli_in_process.py, shared_daemon);
    its end checks that none of them made anything billable."""
    with shared_daemon(tmp_path_factory.mktemp("refusals")) as cli:
        yield cli


@pytest.mark.parametrize("args", [
    ["status", "../../x"], ["down", "../x", "--yes"], ["exec", "a/b", "--", "true"],
    ["run", "UPPER", __file__],
])
def test_a_slice_name_no_slice_can_have_gets_the_name_check_before_any_call(refusing, args):
    # in this process, on the module's daemon
    assert_one_line_error(podctl_here(refusing.tmp, "--backend", "fake", *args, env=refusing.env), 2,
                          "is not a valid slice name")
