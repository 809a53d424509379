"""The shape of the code: its layers at the top, no import cycles, and every method that
overrides a library's says so."""

from __future__ import annotations

import ast
import importlib
import inspect
import threading
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


# The package's top: one folder per layer, and nothing else but its __init__.py.
LAYERS = ("callbacks", "config", "data", "models", "run", "storage", "strategies", "tools")


def test_the_package_top_shows_its_layers_each_saying_what_it_is():
    top = SRC / "multigpu"
    entries = sorted(p.name for p in top.iterdir() if p.name != "__pycache__")
    assert entries == ["__init__.py", *LAYERS]
    assert len(entries) <= 9
    for init in sorted(top.rglob("__init__.py")):
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} has no docstring"


def package_modules() -> dict[str, Path]:
    modules = {}
    for path in (SRC / "multigpu").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("multigpu"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("multigpu")}
    return found


def test_no_module_imports_one_that_imports_it_back():
    modules = package_modules()
    graph = {name: imports(path, modules) - {name} for name, path in modules.items()}
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for dep in graph.get(node, ()):
                if dep == start:
                    cycles.append(" -> ".join([*trail, dep]))
                elif dep not in trail:
                    stack.append((dep, [*trail, dep]))
    assert not cycles
    assert graph["multigpu.run.training"]  # the graph is really read


# The layers from the bottom up: a module imports its own layer's modules and those below,
# never one above (docs/development.md, "Where a run goes in the code").
FROM_THE_BOTTOM = (
    ("config",), ("models",), ("storage",), ("data", "callbacks"), ("strategies",), ("tools",),
    ("run",),
)  # fmt: skip


def test_imports_run_down_the_layers():
    floor = {layer: i for i, layers in enumerate(FROM_THE_BOTTOM) for layer in layers}
    assert set(floor) == set(LAYERS)
    modules = package_modules()
    upward = []
    for name, path in modules.items():
        parts = name.split(".")
        if len(parts) < 2 or parts[1] not in floor:
            continue
        for imported in imports(path, modules):
            target = imported.split(".")
            if len(target) > 1 and target[1] in floor and floor[target[1]] > floor[parts[1]]:
                upward.append(f"{name} imports {imported}")
    assert not upward, upward


def library_overrides(cls: type) -> list[str]:
    """Methods ``cls`` defines that a base class from outside the package defines too."""
    outside = [b for b in cls.__mro__[1:] if not b.__module__.startswith("multigpu")]
    names = []
    for name, member in vars(cls).items():
        function = member.fget if isinstance(member, property) else member
        if not inspect.isfunction(function) or name in ("__init__", "__init_subclass__"):
            continue
        if any(name in vars(base) for base in outside):
            names.append(name)
    return names


def project_classes() -> list[type]:
    from lightning_fabric.plugins import CheckpointIO
    from pytorch_lightning import Callback, LightningDataModule, LightningModule
    from pytorch_lightning.strategies import Strategy
    from pytorch_lightning.strategies.launchers.launcher import _Launcher
    from torch.utils.data import Sampler

    lightning = (Callback, CheckpointIO, LightningDataModule, LightningModule, Strategy, Sampler)
    lightning += (_Launcher, threading.Thread)
    classes = []
    for name in package_modules():
        if name.endswith("__main__"):
            continue
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if cls.__module__ == name and issubclass(cls, lightning):
                classes.append(cls)
    return classes


def marked(member):
    """What ``@override`` marks: the function, or a property's getter."""
    return member.fget if isinstance(member, property) else member


@pytest.mark.parametrize("cls", project_classes(), ids=lambda c: c.__qualname__)
def test_every_library_override_is_marked(cls):
    unmarked = [
        name
        for name in library_overrides(cls)
        if not getattr(marked(vars(cls)[name]), "__override__", False)
    ]
    assert not unmarked, f"{cls.__qualname__} overrides without @override: {unmarked}"
