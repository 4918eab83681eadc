"""Every first-party backend keeps the module map of docs/writing-a-backend.md ("1. The
distribution"), read from the guide's tree and each backend's README, never listed here.

- The README's module table lists exactly the modules the package has, and marks as
  "extra:" those the guide's tree does not name: every module is the tree's or a named extra.
- An operation of the contract that the guide's tree puts in a module ("claim_due:" after
  ``_claims.py``) lives in that module in every backend that implements it: the store's
  ``_operation`` is defined there, or calls into it (directly, or through another method of
  the store). Any other name the tree puts before a colon is defined by that module.

Kept here, beside the other checks of the guide (``test_kit_documentation.py``), rather than in
each backend: one parser of the guide for all five, and the backends are found by their
``rdq.storage`` entry points, so a sixth first-party backend is held to the map without a line
changed here. Every workspace package is installed wherever the tests run (noxfile.py).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rdq.spi import StorageBase

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "writing-a-backend.md"

# --- the guide's tree ---------------------------------------------------------------------

_ENTRY = re.compile(r"^(?P<prefix>[│ ]*)[├└]── (?P<name>\S+)(?:\s+#\s?(?P<comment>.*))?$")
_MORE = re.compile(r"^[│ ]+#\s*(?P<comment>.*)$")
_HOLDS = re.compile(r"^(?P<names>[a-z_][a-z0-9_]*(?:, [a-z_][a-z0-9_]*)*):\s")
_PACKAGE_LEVEL = "│   "
"""The tree's indent of the entries inside ``src/rdq_mystore/``."""


def _tree() -> list[str]:
    """The lines of the code block under "## 1. The distribution"."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## 1. The distribution") :]
    block = section[section.index("```\n") + 4 :]
    return block[: block.index("```")].splitlines()


def _guide_modules() -> dict[str, str]:
    """Each module of the guide's tree (``_claims`` for ``_claims.py``) with its comment,
    continuation lines joined."""
    modules: dict[str, str] = {}
    current: str | None = None
    for line in _tree():
        entry = _ENTRY.match(line)
        if entry is not None:
            name, comment = entry["name"], entry["comment"] or ""
            inside = entry["prefix"] == _PACKAGE_LEVEL and name.endswith(".py")
            current = name.removesuffix(".py") if inside else None
            if current is not None:
                modules[current] = comment.strip()
            continue
        more = _MORE.match(line)
        if more is not None and current is not None:
            modules[current] += " " + more["comment"].strip()
    return modules


GUIDE_MODULES = _guide_modules()


def _is_operation(name: str) -> bool:
    """True for an operation of the contract (``StorageBase`` has it and its ``_`` hook)."""
    return hasattr(StorageBase, name) and hasattr(StorageBase, f"_{name}")


def _holds(comment: str) -> list[str]:
    """The names before the colon of a module's comment ("claim_due: everything ...")."""
    found = _HOLDS.match(comment)
    return found["names"].split(", ") if found else []


HOLDS = {module: _holds(comment) for module, comment in GUIDE_MODULES.items()}
OPERATIONS = {
    module: [name for name in names if _is_operation(name)] for module, names in HOLDS.items()
}
NAMES = {
    module: [name for name in names if not _is_operation(name)] for module, names in HOLDS.items()
}

# --- the backends -------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    dist: str
    """The distribution's folder under packages/ (``rdq-redis``)."""
    package: str
    """The import name (``rdq_redis``)."""

    @property
    def source(self) -> Path:
        return ROOT / "packages" / self.dist / "src" / self.package

    @property
    def readme(self) -> Path:
        return ROOT / "packages" / self.dist / "README.md"

    def modules(self) -> set[str]:
        """Every module of the package, by its name under the package (``_claims._view``;
        ``_claims`` for a package's ``__init__.py``, ``__init__`` for the top one)."""
        found = set()
        for path in self.source.rglob("*.py"):
            parts = path.relative_to(self.source).with_suffix("").parts
            if parts[-1] == "__init__" and len(parts) > 1:
                parts = parts[:-1]
            found.add(".".join(parts))
        return found

    def import_(self, module: str) -> ModuleType:
        return importlib.import_module(f"{self.package}.{module}")

    def store(self) -> type[StorageBase]:
        """The store class the package exports."""
        package = importlib.import_module(self.package)
        stores = [
            value
            for name in package.__all__
            if isinstance(value := getattr(package, name), type) and issubclass(value, StorageBase)
        ]
        assert len(stores) == 1, f"{self.package} exports {len(stores)} StorageBase classes"
        return stores[0]


