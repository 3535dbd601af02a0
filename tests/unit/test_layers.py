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
- the lab (`experiments/`) is rooms in one direction (`LAB`): the floor (`catalogue`,
  `results`) imports nothing of the lab; the harness only the floor; a measure the harness
  and the floor, so *an experiment imports no reader*; a reader only the floor and other
  readers, so *a reader runs no experiment*: it imports neither a measure nor the harness
  that runs one, and reads what a run wrote; the fault runs and the conformance runner stand
  on the harness, the notebooks' writing on nothing of the lab, the commands above all of
  these, the package's face (`experiments`, `experiments.api`) on top. A module imported by
  name (`importlib.import_module(f"experiments.measures.{name}")`) counts as imported;
- inside `durability`, no object reaches another's underscore members (`x._name` where `x`
  is not `self` or `cls`) and no module imports another's underscore names: what two halves
  share has a public name. A namedtuple's own API (`_replace`, `_asdict`) is public despite
  its underscore.

A module this file names as the core, above it or a store must exist, and every module of the
lab must sit in a room named here, so the lists cannot drift from the tree without the test
failing.
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

#: The lab's floor: each experiment's name and the terms its measure and summary share, and
#: the folder of rows a run writes and a reader reads.
FLOOR = ("experiments.refusals", "experiments.catalogue", "experiments.results")
HARNESS = "experiments.harness"
MEASURES = "experiments.measures"
READERS = "experiments.readers"
FAULTS = "experiments.faults"
CONFORMING = "experiments.conforming"
WRITING = "experiments.writing"
COMMANDS = "experiments.commands"
#: The package's face: `import experiments as lab`, and what it calls.
FACE = ("experiments", "experiments.api")
#: Every room of the lab, with the rooms it may import besides its own: each stands only on
#: rooms listed before it, so nothing points up and nothing goes round.
LAB: dict[str, tuple[str, ...]] = {
    "experiments.refusals": (),
    "experiments.catalogue": (),
    "experiments.results": ("experiments.refusals",),
    "experiments.examples": (),  # a scheduler of someone's own: the library's public API only
    HARNESS: FLOOR,
    MEASURES: (*FLOOR, HARNESS),
    READERS: FLOOR,
    FAULTS: (*FLOOR, HARNESS),
    CONFORMING: (*FLOOR, HARNESS),
    WRITING: (),
    COMMANDS: (*FLOOR, HARNESS, MEASURES, READERS, FAULTS, CONFORMING, WRITING),
    # the command line's parser, handing each command to the rooms above
    "experiments.__main__": (*FLOOR, HARNESS, MEASURES, READERS, FAULTS, CONFORMING, WRITING,
                             COMMANDS),
    "experiments.api": (*FLOOR, HARNESS, MEASURES, READERS, CONFORMING, COMMANDS),
    "experiments": (*FLOOR, HARNESS, MEASURES, READERS, CONFORMING, COMMANDS, "experiments.api"),
}


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


def _by_name(node: ast.AST) -> str | None:
    """The module `importlib.import_module(...)` is given by name, as far as its text says: a
    literal, or an f-string's literal start (`f"experiments.measures.{name}"` imports from
    the package `experiments.measures`); None for anything else."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    called = node.func
    name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
    if name != "import_module":
        return None
    given = node.args[0]
    if isinstance(given, ast.Constant) and isinstance(given.value, str):
        return given.value
    if isinstance(given, ast.JoinedStr) and given.values:
        start = given.values[0]
        if isinstance(start, ast.Constant) and isinstance(start.value, str):
            return start.value.rstrip(".") or None
    return None


def _imports(module: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for every import in the file, and for
    every module imported by name (`_by_name`)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if (named := _by_name(node)) is not None:
            yield named, None
        elif isinstance(node, ast.Import):
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
    for name in (*STORES, *ABOVE, CHOOSES, KIT, *LAB):
        assert name in MODULES, f"{name} is named by the layer check but is not in the tree"


def _room(module: str) -> str | None:
    """The room of the lab `module` sits in (the package itself only as the face)."""
    found = [r for r in LAB if module == r or (r != "experiments" and module.startswith(r + "."))]
    return max(found, key=len, default=None)


def _lab_imports() -> list[tuple[str, str]]:
    """(module, module of the lab it imports) for every import between two modules of the
    lab, its own room's included."""
    return [
        (module, target)
        for module, targets in EDGES.items()
        if _within(module, "experiments")
        for target in sorted(targets)
        if _within(target, "experiments")
    ]


def test_every_module_of_the_lab_sits_in_a_room_named_here() -> None:
    """So a module added beside the rooms, not in one, fails here until it is given a place."""
    astray = [m for m in MODULES if _within(m, "experiments") and _room(m) is None]
    assert astray == []


def test_an_experiment_imports_no_reader() -> None:
    """A measure makes rows; what they say (tables, figures, intervals) is the readers'."""
    wrong = [f"{m} -> {t}" for m, t in _lab_imports()
             if _within(m, MEASURES) and _within(t, READERS)]
    assert wrong == []


def test_a_reader_runs_no_experiment() -> None:
    """A reader reads what a run wrote: it imports no measure and nothing of what runs one
    (the harness, the fault runs, the conformance runner, the commands, the face)."""
    running = (MEASURES, HARNESS, FAULTS, CONFORMING, COMMANDS, "experiments.__main__")
    wrong = [f"{m} -> {t}" for m, t in _lab_imports()
             if _within(m, READERS) and (_within(t, running) or t in FACE)]
    assert wrong == []


def test_each_room_of_the_lab_imports_only_the_rooms_below_it() -> None:
    rooms = list(LAB)
    above = [f"{r} on {b}" for r in rooms for b in LAB[r] if rooms.index(b) >= rooms.index(r)]
    assert above == [], "a room may stand only on rooms listed before it in LAB"
    wrong = []
    for module, target in _lab_imports():
        mine, theirs = _room(module), _room(target)
        assert mine is not None and theirs is not None, f"{module} -> {target}: no room"
        if theirs != mine and theirs not in LAB[mine]:
            wrong.append(f"{module} ({mine}) -> {target} ({theirs})")
    assert wrong == []


def test_every_room_of_the_lab_says_what_it_holds() -> None:
    """Each package of the lab opens with what it holds, in at most ten lines: the tree is
    the map, and each room's opening its legend."""
    silent = {}
    for module, path in MODULES.items():
        if _within(module, "experiments") and path.name == "__init__.py":
            opening = ast.get_docstring(ast.parse(path.read_text())) or ""
            if not opening.strip() or len(opening.strip().splitlines()) > 10:
                silent[module] = len(opening.strip().splitlines())
    assert silent == {}


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
    folders = {"checkpoint", "stream", "set", "shared", "schedules"}
    astray = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "durability" / "redis").rglob("*.lua")
        if path.parent.parent != scripts or path.parent.name not in folders
    )
    assert astray == []  # `lua.source` finds a script by its stem under scripts/<folder>/
