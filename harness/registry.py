"""The one way to register a component: a `Registry` per kind of component, filled by a `register` decorator.

Every kind of component stalebench composes a trial from (tasks, rollout engines, forwards, training
backends, staleness sources, trial kinds, tracking mirrors, report sections and figures) is a Protocol
next to its registry, and each implementation registers itself where it is defined:

    ENGINES = Registry("rollout engine", homes=("harness.rollout",))

    @ENGINES.register("hf")
    def _hf_engine(model, tokenizer, ...) -> RolloutEngine: ...

A registry refuses a second entry under one name and answers an unknown name with one line that lists the
valid ones (`check`, used by the config's validation, as `algorithms.loss_names()` is for estimators). Its
`homes` are the packages whose import registers the built-in entries: a registry imports them on first use,
so that a torch-free reader (the suite schema) can ask for names without importing the trainer, and a
plugin (`stalebench --plugin my_pkg`) registers more by importing this module and calling `register`.

This module imports nothing of stalebench but the error types.
"""
from __future__ import annotations

import importlib
from typing import Callable, Generic, Iterator, TypeVar

from harness.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, homes: tuple[str, ...] = ()):
        self.kind = kind
        self._homes = homes
        self._loaded = not homes
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under `name` (a second one under it is an error)."""
        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj
        return add

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for home in self._homes:
                importlib.import_module(home)

    def names(self) -> list[str]:
        self._load()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[tuple[str, T]]:
        self._load()
        return iter(list(self._entries.items()))

    def check(self, key: str, name: object) -> None:
        """One line naming `key` and the valid names when `name` is not registered."""
        if name not in self:
            raise ConfigError(f"{key}: {name!r} is not a registered {self.kind}; choose one of "
                              f"{', '.join(self.names()) or '(none registered)'}")

    def get(self, name: str, key: str | None = None) -> T:
        self.check(key or self.kind, name)
        return self._entries[name]
