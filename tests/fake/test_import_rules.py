"""The import rules of ARCHITECTURE.md, as CI checks them (`lint-imports`, contracts in
pyproject.toml): the tree keeps them, a planted forbidden import breaks them, and no two
packages of podctl import each other, even through others."""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def _lint_imports(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT_IMPORTS, "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          capture_output=True, text=True, cwd=tree, env={"PYTHONPATH": str(tree)})


def _copy_of_the_tree(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "podctl", tmp_path / "podctl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_the_import_rules(tmp_path):
    proc = _lint_imports(_copy_of_the_tree(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("module", "planted", "contract"), [
    ("cloud/describe.py", "from podctl.steps import session", "Layers"),
    ("jobs/bundle.py", "from podctl.fake.admin import daemon", "The fake is a world apart"),
    ("fake/world.py", "from podctl.cloud import types", "The fake imports nothing"),
    ("cli/slice_cmds.py", "from podctl.cloud import terminate", "go through the one door"),
    ("cli/render.py", "from podctl.money.cost import fmt_usd", "go through the one door"),
    ("api.py", "from podctl.jobs import run_files", "The callers (CLI, Python API, demo) go through the one door"),
    ("queue/tick.py", "from podctl.policy.gc import reap_queue_leftovers", "The queue goes through the same door"),
    ("queue/machine.py", "from podctl.money.cost import slice_hourly_cost", "The queue goes through the same door"),
    ("steps/slices.py", "from podctl.cloud.tpu_client import TpuApi", "Only cloud/ names the Cloud TPU client"),
    ("jobs/launch.py", "from podctl.cloud import node_metadata", "Only cloud/ names the Cloud TPU client"),
])
def test_a_planted_forbidden_import_fails_the_check(tmp_path, module, planted, contract):
    tree = _copy_of_the_tree(tmp_path)
    with open(tree / "podctl" / module, "a") as f:
        f.write(f"\n{planted}  # planted by the test\n")
    proc = _lint_imports(tree)
    assert proc.returncode != 0
    broken = [line for line in proc.stdout.splitlines() if " BROKEN" in line]  # "BROKEN (n ignored imports)"
    assert any(contract in line for line in proc.stdout.splitlines()), proc.stdout
    assert broken, proc.stdout
    assert contract in proc.stdout.partition("Broken contracts")[2], proc.stdout  # that very one


def test_no_two_packages_import_each_other():
    graph = grimp.build_graph("podctl", cache_dir=None, exclude_type_checking_imports=True)
    top = lambda module: ".".join(module.split(".")[:2])  # noqa: E731
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if top(module) != top(imported):
                edges[top(module)].add(top(imported))

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in reachable(b)})
    assert not cycles, f"packages that import each other: {cycles}"


def test_every_module_of_podctl_has_a_place_in_the_layers():
    """A new top-level module or package gets a layer (pyproject.toml), or nothing checks it."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    placed = {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}
    tops = {f"podctl.{p.stem}" for p in (ROOT / "podctl").glob("*.py") if p.stem not in ("__init__", "__main__")}
    tops |= {f"podctl.{p.parent.name}" for p in (ROOT / "podctl").glob("*/__init__.py")}
    tops -= {"podctl.fake"}  # the fake: its own contracts
    # a folder of layers (base/, money/, policy/) places each of its modules instead
    split = {top for top in tops if top not in placed and any(n.startswith(f"{top}.") for n in placed)}
    for top in split:
        folder = ROOT / Path(*top.split("."))
        tops |= {f"{top}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
        tops |= {f"{top}.{p.parent.name}" for p in folder.glob("*/__init__.py")}
    tops -= split | {"podctl.base._display"}  # _display: api's own
    assert sorted(tops - placed) == []
