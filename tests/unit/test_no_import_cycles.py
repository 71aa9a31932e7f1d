"""No import cycle between any two modules of podctl, not only between packages (the
layers contract in pyproject.toml sees packages). An import made only for annotations
(under TYPE_CHECKING) is no cycle: it never runs. An import inside a function is one: it
runs, just later."""

from __future__ import annotations

import grimp


def _cycles(package: str) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's, iteratively)."""
    graph = grimp.build_graph(package, include_external_packages=False,
                              exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    for name, body in {"a": "from . import b\n", "b": "from . import c\n", "c": "from . import a\n",
                       "d": "from . import a\n"}.items():
        (tmp_path / "cyc").mkdir(exist_ok=True)
        (tmp_path / "cyc" / f"{name}.py").write_text(body)
    (tmp_path / "cyc" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cycles("cyc") == [["cyc.a", "cyc.b", "cyc.c"]]


def test_no_module_of_podctl_imports_itself_back():
    assert _cycles("podctl") == []
