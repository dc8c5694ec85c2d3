"""The package's modules import one way (DESIGN.md, "Layers"): no module
imports, at its top or inside a function, a module that imports it back,
however long the loop. A deferred import hides a cycle from `import`, not
from a reader: shardbook.programs.registry imported the prediction rules of
shardbook.hlo.predict, which imported the registry inside `predict`."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "code" / "shardbook"


def _modules():
    """{dotted name: (path, is a package's __init__)} of every module."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imports(name, path, is_package, modules):
    """The package's modules that `name` imports anywhere in its file."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here[: len(here) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            # `from pkg import mod` imports the module pkg.mod, `from mod import f` the module mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def import_graph():
    modules = _modules()
    return {name: _imports(name, path, is_package, modules) for name, (path, is_package) in modules.items()}


def cycles(graph):
    """Every strongly connected group of more than one module (Tarjan)."""
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.fixture(scope="module")
def graph():
    """import_graph(), parsed once for the tests that read it (some 0.7 s of one core: every module's
    syntax tree); one worker runs them (conftest.SHARED_FIXTURE_GROUPS)."""
    return import_graph()


def test_no_module_imports_a_module_that_imports_it_back(graph):
    assert "shardbook.hlo.predict" in graph and "shardbook.programs.registry" in graph
    found = cycles(graph)
    loops = "; ".join(" <-> ".join(group) for group in found)
    assert not found, f"import cycles (break them so the layers read one way): {loops}"


def test_the_fixture_registry_is_a_declaration_that_imports_no_tool(graph):
    """The registry is read by the programs (fixtures) and by the tools
    (capture, predict, the multi-process run); it imports neither."""
    assert not {
        m for m in graph["shardbook.programs.registry"] if m.startswith(("shardbook.hlo", "shardbook.programs."))
    }


@pytest.mark.parametrize(
    "first,then",
    [
        ("shardbook.hlo.predict", "shardbook.programs.registry"),
        ("shardbook.programs.registry", "shardbook.hlo.predict"),
    ],
)
def test_either_side_imports_first_in_a_fresh_interpreter(first, then):
    code = (
        f"import {first}, {then}; from shardbook.hlo import predict; predict.rule(predict.registry.get('fsdp_matmul'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-1500:]


def test_every_declared_fixture_names_a_known_rule():
    from shardbook.hlo import predict
    from shardbook.programs import registry

    assert all(predict.rule(f) in predict.RULES.values() for f in registry.FIXTURES.values())
    unknown = registry.Fixture(
        "x",
        {"d": 8},
        {"x": ("d",), "out": ("d",)},
        {"x": (8,)},
        "float32",
        "",
        program="matmul",
        predict="no_such_rule",
        reference=registry.matmul,
    )
    with pytest.raises(ValueError, match="x.predict: no prediction rule 'no_such_rule'"):
        predict.rule(unknown)
