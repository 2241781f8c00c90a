"""The learnability probe of `stalebench build-base`: does on-policy RL visibly learn from a candidate base?

A candidate base (a warm start, harness/bases/models.py) is trained with on-policy grpo — delay 0, one update per
batch, the benchmark's batch shape — for `probe_steps` steps on each of `probe_seeds` seeds, one after
another in this process, with the ordinary trainer (harness/trial/trainer.py; model.forward: the recipe's
`probe_forward`, transformers by default; sampling temperature `probe_temperature`, 1 by default). A warm
start already saved beside its destination is probed again rather than rebuilt (`saved_candidate`: a build
stopped during its probe, or the same weights under another probe rule, recorded as a new line). It is
frozen only if the probe meets the recipe's acceptance rule,
fixed before any probe runs:

1. gain: mean over seeds of (final held-out greedy accuracy − the base's) ≥ `probe_min_gain`, on the
   task's validation split where it has one (`probe_split`), else its test split;
2. seed SD: the sample standard deviation of the seeds' final accuracies ≤ `probe_max_seed_sd`;
3. signal: the fraction of prompt groups whose G rewards are all equal (zero advantage, no gradient),
   averaged over the probe's steps and seeds, ≤ `probe_max_zero_adv`.

Whatever the verdict, the probe's record (curves, per-seed numbers, the base's policy entropy at step 1,
mean response length) goes into the candidate's manifest and into harness/bases/candidates.jsonl.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.bases import MANIFEST, BaseModelError, sha256_file
from harness.config.run import build_run_config
from harness.bases.models import CANDIDATES, record_candidate, save_base, warm_start_base
from harness.tasks import make_task
from harness.trial.trainer import TrainerRun

PROBE_ESTIMATOR = "grpo"
PROBE_PROMPTS, PROBE_GROUP = 8, 16           # the v2 batch shape (suites/reference-v2.yaml): 128 responses,
                                             # G = 16 so that fewer groups are all-wrong or all-right


class _Recorder:
    """A run log that keeps the probe's rows in memory (no trial directory, no checkpoint)."""

    def __init__(self, trial_dir: Path):
        self.dir = Path(trial_dir)
        self.steps: list[dict[str, Any]] = []
        self.evals: list[dict[str, Any]] = []

    def metrics(self, step: int, row: dict[str, Any]) -> None:
        self.steps.append({"step": step, **row})

    def eval(self, step: int, row: dict[str, Any]) -> None:
        self.evals.append({"step": step, **row})

    def side(self, name: str, step: int, row: dict[str, Any]) -> None:
        pass                                   # the probe keeps no trace or histogram files


def probe_config(model_dir: Path, recipe: Any, seed: int, max_new_tokens: int):
    """The RunConfig of one probe run of the candidate at `model_dir` (`recipe`: a models.BaseRecipe)."""
    return build_run_config({
        "algorithm": PROBE_ESTIMATOR, "delay": 0, "seed": seed, "group_size": PROBE_GROUP,
        "model": {"kind": "path", "path": str(model_dir), "forward": recipe.probe_forward},
        "task": {"name": recipe.task, "eval_size": recipe.eval_size},
        "train": {"steps": recipe.probe_steps, "prompts_per_step": PROBE_PROMPTS, "lr": recipe.probe_lr,
                  "max_new_tokens": max_new_tokens, "checkpoint_every": 0, "threads": 1,
                  "temperature": recipe.probe_temperature},
        "eval": {"every_steps": recipe.probe_eval_every, "split": probe_split(recipe.task)}})


def probe_split(task: str) -> str:
    """The split the probe scores on: the task's validation split where it has one (cumsum-long), so that
    accepting a base never reads the test set; else the test split (v1's and v2's bases)."""
    return "validation" if "validation" in getattr(make_task(task), "splits", ()) else "test"


def run_probe(model_dir: Path, recipe: Any, max_new_tokens: int, say=print) -> dict[str, Any]:
    """Probe the candidate at `model_dir` on seeds 0..probe_seeds-1; returns the probe record with its verdict."""
    runs = []
    for seed in range(recipe.probe_seeds):
        log = _Recorder(Path(model_dir) / f"probe-seed{seed}")
        outcome = TrainerRun(probe_config(model_dir, recipe, seed, max_new_tokens), log).run()
        curve = [[r["step"], round(r["eval/acc"], 4)] for r in log.evals]
        steps = log.steps
        runs.append({"seed": seed, "status": outcome.status, "curve": curve,
                     "zero_adv_frac": statistics.mean(r["rollout/zero_adv_frac"] for r in steps),
                     "len_mean": statistics.mean(r["rollout/len_mean"] for r in steps),
                     "entropy_step1": steps[0]["policy/entropy"],
                     "step_s": statistics.median(r["perf/step_s"] for r in steps)})
        say(f"probe seed {seed}: {outcome.status}, eval acc {curve[0][1]:.3f} -> {curve[-1][1]:.3f} in "
            f"{curve[-1][0]} steps, zero-advantage groups {runs[-1]['zero_adv_frac']:.2f}, "
            f"{runs[-1]['step_s']:.3f} s/step")
    return judge(runs, recipe)


