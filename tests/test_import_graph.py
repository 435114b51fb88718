"""The package's import graph: no module imports a module that imports it.

Every import counts: at module level, for typing only, and inside functions (a
function-level import is a dependency too, only a later one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import rbdata

ROOT = Path(rbdata.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_graph(*, lazy: bool = True) -> dict[str, set[str]]:
    """Module -> the rbdata modules it imports (``lazy``: imports inside functions too)."""
    paths = sorted(ROOT.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    graph = {}
    for path in paths:
        module = _module_name(path)
        tree = ast.parse(path.read_text())
        in_functions = {
            id(inner)
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            for inner in ast.walk(fn)
        }
        edges = set()
        for node in ast.walk(tree):
            if not lazy and id(node) in in_functions:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(module, node, path.name == "__init__.py")
                names = [target, *(f"{target}.{alias.name}" for alias in node.names)]
            edges |= {n for n in names if n in modules and n != module}
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle between modules (a package importing its own submodules excluded)."""
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if node.startswith(nxt + "."):  # a submodule importing its package's __init__
                continue
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_graph_sees_real_imports():
    graph = import_graph()
    assert "rbdata.buffers.replay" in graph["rbdata.buffers.tensordict"]
    assert "rbdata.buffers.protocol" in graph["rbdata.loader.dataset"]
    # an import inside a function counts (rbdata.service imports its attach module lazily)
    assert "rbdata.service.attach" in graph["rbdata.service"]
    assert "rbdata.service.service" not in import_graph(lazy=False)["rbdata.service"]


def test_the_buffers_never_import_a_service():
    graph = import_graph()
    buffers = [m for m in graph if m.startswith("rbdata.buffers")]
    assert buffers
    for module in buffers:
        assert not {d for d in graph[module] if d.startswith("rbdata.service")}, module


def test_no_import_cycle_inside_the_package():
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _imports_under(graph: dict[str, set[str]], package: str, target: str) -> set[str]:
    """``module -> target`` arrows from the modules of ``package`` into ``target``."""
    return {
        f"{module} -> {dep}"
        for module, deps in graph.items()
        if module.startswith(package)
        for dep in deps
        if dep.startswith(target)
    }


def test_the_service_server_never_imports_its_clients():
    # both sides import the declaration of the forwarded surface (rbdata.service.surface)
    graph = import_graph()
    assert not _imports_under(graph, "rbdata.service.server", "rbdata.service.client")
    assert "rbdata.service.surface" in graph["rbdata.service.server.owner"]


def test_the_service_server_never_imports_sharding():
    # sharding is built over the server (its owners extend the server's), not under it
    assert not _imports_under(import_graph(), "rbdata.service.server", "rbdata.service.sharding")


def test_the_checkpoint_format_never_imports_the_buffers():
    # the buffers write and load dumps through rbdata.checkpoint: the arrow runs one way
    assert not _imports_under(import_graph(), "rbdata.checkpoint", "rbdata.buffers")


def test_the_sharing_layer_never_imports_the_components():
    # storages, writers and samplers take their counters, segments and rendezvous from
    # rbdata.sharing: it names what it calls on them as protocols (rbdata.sharing.components)
    graph = import_graph()
    above = (
        "rbdata.storages",
        "rbdata.writers",
        "rbdata.samplers",
        "rbdata.sample_units",
        "rbdata.transforms",
        "rbdata.buffers",
    )
    arrows = set().union(*(_imports_under(graph, "rbdata.sharing", target) for target in above))
    assert not arrows, "rbdata.sharing imports upward:\n" + "\n".join(sorted(arrows))
