"""The floors of hooks/: a module imports only its own floor or a lower one, at the top of the file.

Floors, high to low: entry points > controllers > pipeline > actuators > kube/aws and the process's
services > rule packages > vocabulary. An import that runs up a floor, an import made inside a function,
an import circle or an aliased import of our own modules fails here, unless it is on an allowlist below
with its reason; the allowlists can only shrink (an entry no longer needed fails too).
"""
from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (floor, module prefixes); the longest matching prefix wins.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("entry points", ("hooks.app", "hooks.serving", "hooks.cli", "hooks.cli_gc", "hooks.warmup",
                      "hooks.dispatch", "hooks.auth", "hooks.credentials")),
    ("controllers", ("hooks.controllers",)),
    ("pipeline", ("hooks.pipeline",)),
    ("actuators", ("hooks.actuators",)),
    ("kube/aws", ("hooks.kube", "hooks.aws", "hooks.runtime", "hooks.metrics", "hooks.logs",
                  "hooks.recent", "hooks.template_sandbox", "hooks.template_sandbox_worker")),
    ("rule packages", ("hooks.fencing", "hooks.machines", "hooks.detacher", "hooks.interruption",
                       "hooks.handover", "hooks.teardown", "hooks.provisioning", "hooks.replacement",
                       "hooks.nodepools")),
    ("vocabulary", ("hooks",)),
]

# (importer, imported): why it may look up.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}

# (importer, imported): why the import waits until a function runs.
DEFERRED_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {
    ("hooks.serving", "hooks.metrics"): "the worker's own metrics: the master process must not create the "
                                        "multiprocess metric files",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    deferred: bool  # inside a function, not run when the module loads
    aliased: bool


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in sorted((ROOT / "hooks").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports() -> list[Import]:
    found = []
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(), filename=str(path))
        top_level = {id(node) for node in tree.body}
        for statement in tree.body:  # an `if TYPE_CHECKING:` or `try:` block at the top still loads with the module
            if isinstance(statement, (ast.If, ast.Try)):
                top_level |= {id(node) for node in ast.walk(statement)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [(alias.name, alias.asname) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [(f"{base}.{alias.name}", alias.asname) for alias in node.names]
            else:
                continue
            for target, alias in targets:
                imported = _resolve(target)
                if imported is None or imported == module:
                    continue
                found.append(Import(module, imported, node.lineno, id(node) not in top_level,
                                    alias is not None and alias != target.rpartition(".")[2]))
    return found


IMPORTS = _imports()


def floor_of(module: str) -> int:
    best = None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    assert best is not None, f"{module} is on no floor: add it to FLOORS"
    return best[0]


def test_every_module_is_on_a_floor():
    for module in MODULES:
        floor_of(module)


def test_no_import_runs_up_a_floor():
    upward = {(i.importer, i.imported): i for i in IMPORTS if floor_of(i.imported) < floor_of(i.importer)}
    unexpected = [f"{i.importer}:{i.line} imports {i.imported} ({FLOORS[floor_of(i.importer)][0]} -> "
                  f"{FLOORS[floor_of(i.imported)][0]})" for key, i in sorted(upward.items())
                  if key not in UPWARD_ALLOWED]
    assert not unexpected, "\n".join(unexpected)
    stale = sorted(set(UPWARD_ALLOWED) - set(upward))
    assert not stale, f"no longer needed, remove from UPWARD_ALLOWED: {stale}"


def test_no_import_waits_for_a_function():
    deferred = {(i.importer, i.imported): i for i in IMPORTS if i.deferred}
    unexpected = [f"{i.importer}:{i.line} imports {i.imported} inside a function"
                  for key, i in sorted(deferred.items()) if key not in DEFERRED_IMPORTS_ALLOWED]
    assert not unexpected, "\n".join(unexpected)
    stale = sorted(set(DEFERRED_IMPORTS_ALLOWED) - set(deferred))
    assert not stale, f"no longer needed, remove from DEFERRED_IMPORTS_ALLOWED: {stale}"


def test_no_import_of_ours_is_aliased():
    aliased = [f"{i.importer}:{i.line} imports {i.imported} under another name" for i in IMPORTS if i.aliased]
    assert not aliased, "\n".join(aliased)


def test_no_import_circle():
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for i in IMPORTS:
        if MODULES[i.imported].name != "__init__.py":
            graph[i.importer].add(i.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(" <-> ".join(sorted(component)))

    for module in graph:
        if module not in index:
            visit(module)
    assert not circles, "\n".join(circles)


def test_the_check_sees_an_upward_import():
    """The AST pass finds what it must: a controller importing the pipeline is downward, and the pipeline
    importing a controller would be upward."""
    assert floor_of("hooks.pipeline") > floor_of("hooks.controllers.node")
    assert floor_of("hooks.plan") > floor_of("hooks.kube.client") > floor_of("hooks.actuators")
    assert any(i.importer.startswith("hooks.controllers.") and i.imported == "hooks.pipeline" for i in IMPORTS)
