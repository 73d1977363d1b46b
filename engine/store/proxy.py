"""A store that wraps another: each coroutine method of the inner store goes through
``_wrap(name)`` once (cached), anything else passes through. The activities' patience with an
absent database (activities/patient.py) and the metrics' timing (engine/metrics.py) are two."""

from __future__ import annotations

import inspect
from typing import Any, Callable

__all__ = ["StoreProxy"]


class StoreProxy:
    def __init__(self, store: Any) -> None:
        self._store = store
        self._wrapped: dict[str, Callable[..., Any]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._store!r})"

    @property
    def inner(self) -> Any:
        return self._store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attr):
            return attr
        wrapped = self._wrapped.get(name)
        if wrapped is None:
            wrapped = self._wrapped[name] = self._wrap(name)
            wrapped.__name__ = name
        return wrapped

    def _wrap(self, name: str) -> Callable[..., Any]:
        """The coroutine function that stands for the inner store's method ``name``."""
        raise NotImplementedError
