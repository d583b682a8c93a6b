"""Tests of python/stallscope's module structure: its import graph (every import, also those
inside functions) has no cycle, the leaves import nothing of the package, each module imports on
its own in a fresh interpreter without importing torch, and no module calls another's private
helpers. No torch needed: runs in every interpreter.

    python3 -m unittest -v test_imports            (cwd: python/tests)
"""

import ast
import glob
import os
import subprocess
import sys
import unittest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(TESTS_DIR)
PACKAGE = "stallscope"
PACKAGE_DIR = os.path.join(PYTHON_DIR, PACKAGE)
INIT = "__init__"

# Leaves: what any module may import without a cycle, and what each of them may import.
LEAVES = {"_protocol": set(), "_env": set(), "_notes": {"_protocol"}}


def modules():
    """{module name: parsed source} of the package (__init__ included)."""
    trees = {}
    for path in sorted(glob.glob(os.path.join(PACKAGE_DIR, "*.py"))):
        with open(path) as f:
            trees[os.path.basename(path)[:-3]] = ast.parse(f.read(), path)
    return trees


def imports(tree, names):
    """The package's modules `tree` imports, anywhere in it (a function's import included).
    `from . import x` of a name that is no module is an import of the package (__init__)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import x, y
                found |= {a.name if a.name in names else INIT for a in node.names}
            elif node.level == 1:  # from .x import y
                found.add(node.module)
            elif node.module == PACKAGE:  # from stallscope import x
                found |= {a.name if a.name in names else INIT for a in node.names}
            elif node.module and node.module.startswith(PACKAGE + "."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE:
                    found.add(parts[1] if len(parts) > 1 else INIT)
    return found


def graph():
    trees = modules()
    return {name: imports(tree, trees) for name, tree in trees.items()}


def find_cycle(edges):
    """A cycle as [a, b, ..., a], or None."""
    state = {}  # name -> "open" while on the DFS path, "done" after

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt, path + [nxt])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for start in sorted(edges):
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


class ImportGraphTest(unittest.TestCase):
    def test_no_cycle(self):
        self.assertIsNone(find_cycle(graph()))

    def test_the_cycle_finder_finds_one(self):
        self.assertEqual(find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}), ["a", "b", "c", "a"])
        self.assertEqual(find_cycle({"a": {"a"}}), ["a", "a"])
        self.assertIsNone(find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}))

    def test_the_graph_sees_imports_inside_functions(self):
        tree = ast.parse("def f():\n    from . import auto\n    import stallscope\n")
        self.assertEqual(imports(tree, {"auto"}), {"auto", INIT})

    def test_leaves(self):
        edges = graph()
        for leaf, allowed in LEAVES.items():
            with self.subTest(leaf=leaf):
                self.assertEqual(edges[leaf], allowed)

    def test_env_reads_only_os(self):
        """python/sitecustomize.py loads _env.py by its path, outside the package."""
        tree = modules()["_env"]
        top = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
        self.assertEqual([alias.name for node in top for alias in node.names], ["os"])

    def test_each_module_imports_alone_without_torch(self):
        """In a fresh interpreter each; `-X importtime` lists every module that got imported."""
        for name in sorted(modules()):
            if name in (INIT, "_native"):  # _native needs the built library next to it
                continue
            with self.subTest(module=name):
                env = {k: v for k, v in os.environ.items()
                       if not k.startswith("STALLSCOPE_") and k != "PYTHONPATH"}
                env["PYTHONPATH"] = PYTHON_DIR
                proc = subprocess.run(
                    [sys.executable, "-X", "importtime", "-c", f"import {PACKAGE}.{name}"],
                    env=env, capture_output=True, text=True, timeout=60, check=False,
                    cwd=TESTS_DIR)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                            if line.startswith("import time:")}
                self.assertIn(f"{PACKAGE}.{name}", imported)
                self.assertFalse({m for m in imported if m.split(".")[0] == "torch"})


class PrivateAccessTest(unittest.TestCase):
    """A module uses another's public names only (a private helper used across modules gets a
    public name)."""

    def test_no_private_name_of_another_module(self):
        trees = modules()
        for name, tree in trees.items():
            bound = set()  # local names of the package's modules
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                    bound |= {a.asname or a.name for a in node.names if a.name in trees}
            found = []
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id in bound and node.attr.startswith("_")
                        and not node.attr.startswith("__")):
                    found.append((node.lineno, f"{node.value.id}.{node.attr}"))
                if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                    found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
            with self.subTest(module=name):
                self.assertEqual(found, [])


if __name__ == "__main__":
    unittest.main()
