"""The package's layout rules, measured from its own source: floors without back-arrows or circles, and sizes.

Every import between the package's modules (at module level or inside a function) is read with ``ast``.
A module may import from its own floor or the floors below it (:data:`FLOORS`, lowest first), never from
a floor above, and no set of modules imports itself round a circle. A package's ``__init__`` is a facade:
it stands on the highest floor of what it imports, and importing from it counts as importing that floor.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lightning_embinit"
NAME = PACKAGE.name

FLOORS: list[tuple[str, tuple[str, ...]]] = [
    (
        "argument checks, quiet commands, host memory, text and YAML files, the vocabulary",
        ("checks", "quiet", "host_memory", "text_files", "yaml_files", "vocabulary"),
    ),
    (
        "init core",
        (
            "init.registry",
            "init.families",
            "init.statistics",
            "init.schemes",
            "init.positional",
            "init.host",
            "init.projection",
            "init.tokens",
        ),
    ),
    ("init sources", ("init.sources",)),
    ("init pipeline", ("init",)),
    ("diagnostics", ("diagnostics",)),
    ("building blocks", ("modules",)),
    ("architectures", ("architectures",)),
    ("tokenizers and batches", ("text",)),
    ("data", ("data",)),
    ("Lightning systems", ("models",)),
    ("callbacks", ("callbacks",)),
    ("LightningCLI", ("commands.lightning_cli",)),
    ("studies", ("studies",)),
    ("commands", ("commands", "__main__")),
]
"""Floors, lowest first, by module-name prefix relative to the package (the longest prefix wins)."""

MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()
FACADES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _imports(name: str) -> set[str]:
    """The package's modules that ``name`` imports (``from pkg import submodule`` counts as the submodule)."""
    path = MODULES[name]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                own = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(own[: len(own) - node.level + 1] + ([node.module] if node.module else []))
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in MODULES:
                candidate = candidate.rpartition(".")[0]
            if candidate.startswith(NAME) and candidate != name:
                targets.add(candidate)
    return targets


IMPORTS = {name: _imports(name) for name in MODULES}


def _declared_floor(name: str) -> int | None:
    relative = name[len(NAME) + 1 :]
    best, floor = -1, None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (relative == prefix or relative.startswith(prefix + ".")) and len(prefix) > best:
                best, floor = len(prefix), index
    return floor


def _floor(name: str, seen: frozenset[str] = frozenset()) -> int:
    """A module's floor; a facade's is the highest floor of what it imports (the package root: the top)."""
    if name == NAME:
        return len(FLOORS) - 1
    if name in FACADES:
        inside = [t for t in IMPORTS[name] if t not in seen]
        return max([_declared_floor(name) or 0, *(_floor(t, seen | {name}) for t in inside)])
    floor = _declared_floor(name)
    assert floor is not None, f"{name} is on no floor: add its prefix to FLOORS"
    return floor


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (facade edges left out: a package may list its parts)."""
    graph = {m: {t for t in ts if t not in FACADES} for m, ts in IMPORTS.items() if m not in FACADES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    assert _circles() == []


def test_no_module_imports_from_a_floor_above_its_own():
    back_arrows = defaultdict(list)
    for name, targets in IMPORTS.items():
        own = _floor(name)
        for target in sorted(targets):
            if name in FACADES and target.startswith(name + "."):
                continue  # a package lists its own parts
            if _floor(target) > own:
                back_arrows[f"{name} ({FLOORS[own][0]})"].append(f"{target} ({FLOORS[_floor(target)][0]})")
    assert dict(back_arrows) == {}


def test_the_systems_import_nothing_from_the_datamodules():
    """``models/`` and ``data/`` both build on ``text/``; a system never needs a datamodule's code."""
    from_data = {
        name: sorted(t for t in targets if t == f"{NAME}.data" or t.startswith(f"{NAME}.data."))
        for name, targets in IMPORTS.items()
        if name.startswith(f"{NAME}.models")
    }
    assert {name: targets for name, targets in from_data.items() if targets} == {}


def test_the_floor_table_knows_every_module():
    unplaced = [name for name in MODULES if name != NAME and name not in FACADES and _declared_floor(name) is None]
    assert unplaced == []


def test_no_function_over_60_lines_and_no_module_over_400():
    long_functions, long_modules = [], []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name} (line {node.lineno}): {length} lines")
    assert long_functions == [] and long_modules == []


@pytest.mark.parametrize(
    "module",
    [
        "lightning_embinit.modules",
        "lightning_embinit.architectures",
        "lightning_embinit.init",
        "lightning_embinit.diagnostics",
        "lightning_embinit.text",
        "lightning_embinit.vocabulary",
    ],
)
def test_the_torch_only_layers_import_no_lightning(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "bad = sorted(m for m in ('lightning', 'pytorch_lightning', 'torchmetrics') if m in sys.modules); print(bad)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
