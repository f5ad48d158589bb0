"""The dependency order, module by module: the layers point one way (the api folder, the
`napkin` package itself, last), and no module imports, even inside a function, a module
that imports it back (the cycle compiler/diagram -> draw -> explain -> plan -> diagram, and
commands/run -> cli, are gone)."""

from __future__ import annotations

import ast
from pathlib import Path

from napkin.compiler.graph import DiGraph, find_cycle

ROOT = Path(__file__).parents[1]
LAYERS = ["diagrams", "compiler", "codegen", "runtime", "api"]


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] == "api":
        parts = parts[1:]
    return ".".join(["napkin", *parts])


def _package(path: Path) -> list[str]:
    mod = _module(path).split(".")
    return mod if path.name == "__init__.py" else mod[:-1]


def graph() -> DiGraph:
    """Module -> module it imports (anywhere in the file), for napkin's own modules."""
    files = {_module(p): p for top in LAYERS for p in (ROOT / top).rglob("*.py")}
    g = DiGraph()
    g.add_nodes_from(files)
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = _package(path)[:len(_package(path)) - node.level + 1]
                    full = ".".join(base + ([node.module] if node.module else []))
                else:
                    full = node.module or ""
                subs = [f"{full}.{a.name}" for a in node.names]
                # `from . import x` of a submodule imports x (the package only initialises)
                targets = subs if all(s in files for s in subs) else [full] + subs
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in files and t != mod:
                    g.add_edge(mod, t)
    return g


def layer(mod: str) -> int:
    parts = mod.split(".")
    if len(parts) > 1 and parts[1] in LAYERS[:-1]:
        return LAYERS.index(parts[1])
    return len(LAYERS) - 1


def test_layers_import_only_themselves_and_earlier_layers():
    g = graph()
    bad = [f"{a} -> {b}" for a, b in g.edges if layer(b) > layer(a)]
    assert not bad, bad


def test_no_module_imports_one_that_imports_it_back():
    g = graph()
    cycle = find_cycle(g)
    assert cycle is None, " -> ".join(cycle + cycle[:1])


def test_presentation_lives_outside_the_compiler():
    for top in ("compiler", "codegen", "runtime"):
        assert not (ROOT / top / "draw").exists() and not (ROOT / top / "explain.py").exists()
    assert (ROOT / "api" / "explain.py").exists() and (ROOT / "api" / "draw").is_dir()


def test_the_source_tree_root_shadows_no_package():
    """No root folder is named `napkin`: from the repository root, `import napkin` finds the
    installed package (editable or not), not a partial folder."""
    import subprocess
    import sys
    assert not (ROOT / "napkin").exists()
    done = subprocess.run([sys.executable, "-c", "import napkin, napkin.diagrams, napkin.cli"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_one_version_string():
    import tomllib

    import napkin
    from napkin.codegen import render
    from napkin.diagrams.version import VERSION
    from napkin.runtime import binaries
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"]
    assert config["tool"]["setuptools"]["dynamic"]["version"]["attr"] == \
        "napkin.diagrams.version.VERSION"
    assert napkin.__version__ == render.VERSION == binaries.VERSION == VERSION
    hits = [p for top in LAYERS for p in (ROOT / top).rglob("*.py")
            if f'"{VERSION}"' in p.read_text() and p.name != "version.py"]
    assert not hits, hits
