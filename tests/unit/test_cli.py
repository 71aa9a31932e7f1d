"""The CLI as a new user meets it: separate `podctl` processes sharing the fake
cloud's daemon, bad input answered in one line with no traceback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, isolated_environ


def test_every_command_is_in_the_table_and_the_overview():
    """Commands load lazily from one table: each row loads its command, each command module's
    commands have a row, and the group's overview (`podctl --help`) mentions every one."""
    import importlib

    from podctl.cli.main import COMMAND_MODULES, cli, load_command

    for name in COMMAND_MODULES:
        assert load_command(name).name == name
        assert f"podctl {name}" in (cli.help or ""), name
    for module in set(COMMAND_MODULES.values()):
        for command in importlib.import_module(f"podctl.cli.{module}").COMMANDS:
            assert COMMAND_MODULES.get(command.name) == module, command.name


def test_progress_without_a_terminal_is_one_plain_line_per_state(capsys):
    from podctl.cli.render import ProgressReporter

    with ProgressReporter("q1") as progress:
        for state in ("ACCEPTED", "WAITING_FOR_RESOURCES", "WAITING_FOR_RESOURCES", "PROVISIONING"):
            progress(state)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[2].split(" (")[0] for line in lines] == [
        "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING"]
    assert all(line.startswith("podctl: q1: ") and "\x1b" not in line for line in lines)

