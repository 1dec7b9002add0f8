"""The error tree drawn in tiered_kafka.errors is whole: every exception class of the SDK, the agent
and the gateway derives from TieredKafkaError and stands in the drawing under its real parent, with
the module it lives in. A class added anywhere, or moved, fails here until the drawing says so.

Exceptions that never leave their module are not part of the tree (tiered_kafka.errors says so):
those named with a leading underscore, and those of a private module that no public one exports
(a parser's or a listing's control flow, the C decoder's ``LegacyMagic``).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

import pytest

import tiered_kafka
import tiered_kafka.errors
import tiered_kafka_agent
import tiered_kafka_gateway
from tiered_kafka.errors import TieredKafkaError

PACKAGES = (tiered_kafka, tiered_kafka_agent, tiered_kafka_gateway)
#: modules that start something when imported (besides every ``__main__``): uvicorn's app module
ENTRY_POINTS = frozenset({"tiered_kafka_gateway.asgi"})
_LINE = re.compile(r"^    (?P<prefix>(?:[│ ]   )*(?:[├└]── )?)(?P<name>[A-Z]\w*)(?:\s+\[(?P<module>[\w.]+)\])?")


def all_modules() -> tuple[list[ModuleType], dict[str, str]]:
    """Every module of the three packages (entry points left out: importing one runs it), and the modules that failed to import with why (test_every_module_imports reports them)."""
    modules: list[ModuleType] = []
    failed: dict[str, str] = {}
    for package in PACKAGES:
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.", onerror=lambda name: failed.setdefault(name, "package walk failed")):
            if info.name.rsplit(".", 1)[-1] == "__main__" or info.name in ENTRY_POINTS:
                continue
            try:
                modules.append(importlib.import_module(info.name))
            except ImportError as err:
                failed[info.name] = repr(err)
    return modules, failed


def is_private(module_name: str) -> bool:
    return any(part.startswith("_") and part != "__init__" for part in module_name.split("."))


def exception_classes() -> dict[str, type[BaseException]]:
    """name -> class of every public exception class defined in those modules (names are unique).
    Public: not named with a leading underscore, and defined in a public module or exported by one
    (the registry's ``_errors`` are, the C decoder's ``_native.LegacyMagic`` is not)."""
    exported = {id(v) for m in MODULES if not is_private(m.__name__) for v in vars(m).values() if isinstance(v, type)}
    found: dict[str, type[BaseException]] = {}
    for module in MODULES:
        for name, value in vars(module).items():
            if not (isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__):
                continue
            if name.startswith("_") or (is_private(module.__name__) and id(value) not in exported):
                continue
            assert found.get(name, value) is value, f"two exception classes named {name}: {found[name].__module__} and {module.__name__}"
            found[name] = value
    return found


def drawing() -> dict[str, tuple[str | None, str | None]]:
    """name -> (drawn parent, drawn module) from the tree in tiered_kafka.errors's docstring."""
    doc = tiered_kafka.errors.__doc__ or ""
    lines = doc[doc.index("    TieredKafkaError\n") :].split("\n\n", 1)[0].splitlines()
    drawn: dict[str, tuple[str | None, str | None]] = {}
    path: list[str] = []
    for line in lines:
        match = _LINE.match(line)
        assert match is not None, f"not a line of the tree: {line!r}"
        depth = len(match["prefix"]) // 4
        assert depth <= len(path), f"{match['name']} is drawn below nothing"
        del path[depth:]
        assert match["name"] not in drawn, f"{match['name']} is drawn twice"
        drawn[match["name"]] = (path[-1] if path else None, match["module"])
        path.append(match["name"])
    return drawn


def short_module(cls: type) -> str | None:
    """How the drawing names ``cls``'s module: nothing for tiered_kafka.errors, the rest of an SDK
    module's name after ``tiered_kafka.``, an agent's or the gateway's in full."""
    if cls.__module__ == "tiered_kafka.errors":
        return None
    return cls.__module__.removeprefix("tiered_kafka.")


MODULES, IMPORT_FAILURES = all_modules()
CLASSES = exception_classes()
DRAWN = drawing()


def test_every_module_imports() -> None:
    assert IMPORT_FAILURES == {}


def test_the_walk_sees_the_three_packages() -> None:
    modules = {cls.__module__.split(".")[0] for cls in CLASSES.values()}
    assert modules == {"tiered_kafka", "tiered_kafka_agent", "tiered_kafka_gateway"}
    assert len(CLASSES) >= 50


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_exception_is_in_the_tree_where_it_is_drawn(name: str) -> None:
    cls = CLASSES[name]
    assert issubclass(cls, TieredKafkaError), f"{cls.__module__}.{name} does not derive from TieredKafkaError"
    assert name in DRAWN, f"{cls.__module__}.{name} is missing from the drawing in tiered_kafka.errors"
    parent, module = DRAWN[name]
    if cls is not TieredKafkaError:
        assert parent is not None and CLASSES.get(parent) in cls.__bases__, f"{name} is drawn under {parent}, derives from {[b.__name__ for b in cls.__bases__]}"
    assert module == short_module(cls), f"{name} is drawn in [{module}], lives in {cls.__module__}"


def test_the_drawing_names_no_class_that_is_gone() -> None:
    assert sorted(set(DRAWN) - set(CLASSES)) == []