def _backends() -> list[Backend]:
    """The first-party backends: every workspace package that declares an ``rdq.storage``
    entry point."""
    found = []
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        plugins = project.get("entry-points", {}).get("rdq.storage", {})
        packages = {target.split(".")[0] for target in plugins.values()}
        if packages:
            assert len(packages) == 1, f"{pyproject}: entry points in {sorted(packages)}"
            found.append(Backend(pyproject.parent.name, packages.pop()))
    return found


BACKENDS = _backends()


def _ids(backend: Backend) -> str:
    return backend.dist


def _readme_modules(backend: Backend) -> dict[str, str]:
    """The rows of the README's module table (``| module | role |``): module -> role."""
    rows: dict[str, str] = {}
    in_table = False
    for line in backend.readme.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == "module":
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if in_table and not set(cells[0]) <= {"-", ":"}:
            name = cells[0].strip("`").removesuffix("/").removesuffix(".py").replace("/", ".")
            rows[name] = cells[1] if len(cells) > 1 else ""
    return rows


# --- where an operation lives -------------------------------------------------------------


def _in(module: str, where: str) -> bool:
    """True if ``module`` is ``where`` or a module of the package ``where``."""
    return module == where or module.startswith(where + ".")


def _bound_names(store_module: ModuleType, where: str) -> tuple[set[str], set[str]]:
    """The names of ``store_module`` that reach ``where``: its globals (``where`` itself, or
    a function or class defined there) and the attributes or variables it builds from them
    (``self._listener = DueListener(...)``, ``waiters: Waiters``)."""
    names = {
        name
        for name, value in vars(store_module).items()
        if (isinstance(value, ModuleType) and _in(value.__name__, where))
        or (callable(value) and _in(getattr(value, "__module__", None) or "", where))
    }
    attributes = set()
    for node in ast.walk(ast.parse(inspect.getsource(store_module))):
        source: ast.expr | None = None
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            source, targets = node.value.func, node.targets
        elif isinstance(node, ast.AnnAssign):
            source, targets = node.annotation, [node.target]
        while isinstance(source, ast.Attribute):
            source = source.value
        if isinstance(source, ast.Name) and source.id in names:
            for target in targets:
                if isinstance(target, ast.Attribute):
                    attributes.add(target.attr)
                elif isinstance(target, ast.Name):
                    attributes.add(target.id)
    return names, attributes


