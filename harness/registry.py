"""The one way to register a component: a `Registry` per kind of component, filled by a `register` decorator.

Every kind of component a trial is composed of has one registry, declared at the bottom of this file with
the Protocol its entries follow. Each implementation registers itself where it is defined, with the
registry's decorator:

    from harness.registry import ENGINES

    @ENGINES.register("hf")
    def hf_engine(model, tokenizer, path, settings, seed) -> RolloutEngine: ...

A registry refuses a second entry under one name and answers an unknown name with one line that lists the
valid ones (`check`: the configuration's validation asks it, as it asks `algorithms.loss_names()` for
estimators, whose registry is algorithms/registry.py).

No registry knows where its entries live. The package names its composition root with `compose`
(harness/__init__.py names harness/builtins.py, the module that names the built-in components by registry),
and the first use of a registry asks each root to `load` it: the configuration checks an engine's name
without importing the trainer, a report's figures without torch, and every process that uses a registry
(a Ray worker, a script) has imported the package, so is composed alike. A plugin (`stalebench --plugin
my_pkg`) adds entries by importing this module and calling `register`: a new component is its own file
(docs/contributing.md).

This module imports nothing of stalebench but the error types.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, Iterator, TypeVar

from harness.errors import ConfigError

T = TypeVar("T")
_ROOTS: list[str] = []                  # the composition roots, in the order they were named


def compose(root: str) -> None:
    """Make `root` a composition root: a module with a function `load(registry)` that imports the modules
    registering that registry's entries (harness/builtins.py), called on the registry's next use."""
    if root not in _ROOTS:
        _ROOTS.append(root)


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._settings: dict[str, type] = {}    # name -> the frozen dataclass of the entry's own settings
        self._loaded: set[str] = set()      # the composition roots that loaded this registry

    def register(self, name: str, settings: type | None = None) -> Callable[[T], T]:
        """Decorator: register the decorated object under `name` (a second one under it is an error), with
        `settings`, the frozen dataclass of its own settings (typed fields with defaults, `validate(key)`;
        a suite writes them as `<kind>: {name: {setting: value}}`, config/components.py), or None: it has none."""
        def add(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            if settings is not None:
                self._settings[name] = settings
            return obj
        return add

    def settings(self, name: str, key: str | None = None) -> type | None:
        """The settings class registered with entry `name` (None: it takes none)."""
        self.check(key or self.kind, name)
        return self._settings.get(name)

    def _load(self) -> None:
        """Ask each composition root not yet asked to load this registry (marked first: a module it imports
        may use the registry while it is imported)."""
        for root in _ROOTS:
            if root not in self._loaded:
                self._loaded.add(root)
                importlib.import_module(root).load(self)

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
            raise ConfigError(f"{key}: {name!r} is not valid; choose one of "
                              f"{', '.join(self.names()) or self._nothing()}")

    def _nothing(self) -> str:
        why = (f"no composition root ({', '.join(_ROOTS)}) loads one" if _ROOTS else "no composition root was "
               "named; harness/__init__.py names harness/builtins.py with harness.registry.compose")
        return f"(no {self.kind} registered: {why})"

    def get(self, name: str, key: str | None = None) -> T:
        self.check(key or self.kind, name)
        return self._entries[name]


def claimant(registry: Registry[T], subject: Any) -> T:
    """The entry of `registry` that serves `subject` (a run config): the last registered one whose
    `claims(subject)` is true, so that a plugin registered later can take over a case."""
    for _, entry in reversed(list(registry)):
        if entry.claims(subject):
            return entry
    raise ValueError(f"no {registry.kind} serves this config; registered: {', '.join(registry.names())}")


# ----------------------------------------------------------------------------------------------------------
# The registries: kind of component -> the Protocol (or class) its entries follow, and the built-in names.
# ----------------------------------------------------------------------------------------------------------

# tasks/registry.py TaskEntry: a problem source with rewards (addrev, cumsum, the benchmarks)
TASKS: Registry[Any] = Registry("task")
# bases/sources.py ModelSource: the kind of starting model (model.kind): tiny (a frozen base), path (a local dir)
MODELS: Registry[Any] = Registry("model kind")
# rollout/base.py Forward: the model's forward (trainer log-probs and the sampler over it): hf, lean, lean3
FORWARDS: Registry[Any] = Registry("model forward")
# rollout/__init__.py _in_process: the rollout engine that samples the batches (a factory): hf, vllm
ENGINES: Registry[Any] = Registry("rollout engine")
# trial/backends.py TorchBackend: the optimizer step over the trainer's gradients (a class): torch, deepspeed
BACKENDS: Registry[Any] = Registry("training backend")
# trial/staleness.py Source: where each consumed batch comes from: exact delay, mixed versions, in-flight updates, async
SOURCES: Registry[Any] = Registry("staleness source")
# config/kinds.py TrialKind: what runs a trial: the LLM trainer, the estimator lab
KINDS: Registry[Any] = Registry("trial kind")
# store/tracking/wandb_sink.py WandbConfig: where a trial's records are mirrored besides its files (its
# settings class): wandb (MLflow always)
MIRRORS: Registry[Any] = Registry("tracking mirror")
# report/figures.py accuracy_vs_delay: a figure of a suite's report, in page order (accuracy, heatmaps, dynamics)
FIGURES: Registry[Any] = Registry("report figure")
# report/sections.py SectionSource: extra sections of a suite's report: kept policies' benchmarks, the lab's
SECTIONS: Registry[Any] = Registry("report section")
# report/stats.py Statistic: a cell statistic the report prints (`report.statistic`), with its interval: iqm, mean
STATISTICS: Registry[Any] = Registry("report statistic")
