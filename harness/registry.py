"""The one way to register a component: a `Registry` per kind of component, filled by a `register` decorator.

Every kind of component a trial is composed of has one registry, declared at the bottom of this file with
the Protocol its entries follow and the modules that register the built-in ones (its `homes`). Each
implementation registers itself where it is defined, with the registry's decorator:

    from harness.registry import ENGINES

    @ENGINES.register("hf")
    def hf_engine(model, tokenizer, path, settings, seed) -> RolloutEngine: ...

A registry refuses a second entry under one name and answers an unknown name with one line that lists the
valid ones (`check`: the config's validation asks it, as it asks `algorithms.loss_names()` for
estimators, whose registry is algorithms/registry.py). A registry imports its homes on first use, so
the configuration can check a name without importing the trainer, and a plugin (`stalebench --plugin
my_pkg`) adds entries by importing this module and calling `register`: a new component is its own file
(docs/contributing.md).

This module imports nothing of stalebench but the error types.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Generic, Iterator, TypeVar

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
            raise ConfigError(f"{key}: {name!r} is not valid; choose one of "
                              f"{', '.join(self.names()) or f'(no {self.kind} registered)'}")

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
# The registries: kind of component -> its Protocol (where it is defined) and the modules of its built-ins.
# ----------------------------------------------------------------------------------------------------------

# tasks/registry.py TaskEntry: a problem source with rewards (addrev, cumsum, the benchmarks)
TASKS: Registry[Any] = Registry("task", homes=("harness.tasks",))
# rollout/__init__.py Forward: the model's forward (trainer log-probs and the sampler over it): hf, lean
FORWARDS: Registry[Any] = Registry("model forward", homes=("harness.rollout",))
# rollout/__init__.py EngineFactory: the rollout engine that samples the batches: hf, vllm
ENGINES: Registry[Any] = Registry("rollout engine", homes=("harness.rollout",))
# trial/backends.py Backend: the optimizer step over the trainer's gradients: torch, deepspeed
BACKENDS: Registry[Any] = Registry("training backend", homes=("harness.trial.backends",))
# trial/staleness.py Source: where each consumed batch comes from: exact delay, mixed versions, in-flight updates, async
SOURCES: Registry[Any] = Registry("staleness source", homes=("harness.trial.staleness",))
# spec/kinds.py TrialKind: what runs a trial: the LLM trainer, the estimator lab
KINDS: Registry[Any] = Registry("trial kind", homes=("harness.trial.kind", "harness.lab.kind"))
# store/tracking/config.py Mirror: where a trial's records are mirrored besides its files: wandb (MLflow always)
MIRRORS: Registry[Any] = Registry("tracking mirror", homes=("harness.store.tracking.wandb_sink",))
# report/figures.py Figure: a figure of a suite's report, in page order (accuracy, heatmaps, dynamics)
FIGURES: Registry[Any] = Registry("report figure", homes=("harness.report.figures", "harness.report.heatmaps",
                                                             "harness.report.dynamics"))
# report/sections.py SectionSource: extra sections of a suite's report: kept policies' benchmarks, the lab's
SECTIONS: Registry[Any] = Registry("report section", homes=("harness.report.sections", "harness.report.tolerance",
                                                              "harness.lab.report"))
