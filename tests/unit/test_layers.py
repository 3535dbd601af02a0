"""The layers, checked from the code's own imports (every `import` and `from ... import`,
inside functions and `TYPE_CHECKING` blocks too, read with `ast`; nothing is run):

- a store (`durability.redis`, `.postgres`, `.sqlite`) imports no other store and nothing
  above the core: not `connect`, the worker, the graph, `testing`, nor the example or the lab;
- the core imports no store, except `connect`, the one place a store is chosen by URL;
- the store kit (`durability.storekit`: what stores are built from) imports nothing of the
  library outside itself, so any layer may use it;
- `integration/`, `experiments/` and `benchmarks/` take no private name from `durability`
  (no `_name`, no `_module`);
- no module imports itself through others: no circle anywhere;
- inside `durability`, no object reaches another's underscore members (`x._name` where `x`
  is not `self` or `cls`) and no module imports another's underscore names: what two halves
  share has a public name. A namedtuple's own API (`_replace`, `_asdict`) is public despite
  its underscore.

A module this file names as the core, above it or a store must exist, so the list cannot
drift from the tree without the test failing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("durability", "integration", "experiments", "benchmarks")
STORES = ("durability.redis", "durability.postgres", "durability.sqlite")
#: Above the core: what builds on the stores (a store importing it would be a circle's start).
ABOVE = (
    "durability.connect",
    "durability.worker",
    "durability.graph",
    "durability.testing",
    "durability.otel",
    "durability.operating",
    "durability.command",
    "durability.web",
    "integration",
    "experiments",
    "benchmarks",
)
#: The one core module that may import the stores: it chooses one by URL.
CHOOSES = "durability.connect"
#: What stores are built from; it stands below everything else.
KIT = "durability.storekit"


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_of(path)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from pkg import mod` imports a module when pkg.mod is one.
                if f"{base}.{alias.name}" in MODULES:
                    yield f"{base}.{alias.name}", None
                else:
                    yield base, alias.name


def _within(module: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _ours(imported: str) -> str | None:
    """The module of this tree that `imported` names (or the package holding it)."""
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


EDGES = {
    module: {
        target
        for imported, _ in _imports(module, path)
        if (target := _ours(imported)) is not None and target != module
    }
    for module, path in MODULES.items()
}


def test_the_layers_named_here_exist() -> None:
    for name in (*STORES, *ABOVE, CHOOSES, KIT):
        assert name in MODULES, f"{name} is named by the layer check but is not in the tree"


def test_a_store_imports_no_other_store_and_nothing_above_the_core() -> None:
    wrong = []
    for module, targets in EDGES.items():
        store = next((s for s in STORES if _within(module, s)), None)
        if store is None:
            continue
        for target in targets:
            other_store = _within(target, STORES) and not _within(target, store)
            if other_store or _within(target, ABOVE):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_the_core_imports_no_store_but_where_a_store_is_chosen() -> None:
    wrong = []
    for module, targets in EDGES.items():
        if not _within(module, "durability") or _within(module, (*STORES, *ABOVE)):
            continue
        if module == "durability":  # the package's face re-exports the public names
            continue
        wrong += [f"{module} -> {t}" for t in targets if _within(t, STORES)]
    assert wrong == []


def test_the_store_kit_imports_nothing_of_the_library_outside_itself() -> None:
    wrong = [
        f"{module} -> {target}"
        for module, targets in EDGES.items()
        if _within(module, KIT)
        for target in targets
        if not _within(target, KIT)
    ]
    assert wrong == []


def test_the_example_the_lab_and_the_benchmarks_take_nothing_private() -> None:
    wrong = []
    for module, path in MODULES.items():
        if not _within(module, ("integration", "experiments", "benchmarks")):
            continue
        for imported, name in _imports(module, path):
            if not _within(imported, "durability"):
                continue
            private_module = any(part.startswith("_") for part in imported.split("."))
            private_name = name is not None and name.startswith("_")
            if private_module or private_name:
                wrong.append(f"{module}: {imported}{'' if name is None else ' ' + name}")
    assert wrong == []


def test_no_module_imports_itself_through_others() -> None:
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(EDGES.get(module, ())):
            if state.get(target) == 1:
                circles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(EDGES):
        if module not in state:
            visit(module)
    assert circles == [], "\n".join(" -> ".join(circle) for circle in circles)


def test_every_file_the_architecture_page_names_exists() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    cited = {
        path
        for path in re.findall(r"`([\w./-]+)`", page)
        if "/" in path and "." in path.rsplit("/", 1)[-1]
    }
    assert len(cited) >= 15, cited  # the page names a file for every hop
    missing = sorted(path for path in cited if not (ROOT / path).exists())
    assert missing == []


#: A namedtuple's public API, underscored only so it cannot clash with a field's name.
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_object_in_the_package_reaches_into_another_s_privates() -> None:
    reaches = []
    for module, path in MODULES.items():
        if not _within(module, "durability"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if node.attr in NAMEDTUPLE_API:
                    continue
                reaches.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.ImportFrom):
                taken = [alias.name for alias in node.names if _private(alias.name)]
                reaches += [f"{module}:{node.lineno}: imports {name}" for name in taken]
    assert reaches == []


def test_every_redis_script_sits_in_the_folder_of_what_it_serves() -> None:
    scripts = ROOT / "durability" / "redis" / "scripts"
    folders = {"checkpoint", "stream", "set", "shared"}
    astray = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "durability" / "redis").rglob("*.lua")
        if path.parent.parent != scripts or path.parent.name not in folders
    )
    assert astray == []  # `lua.source` finds a script by its stem under scripts/<folder>/
