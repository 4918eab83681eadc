"""The layout of rdq-core, kept true by tests rather than by review: the import rules (River's
``internal/`` rule, in Python's terms), every package's map of its modules, the error tree,
and every module a docstring points to.

The import graph is grimp's: every import statement counts, at module level, under
``TYPE_CHECKING`` or inside a function alike — an import that only a type checker or a later
call runs is still a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
import graphlib
import importlib
import pkgutil
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import grimp
import pytest

import rdq
import rdq.errors

ROOT = Path(rdq.__file__).parent
ROOMS = ("admin", "blobs", "cli", "flow", "retention", "retry", "server", "spi", "worker")
"""The subpackages of ``rdq``; every other module is at the root."""
LEAVES = ("rdq.errors",)
"""Modules that import nothing of rdq: the error tree every other module raises from."""


@cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("rdq", exclude_type_checking_imports=False, cache_dir=None)


def imports() -> Iterator[tuple[str, str]]:
    g = graph()
    for importer in sorted(g.modules):
        for imported in sorted(g.find_modules_directly_imported_by(importer)):
            yield importer, imported


def package_of(module: str) -> str:
    """The package a module belongs to: itself for a package, its parent for a module."""
    path = ROOT.joinpath(*module.split(".")[1:])
    return module if (path / "__init__.py").exists() else module.rpartition(".")[0]


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "rdq"


def test_no_module_imports_another_package_s_private_modules() -> None:
    """A private module (a name starting with ``_``) is imported only from inside the package
    that holds it (``rdq._ids`` by any module of rdq, ``rdq.worker._run`` by ``rdq.worker``'s
    own modules): every other package goes through the public names of the package's
    ``__init__``."""
    wrong = []
    for importer, imported in imports():
        parts = imported.split(".")
        for depth, part in enumerate(parts[1:], start=1):
            if part.startswith("_") and part != "__main__":
                owner = ".".join(parts[:depth])
                if not (importer == owner or importer.startswith(owner + ".")):
                    wrong.append(f"{importer} -> {imported}")
                break
    assert wrong == []


def test_no_import_circle_not_even_one_only_a_type_checker_follows() -> None:
    sorter = graphlib.TopologicalSorter({m: set() for m in graph().modules})
    for importer, imported in imports():
        sorter.add(importer, imported)
    try:
        sorter.prepare()
    except graphlib.CycleError as cycle:
        pytest.fail(f"import circle: {' -> '.join(cycle.args[1])}")


@pytest.mark.parametrize(
    ("importer", "imported", "why"),
    [
        ("rdq.worker", "rdq.admin", "the engine never reaches into the operator layer"),
        ("rdq.admin", "rdq.worker", "operators act through the store, not a worker"),
        ("rdq.flow", "rdq.worker", "flow control's rules and records serve the worker"),
        ("rdq.flow", "rdq.admin", "flow control's rules and records serve the admin layer"),
        ("rdq.flow", "rdq.app", "flow control is declared by an app, never reads one"),
        ("rdq.spi", "rdq.flow", "the storage contract is the leaf every room builds on"),
        ("rdq.spi", "rdq.worker", "the storage contract is the leaf every room builds on"),
        ("rdq.retry", "rdq.worker", "a retry is decided by pure functions the worker calls"),
        ("rdq.retention", "rdq.worker", "retention serves the worker's upkeep and the admin"),
        ("rdq.retention", "rdq.admin", "retention serves the worker's upkeep and the admin"),
        ("rdq.blobs", "rdq.worker", "the blob step is the codec's: the engine calls it"),
        ("rdq.blobs", "rdq.app", "a blob store is configured by an app, never reads one"),
    ],
)
def test_one_room_never_imports_another(importer: str, imported: str, why: str) -> None:
    chain = graph().find_shortest_chain(importer, imported, as_packages=True)
    assert chain is None, f"{why}: {' -> '.join(chain or ())}"


@pytest.mark.parametrize("leaf", LEAVES)
def test_a_leaf_imports_nothing_of_rdq(leaf: str) -> None:
    assert graph().find_modules_directly_imported_by(leaf) == set()


def packages() -> list[str]:
    found = ["rdq"]
    for info in pkgutil.walk_packages([str(ROOT)], "rdq."):
        if info.ispkg:
            found.append(info.name)
    return sorted(found)


def modules_of(package: str) -> list[str]:
    path = ROOT.joinpath(*package.split(".")[1:])
    return sorted(info.name for info in pkgutil.iter_modules([str(path)]))


def names_module(doc: str, package: str, name: str) -> bool:
    """True when ``doc`` names module ``name`` of ``package``: ````name````, ``name.py``, or a
    :mod: reference that ends in it."""
    dotted = re.escape(f"{package}.{name}")
    patterns = (
        rf"``{re.escape(name)}``",
        rf"(?<![\w.]){re.escape(name)}\.py\b",
        rf":mod:`~?(?:{dotted}|\.{re.escape(name)})`",
        rf"(?<![\w]){re.escape(name)}/",
    )
    return any(re.search(p, doc) for p in patterns)


@pytest.mark.parametrize("package", packages())
def test_every_package_map_names_every_module(package: str) -> None:
    """Each package's docstring is its map: a newcomer reads it to find where a concern
    lives, so it names every module and subpackage the package has."""
    doc = importlib.import_module(package).__doc__ or ""
    missing = [name for name in modules_of(package) if not names_module(doc, package, name)]
    assert missing == [], f"{package}'s docstring does not name {missing}"


def docstrings() -> Iterator[tuple[Path, str]]:
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    yield path, doc


def exists(dotted: str) -> bool:
    """True when ``dotted`` is a module of rdq, or a name one of them defines."""
    try:
        importlib.import_module(dotted)
        return True
    except ImportError:
        module, _, name = dotted.rpartition(".")
        try:
            return hasattr(importlib.import_module(module), name)
        except ImportError:
            return False


def test_every_module_a_docstring_points_to_exists() -> None:
    """A ``:mod:`` reference to an rdq module that moved or was renamed is a map that lies."""
    stale = sorted(
        {
            f"{path.relative_to(ROOT)}: {target}"
            for path, doc in docstrings()
            for target in re.findall(r":mod:`~?(rdq(?:\.\w+)*)`", doc)
            if not exists(target)
        }
    )
    assert stale == []


def drawn_tree() -> dict[str, str]:
    """The error tree of :mod:`rdq.errors`' docstring: each class drawn, and the class drawn
    as its parent (one level is four columns: ``├── `` or ``│   ``)."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    base: int | None = None
    for line in (rdq.errors.__doc__ or "").splitlines():
        match = re.match(r"^([\s│├└─]*)([A-Z]\w+)(\s|$)", line)
        if match is None or (base is None and match.group(2) != "RdqError"):
            continue
        column = len(match.group(1))
        base = column if base is None else base
        depth = (column - base) // 4
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group(2)] = stack[-1][1] if stack else ""
        stack.append((depth, match.group(2)))
    return parents


def test_the_error_tree_draws_every_error_under_its_real_parent() -> None:
    drawn = drawn_tree()
    classes = {
        name: getattr(rdq.errors, name)
        for name in rdq.errors.__all__
        if isinstance(getattr(rdq.errors, name), type)
    }
    assert sorted(drawn) == sorted(classes), "the tree draws exactly the classes of rdq.errors"
    for name, cls in classes.items():
        parent = cls.__bases__[0].__name__
        expected = "" if name == "RdqError" else parent
        assert drawn[name] == expected, f"{name} is drawn under {drawn[name]!r}, not {parent!r}"
