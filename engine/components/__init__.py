"""The component registry. Adding a component is one new module in this package that defines a
:class:`~engine.components.base.Component` subclass decorated with :func:`register`; every
module here is imported when the registry is first used."""

from __future__ import annotations

import importlib
import pkgutil
import threading

from signoff.engine.components.base import (
    BuildContext,
    Component,
    InputDef,
    OutputDef,
    ParamDef,
    PauseRequested,
    as_text,
)

COMPONENTS: dict[str, type[Component]] = {}
_loaded = False
# Re-entrant: a component module that asks the registry while it is imported gets what is loaded
# so far; another thread waits until every module is (the API checks flows on worker threads,
# and the first uploads after a start came at once: some saw an empty registry, "unknown
# component type").
_loading = threading.RLock()
_loading_here = threading.local()


def register(cls: type[Component]) -> type[Component]:
    """Class decorator: make ``cls`` available under ``cls.type_name``."""
    if not cls.type_name:
        raise ValueError(f"{cls.__name__} has no type_name")
    COMPONENTS[cls.type_name] = cls
    return cls


def unregister(type_name: str) -> None:
    COMPONENTS.pop(type_name, None)


def load_all() -> dict[str, type[Component]]:
    global _loaded
    if _loaded:
        return COMPONENTS
    with _loading:
        if getattr(_loading_here, "now", False):  # asked again while this thread imports them
            return COMPONENTS
        _loading_here.now = True
        try:
            if not _loaded:
                for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
                    if info.name != "base" and not info.name.startswith("_"):
                        importlib.import_module(f"{__name__}.{info.name}")
                _loaded = True
        finally:
            _loading_here.now = False
    return COMPONENTS


def get_component(type_name: str) -> type[Component] | None:
    """The component class registered as ``type_name``, or None."""
    load_all()
    return COMPONENTS.get(type_name)


__all__ = [
    "COMPONENTS",
    "BuildContext",
    "Component",
    "InputDef",
    "OutputDef",
    "ParamDef",
    "PauseRequested",
    "as_text",
    "get_component",
    "load_all",
    "register",
    "unregister",
]
