"""The composition root: the one module that names stalebench's built-in components, by the registry they
register in (harness/registry.py); the registries themselves name no modules.

harness/__init__.py names this root with `harness.registry.compose`, so every process that uses a registry
(the CLI, a Ray worker, a test, a script) is composed alike. On the first use of a registry, `load` imports
that registry's built-ins only: checking an engine's name imports the rollout package, a report's figures
import no trainer and no torch. It sits on the top floor: it names modules of every floor below, nothing
imports it. A plugin needs no line here: it registers where it is imported (`stalebench --plugin my_pkg`).

The order of the modules is the order of the entries within a registry: the report's figures are in page
order (accuracy, heatmaps, dynamics).
"""
from __future__ import annotations

import importlib

from harness.registry import (BACKENDS, ENGINES, FIGURES, FORWARDS, KINDS, MIRRORS, MODELS, SECTIONS, SOURCES,
                              STATISTICS, TASKS, Registry)

BUILTINS: dict[Registry, tuple[str, ...]] = {
    TASKS: ("harness.tasks",),                                        # addrev, cumsum, the benchmarks
    MODELS: ("harness.bases.sources",),                               # tiny, path
    FORWARDS: ("harness.rollout",),                                   # hf, lean, lean3
    ENGINES: ("harness.rollout",),                                    # hf, vllm
    BACKENDS: ("harness.trial.backends",),                            # torch, deepspeed
    SOURCES: ("harness.trial.staleness",),                            # exact, mixed, in-flight, async
    KINDS: ("harness.trial.kind", "harness.lab.kind"),                # llm, lab
    MIRRORS: ("harness.store.tracking.wandb_sink",),                  # wandb (MLflow always)
    FIGURES: ("harness.report.figures", "harness.report.heatmaps", "harness.report.dynamics"),
    SECTIONS: ("harness.report.sections", "harness.report.tolerance",  # regime, benchmarks, step-size tolerance;
               "harness.lab.report"),                                 # the lab's
    STATISTICS: ("harness.report.stats",),                            # iqm, mean
}


def load(registry: Registry) -> None:
    """Import the modules that register `registry`'s built-ins."""
    for module in BUILTINS.get(registry, ()):
        importlib.import_module(module)
