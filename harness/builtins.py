"""The composition root: the one module that imports stalebench's built-in components, so that each
registers itself in its registry (harness/registry.py).

The registries name no modules. An entry point names this one with `harness.registry.compose` (the CLI,
tests/conftest.py, a script that builds trials itself), and the first use of any registry imports it;
$STALEBENCH_COMPOSITION hands it to Ray workers. It sits on the top floor: it imports the floors below,
nothing imports it. A plugin is a composition root of its own (`stalebench --plugin my_pkg`).

The order of the imports is the order of the entries within a registry: the report's figures are in page
order (accuracy, heatmaps, dynamics).
"""
from __future__ import annotations

import harness.tasks  # noqa: F401  (addrev, cumsum, the benchmarks)
import harness.rollout  # noqa: F401  (engines hf, vllm; forwards hf, lean, lean3)
import harness.trial.backends  # noqa: F401  (torch, deepspeed)
import harness.trial.staleness  # noqa: F401  (exact, mixed, async)
import harness.trial.kind  # noqa: F401  (llm)
import harness.lab.kind  # noqa: F401  (lab)
import harness.store.tracking.wandb_sink  # noqa: F401  (wandb)
import harness.report.figures  # noqa: F401  (accuracy, intervals, learning)
import harness.report.heatmaps  # noqa: F401  (collapse, eps, group_size)
import harness.report.dynamics  # noqa: F401  (diagnostics, diagnostics_delay, survival, staleness)
import harness.report.sections  # noqa: F401  (regime, benchmarks)
import harness.lab.report  # noqa: F401  (the lab's section)