def judge(runs: list[dict[str, Any]], recipe: Any) -> dict[str, Any]:
    """The acceptance rule over the probe's runs: the record, with `accepted` and the failed `reasons`."""
    start, final = [r["curve"][0][1] for r in runs], [r["curve"][-1][1] for r in runs]
    gain = statistics.mean(f - s for s, f in zip(start, final))
    sd = statistics.stdev(final) if len(final) > 1 else 0.0
    zero_adv = statistics.mean(r["zero_adv_frac"] for r in runs)
    reasons = []
    if any(r["status"] != "completed" for r in runs):
        reasons.append("a probe run did not complete: " + ", ".join(f"seed {r['seed']} {r['status']}" for r in runs))
    if not gain >= recipe.probe_min_gain:
        reasons.append(f"gain {gain:.3f} < {recipe.probe_min_gain}")
    if not sd <= recipe.probe_max_seed_sd:
        reasons.append(f"seed SD {sd:.3f} > {recipe.probe_max_seed_sd}")
    if not zero_adv <= recipe.probe_max_zero_adv:
        reasons.append(f"zero-advantage groups {zero_adv:.3f} > {recipe.probe_max_zero_adv}")
    rule = {"estimator": PROBE_ESTIMATOR, "split": probe_split(recipe.task), "delay": 0,
            "prompts_per_step": PROBE_PROMPTS, "group_size": PROBE_GROUP,
            "steps": recipe.probe_steps, "lr": recipe.probe_lr, "temperature": recipe.probe_temperature,
            "seeds": recipe.probe_seeds,
            "min_gain": recipe.probe_min_gain, "max_seed_sd": recipe.probe_max_seed_sd,
            "max_zero_adv": recipe.probe_max_zero_adv}
    return {"rule": rule, "accepted": not reasons, "reasons": reasons, "gain": round(gain, 4),
            "final_acc_mean": round(statistics.mean(final), 4), "seed_sd": round(sd, 4),
            "zero_adv_frac": round(zero_adv, 4), "len_mean": round(statistics.mean(r["len_mean"] for r in runs), 3),
            "entropy_step1": round(statistics.mean(r["entropy_step1"] for r in runs), 4),
            "step_s": round(statistics.median(r["step_s"] for r in runs), 4), "runs": runs}


def saved_candidate(candidate: Path, recipe: Any) -> dict | None:
    """The manifest of the candidate saved at `candidate` when it was warm-started as this recipe warm-starts
    (every setting but the probe's) and its files are intact (a build stopped during its probe, or a warm start
    probed again under another probe rule), else None. The returned manifest carries this recipe."""
    try:
        manifest = json.loads((candidate / MANIFEST).read_text())
        intact = all(sha256_file(candidate / name) == digest for name, digest in manifest["files"].items())
        same = _warm_start(manifest["recipe"]) == _warm_start(asdict(recipe))
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None
    return {**manifest, "recipe": asdict(recipe)} if intact and same else None


def _warm_start(recipe: dict) -> dict:
    """The settings of a recipe that make its weights: all but the probe's."""
    return {k: v for k, v in recipe.items() if not k.startswith("probe_")}


def build_probed_base(recipe: Any, out: Path) -> dict:
    """Build candidate base `recipe` (a models.BaseRecipe with probe_seeds > 0), save it beside `out`, probe its
    learnability, and move it to `out` only if the probe is accepted; returns the manifest. A candidate this
    recipe already warm-started and saved (`saved_candidate`) is probed again instead of rebuilt."""
    candidate = out.with_name(f".candidate-{out.name}")
    manifest = saved_candidate(candidate, recipe)
    if manifest is None:
        model, tokenizer, steps, acc, start = warm_start_base(recipe, out)
        shutil.rmtree(candidate, ignore_errors=True)
        manifest = save_base(model, tokenizer, recipe, candidate, steps, acc, time.time() - start)
    else:
        start = time.time() - manifest["build_s"]
    max_new_tokens = getattr(make_task(recipe.task, eval_size=recipe.eval_size), "max_response_tokens", 8)
    probe = run_probe(candidate, recipe, max_new_tokens)
    summary = {k: manifest[k] for k in ("sha256", "warmup_steps", "validation_acc", "eval_acc",
                                        "eval_acc_by_answer_len")}
    record_candidate(recipe, {**summary, "probe": {k: v for k, v in probe.items() if k != "runs"}}, probe["reasons"])
    if not probe["accepted"]:
        shutil.rmtree(candidate, ignore_errors=True)
        raise BaseModelError(f"build-base: candidate {recipe.name!r} rejected by its learnability probe: "
                             f"{'; '.join(probe['reasons'])} (recorded in {CANDIDATES.name}); try another warmup_seed")
    manifest = {**manifest, "probe": probe, "build_s": round(time.time() - start, 1)}
    (candidate / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(candidate, out)
    return manifest
