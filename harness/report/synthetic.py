"""Synthetic results directories in the suite runner's layout, for report tests and benchmarks.

The curves are made up (no training happens): accuracy rises from 0.23 toward a plateau that falls with
the delay; with ``collapse_delay`` set, trials of the algorithms in ``collapsing`` at delays >= it lose
their accuracy after mid-training. Metrics rows carry the names of the metrics contract.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from harness import trialdir

METRIC_NAMES = ("train/reward_mean", "loss/value", "opt/grad_norm", "policy/entropy", "policy/kl_behavior",
                "is/ratio_max", "is/ess_frac", "is/clip_frac", "rollout/len_mean", "rollout/zero_adv_frac",
                "perf/step_s", "perf/rollout_s", "perf/tokens_per_s")


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """One JSON object per line, NaN/Infinity allowed (as Python's json writes them)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def write_trial(suite_dir: Path, params: dict[str, Any], metrics: list[dict[str, Any]] | None,
                evals: list[dict[str, Any]] | None, status: dict[str, Any] | None,
                provenance: dict[str, Any] | None = None) -> Path:
    """Write one trial directory; a None argument leaves that file out. Returns the trial dir."""
    trial_dir = suite_dir / params["trial_id"]
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / trialdir.PARAMS).write_text(json.dumps(params), encoding="utf-8")
    (trial_dir / trialdir.CONFIG).write_text(yaml.safe_dump({"params": params}), encoding="utf-8")
    if metrics is not None:
        write_jsonl(trial_dir / trialdir.METRICS, metrics)
    if evals is not None:
        write_jsonl(trial_dir / trialdir.EVALS, evals)
    if status is not None:
        (trial_dir / trialdir.STATUS).write_text(json.dumps({"trial_id": params["trial_id"], **status}),
                                               encoding="utf-8")
    if provenance is not None:
        (trial_dir / trialdir.PROVENANCE).write_text(json.dumps(provenance), encoding="utf-8")
    return trial_dir


def provenance(**overrides: Any) -> dict[str, Any]:
    """A provenance.json in the runner's schema with fixed made-up values; ``overrides`` replace keys
    (``packages`` entries are merged)."""
    base: dict[str, Any] = {
        "stalebench": "0.1.0", "git_commit": "a" * 40, "git_dirty": False,
        "packages": {"torch": "2.5.1", "transformers": "4.46.0", "ray": "2.40.0", "mlflow": "2.18.0",
                     "vllm": None, "deepspeed": None, "numpy": "2.1.3"},
        "python": "3.11.7", "torch_threads": 2, "cpu": "x86_64", "gpu": None, "host": "node-1",
        "base_model": {"name": "Qwen/Qwen3-0.6B", "sha256": "b" * 64}, "eval_set_sha256": "c" * 64,
        "config_sha256": "d" * 64, "started_utc": "2026-11-30T10:00:00Z",
    }
    packages = {**base["packages"], **overrides.pop("packages", {})}
    return {**base, **overrides, "packages": packages}


EVAL_SIZE = 500  # problems per evaluation, as the v1 task's default eval_size


def curves(rng: np.random.Generator, delay: int, steps: int, eval_every: int, collapse: bool,
           skill: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Metrics rows (one per step 1..steps) and eval rows (step 0 and every ``eval_every`` steps)."""
    t = np.arange(1, steps + 1)
    plateau = 0.25 + 0.5 * skill / (1.0 + delay / 16.0)
    reward = plateau - (plateau - 0.2) * np.exp(-t / (steps / 5)) + rng.normal(0, 0.02, steps)
    entropy = 1.2 * np.exp(-t / steps) + rng.normal(0, 0.01, steps)
    if collapse:
        fall = t > steps // 2
        reward[fall] *= 0.2
        entropy[fall] *= 0.1
    stale = np.minimum(t - 1, delay).astype(float)
    cols = {"train/reward_mean": reward, "loss/value": rng.normal(0, 0.1, steps), "policy/entropy": entropy,
            "stale/mean": stale, "stale/max": stale}
    cols.update({k: rng.random(steps) for k in METRIC_NAMES if k not in cols})
    names = list(cols)
    table = np.column_stack([cols[k] for k in names]).round(5).tolist()
    metrics = [{"step": int(s), **dict(zip(names, row))} for s, row in zip(t, table)]
    eval_steps = np.arange(0, steps + 1, eval_every)
    acc = np.interp(eval_steps, np.r_[0, t], np.r_[0.23, reward]) + rng.normal(0, 0.01, eval_steps.size)
    acc = np.clip(acc.round(4), 0, 1)
    evals = [{"step": int(s), "eval/acc": float(a), "eval/reward_mean": float(a), "eval/n": EVAL_SIZE}
             for s, a in zip(eval_steps, acc)]
    return metrics, evals


def write_suite(root: Path, name: str, algorithms: tuple[str, ...], delays: tuple[int, ...],
                seeds: tuple[int, ...], steps: int = 40, eval_every: int = 5, eps: tuple[float, ...] = (0.2,),
                group_sizes: tuple[int, ...] = (8,), collapsing: tuple[str, ...] = ("grpo",),
                collapse_delay: int | None = None, suite_extra: dict[str, Any] | None = None,
                with_provenance: bool = False) -> Path:
    """Write ``root/<dir>`` with suite.yaml and one completed trial per grid point and seed.

    The directory is named from ``name`` made filesystem-safe. Returns the suite directory.
    """
    suite_dir = root / (name if "/" not in name and not name.startswith(".") else "suite")
    suite_dir.mkdir(parents=True, exist_ok=True)
    grid = {"algorithm": list(algorithms), "delay": list(delays), "eps": list(eps),
            "group_size": list(group_sizes)}
    suite = {"suite": name, "version": 1, "base": {}, "grid": grid, "seeds": list(seeds), **(suite_extra or {})}
    trialdir.suite_file(suite_dir).write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    rng = np.random.default_rng(0)
    for algo, delay, e, g, seed in product(algorithms, delays, eps, group_sizes, seeds):
        params = {"trial_id": f"{algo}-d{delay}-e{e}-g{g}-s{seed}", "algorithm": algo, "delay": delay,
                  "eps": e, "group_size": g, "seed": seed}
        collapse = collapse_delay is not None and algo in collapsing and delay >= collapse_delay
        skill = 0.6 + 0.4 * algorithms.index(algo) / max(len(algorithms) - 1, 1)
        metrics, evals = curves(rng, delay, steps, eval_every, collapse, skill)
        write_trial(suite_dir, params, metrics, evals,
                    {"status": "completed", "step": steps, "error": None, "diverged_step": None},
                    provenance() if with_provenance else None)
    return suite_dir
