"""The README and docs/: short enough to read, every link going somewhere, the CLI
reference equal to what the commands print, and the README's first run running as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def test_the_readme_is_read_in_five_minutes():
    assert len((ROOT / "README.md").read_text().splitlines()) < 200


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_that_is_there(page: Path):
    for target, _anchor in _LINK.findall(page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which is not there"


def test_the_cli_reference_is_what_the_commands_print():
    from podctl.cli.reference import render

    assert (ROOT / "docs" / "reference" / "cli.md").read_text() == render(), (
        "docs/reference/cli.md is stale: python -m podctl.cli.reference > docs/reference/cli.md")


def first_run_commands() -> list[list[str]]:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## A first run on Google Cloud", 1)[1].split("\n\n", 2)[1]
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.strip()]


def test_the_first_run_is_four_podctl_commands():
    commands = first_run_commands()
    assert [c[:2] for c in commands] == [["podctl", "up"], ["podctl", "run"], ["podctl", "runs"],
                                         ["podctl", "down"]]