def _method_names(method: Callable[..., Any]) -> tuple[set[str], set[str]]:
    """The names a method's body uses, and the ``self.`` attributes."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    return names, attributes


def _reaches(store: type[StorageBase], hook: str, where: str) -> bool:
    """True if the store's ``hook`` is defined in ``where`` or, defined in the module of
    ``store``, uses a name that reaches ``where`` (directly or through another method of the
    store)."""
    module = importlib.import_module(store.__module__)
    names, attributes = _bound_names(module, where)
    seen: set[str] = set()
    todo = [hook]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        method = getattr(store, name)
        defined = getattr(method, "__module__", None) or ""
        if _in(defined, where):
            return True
        if defined != store.__module__:
            continue
        used, used_attributes = _method_names(method)
        if used & names or used_attributes & attributes:
            return True
        todo += [a for a in used_attributes if inspect.isfunction(getattr(store, a, None))]
    return False


def _where_defined(store: type[StorageBase], hook: str) -> str:
    return getattr(getattr(store, hook), "__module__", "?")


# --- the tests ----------------------------------------------------------------------------


def test_the_guide_tree_names_the_map_and_each_operation_in_one_module() -> None:
    """The parse above reads the tree (so the checks below check something), and no
    operation is given to two modules."""
    assert {"_store", "_claims", "_controls", "_fleet", "_admission"} <= set(GUIDE_MODULES)
    assert "claim_due" in OPERATIONS["_claims"]
    assert "parse_url" in NAMES["_url"]
    placed = [name for names in OPERATIONS.values() for name in names]
    assert len(placed) == len(set(placed)), f"an operation is in two modules: {OPERATIONS}"
    assert len(BACKENDS) >= 5, [b.dist for b in BACKENDS]


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids)
def test_the_readme_module_table_lists_exactly_the_modules_of_the_backend(
    backend: Backend,
) -> None:
    listed = _readme_modules(backend)
    present = backend.modules()
    unlisted = sorted(present - set(listed))
    gone = sorted(set(listed) - present)
    assert not unlisted, (
        f"{backend.dist}/README.md's module table does not name these modules: {unlisted}. "
        "A module the guide's tree (docs/writing-a-backend.md, '1. The distribution') does "
        "not name is an extra: say its role there."
    )
    assert not gone, f"{backend.dist}/README.md names modules the package lacks: {gone}"
    blank = sorted(name for name, role in listed.items() if not role)
    assert not blank, f"{backend.dist}/README.md gives no role for {blank}"


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids)
def test_the_readme_says_which_modules_are_extras(backend: Backend) -> None:
    """A module the guide's tree does not name (nor the package of a module it names holds)
    is an extra: its role in the README starts with "extra:"; a module of the tree's does
    not."""
    listed = _readme_modules(backend)
    in_tree = {name: name.split(".")[0] in GUIDE_MODULES for name in listed}
    unmarked = sorted(n for n, role in listed.items() if not in_tree[n] and not _extra(role))
    marked = sorted(n for n, role in listed.items() if in_tree[n] and _extra(role))
    assert not unmarked, (
        f"{backend.dist}/README.md: not in the guide's tree, so extras, but not marked "
        f"'extra:': {unmarked}"
    )
    assert not marked, f"{backend.dist}/README.md marks modules of the tree as extras: {marked}"


def _extra(role: str) -> bool:
    return role.startswith("extra:")


def _placements() -> Iterator[tuple[str, str]]:
    for module, operations in OPERATIONS.items():
        for operation in operations:
            yield module, operation


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids)
@pytest.mark.parametrize(("module", "operation"), list(_placements()))
def test_each_operation_lives_in_the_module_the_guide_names(
    backend: Backend, module: str, operation: str
) -> None:
    store = backend.store()
    hook = f"_{operation}"
    if getattr(store, hook) is getattr(StorageBase, hook):
        return  # the backend does not implement it: the base's default or Unsupported
    where = f"{backend.package}.{module}"
    assert module in {m.split(".")[0] for m in backend.modules()}, (
        f"{backend.package} implements {operation} but has no {module}.py, where the guide puts it"
    )
    assert _reaches(store, hook, where), (
        f"{store.__name__}.{hook} (in {_where_defined(store, hook)}) neither lives in nor "
        f"calls {where}, where the guide's tree puts {operation}"
    )


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids)
def test_each_module_of_the_guide_defines_what_the_guide_says(backend: Backend) -> None:
    """``parse_url`` in ``_url``, ``translate_errors`` in ``_errors``, … in every backend
    that has the module."""
    present = {m.split(".")[0] for m in backend.modules()}
    missing = [
        f"{module}.{name}"
        for module, names in NAMES.items()
        if module in present
        for name in names
        if not hasattr(backend.import_(module), name)
    ]
    assert not missing, f"{backend.package} lacks what the guide's tree names: {missing}"
