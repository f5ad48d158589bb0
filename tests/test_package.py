"""Packaging: the import graph, the package list, and that `import napkin` stays light."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_import_napkin_loads_neither_cupy_nor_torch():
    code = ("import sys, napkin; napkin.load('attention'); "
            "import napkin.runtime.reference, napkin.cli; "
            "bad = [m for m in ('cupy', 'torch', 'cuda.bindings.nvrtc') if m in sys.modules]; "
            "print(bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_package_directory_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = config["package-dir"]
    listed = set(config["packages"])
    for top in ("api", "diagrams", "compiler", "codegen", "runtime"):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).as_posix()
            name = next((pkg for pkg, path in mapping.items() if path == rel), None)
            if name is None:
                parent = next(pkg for pkg, path in mapping.items() if rel.startswith(path + "/"))
                name = parent + "." + rel[len(mapping[parent]) + 1:].replace("/", ".")
            assert name in listed, f"{rel} is not listed as package {name}"


def test_dependencies_point_one_way():
    """diagrams -> compiler -> codegen -> runtime: each layer imports only itself and earlier ones."""
    order = ["diagrams", "compiler", "codegen", "runtime"]
    for i, layer in enumerate(order):
        allowed = set(order[:i + 1])
        for path in (ROOT / layer).rglob("*.py"):
            depth = len(path.relative_to(ROOT / layer).parts)  # 1: directly in the layer
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level == 0 and (node.module or "").startswith("napkin."):
                    target = node.module.split(".")[1]
                elif node.level > depth and node.module:
                    target = node.module.split(".")[0]
                else:
                    continue
                assert target in allowed, f"{path.relative_to(ROOT)} imports {target}"


def test_bare_compiler_package_is_not_importable():
    # Without PYTHONPATH: a checkout on the path would make any top-level folder importable;
    # the question is what the installed package exposes.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "import compiler"], capture_output=True,
                          cwd="/", timeout=60, env=env)
    assert done.returncode != 0
