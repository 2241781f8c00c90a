"""`stalebench run --dry-run`: what a run would do — the trials, the axes, and a cost estimate.

The estimate is steps × seconds per step ÷ parallel trials. Seconds per step come from this suite's own
finished steps when results exist (median `perf/step_s`), else from the measured cost of the tiny base's
task (benchmarks/README.md), else it is unknown. Tiny bases add their measured evaluation time. For a GPU
suite (a local model on `resources.gpu` GPUs) the line after is a projection of GPU-hours from arithmetic
(gpu_projection), not a measurement, and so is the memory per GPU after it (suite/memory.py), which `check`
and the dry run refuse in one line when it exceeds resources.gpu_memory_gib.
"""
from __future__ import annotations

import functools
import os
import statistics
import tempfile
from pathlib import Path

from harness.config.run import EvalConfig, TaskConfig
from harness.errors import ConfigError
from harness.registry import FORWARDS, MODELS
from harness.store import campaign, trialdir
from harness.suite import memory, tuning
from harness.suite.session import check_tuned, reuse
from harness.trial import numerics
from harness.config.expand import (Suite, Trial, expand, select_trials, trial_count, tune_spec, tune_split,
                                   tune_trial)

# s per 128-response step and per held-out evaluation inside a suite on the 2-core machine, transformers forward,
# native float path; the pinned path's cost over the native one; the extra cost of each further update per batch
# (a forward's own speed-up or measured figures: rollout/base.py Forward). Where each figure was measured:
# benchmarks/README.md, "Projection constants (plan.py)".
TINY_STEP_S = {"addrev": 0.112, "cumsum": 0.371}
TINY_EVAL_S = {"addrev": 0.35, "cumsum": 3.63}
EVAL_FIGURE_PROBLEMS = {"addrev": 500, "cumsum": 2500, "cumsum-long": 2500}   # problems per evaluation that these
# figures and a forward's own eval_s were measured on; an evaluation of n problems costs n / this of the figure
TINY_RESPONSES = 128
PINNED_FACTOR = 1.53
EXTRA_UPDATE = 0.73                # a step with p full passes per batch costs 1 + EXTRA_UPDATE (p - 1) of one with p = 1
EXTRA_MINIBATCHES = 0.33           # and, split into m > 1 minibatches, 1 + EXTRA_MINIBATCHES of that (the proximal
                                   # log-probs, m - 1 more optimizer steps; measured at m = 4, benchmarks/README.md)
# GPU projection: FLOPs per token ~ 2N (rollout forward) + 6N per full pass (training forward and backward), + 2N
# for the proximal policy's forward when a batch takes several updates, N parameters (Kaplan et al. 2020,
# arXiv 2001.08361, C ~ 6N per training token); at an assumed share of one H100's dense
# bf16 peak (989 TFLOP/s, NVIDIA's H100 SXM datasheet). Token counts are upper bounds (every response at
# max_new_tokens), so the projection is an upper bound on arithmetic and silent on communication and idle time.
GPU_PEAK_FLOPS, GPU_ASSUMED_MFU, PROMPT_TOKENS_ASSUMED = 989e12, 0.25, 256


def dry_run(suite: Suite, only: list[str], results_root: Path, trials: list[Trial] | None = None) -> str:
    """The dry run's text; a ConfigError (one line, with the projection) when a GPU suite exceeds its card."""
    trials = select_trials(expand(suite) if trials is None else trials, only)
    check_memory(suite, trials)
    suite_dir = Path(results_root) / suite.name
    reused = reuse(suite, trials, suite_dir, move=False)     # landed in the campaigns of `reuse:`, same config
    done = finished(suite, trials, suite_dir, also={i for taken in reused.values() for i in taken})
    lines = [f"suite {suite.name}: {len(trials)} trials ({trial_count(suite)} grid points x seeds before removing "
             f"duplicates), {len(done)} already finished"]
    try:
        check_tuned(suite)
    except ConfigError as refusal:
        lines.append(f"  a run now refuses: {refusal}")
    for other, taken in reused.items():
        where = campaign.reuse_where(other)
        none = "" if where.is_file() or campaign.landed(where) else " (it holds no landed table trial yet)"
        lines.append(f"  reuse: {_count(len(taken), 'trial')} of {where}{'' if where.is_file() else '/'} with the "
                     f"same config{none}")
    for key, values in suite.grid.items():
        lines.append(f"  {key}: {', '.join(map(str, values))}")
    lines.append(f"  seeds: {', '.join(map(str, suite.seeds))}")
    shared = [t for t in trials if "stands_for" in t.params]
    skipped_eps = [t for t in trials if "eps" in t.params.get("ignored", []) and "stands_for" not in t.params]
    if shared:
        lines.append(f"  {len(shared)} shared on-policy trials (delay 0) stand for every estimator")
    if skipped_eps:
        lines.append(f"  {len(skipped_eps)} trials of estimators that ignore eps run once, not per eps value")
    for t in trials:
        lines.append(f"  {'done ' if t in done else 'run  '}{t.trial_id}")
    return "\n".join(lines + cost_lines(suite, trials, [t for t in trials if t not in done], suite_dir))


def tune_dry_run(suite: Suite, results_root: Path) -> str:
    """`stalebench tune --dry-run`: the tuning trials (values x seeds x estimators, and the most a grid's edge
    extensions can add) and their cost, projected as `run --dry-run` projects a suite's."""
    spec = tune_spec(suite)
    seeds, split = spec.tune_seeds(suite), tune_split(suite)
    suite_dir = trialdir.tune_dir(Path(results_root) / suite.name)
    grid = spec.method == "grid"
    values = spec.grid_values() if grid else [spec.low] * spec.trials_per_algorithm   # TPE's are not known yet
    trials = [tune_trial(suite, a, v, s, split) for a in suite.algorithms for v in values for s in seeds]
    rounds = spec.max_extend + spec.max_refine                # beyond an edge, and midpoints at a cliff
    extra = len(suite.algorithms) * rounds * len(seeds) if grid else 0
    done = finished(suite, trials, suite_dir, tuning=True) if grid else []
    todo, left, added = _grid_left(suite, spec, seeds, split, suite_dir) if grid else (trials, 0, 0)
    each = f"{_count(len(seeds), 'seed')} x {_count(len(suite.algorithms), 'estimator')}"
    lines = [f"tune {suite.name}: {_count(len(values), 'value')} x {each} = {len(trials)} trials"
             + (f", up to {extra} more if every best value is at an edge ({spec.max_extend} extensions"
                + (f" and {spec.max_refine} cliff midpoints" if spec.max_refine else "") + f" x {each})"
                if extra else "") + (f", {len(done)} already finished" if grid else "")
             + (f" ({added} of the added ones too)" if added else ""),
             f"  {spec.param}: " + (", ".join(f"{v:g}" for v in values) if grid else
                                    f"{spec.trials_per_algorithm} TPE proposals in [{spec.low:g}, {spec.high:g}]"),
             f"  seeds: {', '.join(map(str, seeds))}; delay {spec.tune_delay(suite)}; split: {split}"]
    lines += cost_lines(suite, trials, todo, suite_dir)
    if left:                                # an added trial costs what any of the grid's does
        lines += [line.replace("cost:", f"cost with every extension ({left} more at most):", 1) for line in
                  cost_lines(suite, trials, todo + trials[:1] * left, suite_dir)[:1]]
    if grid and not todo:
        lines.append("  the tuning is complete: every estimator's grid, its edge extensions and cliff midpoints "
                     "have their results")
    return "\n".join(lines)


class _Unfinished(Exception):
    """A grid round some of whose trials have no result yet (args[0]: those trials)."""


def _grid_left(suite: Suite, spec, seeds: list[int], split: str, tune_dir: Path) -> tuple[list[Trial], int, int]:
    """Each estimator's grid replayed (tuning.grid_rounds) on the results there are, here or landed in the
    suite's campaign: the trials of its first round without a result (what `stalebench tune` runs next), the
    most trials the rounds after that one may add (edge extensions and cliff midpoints), and the number of
    added trials already finished."""
    from harness.suite.status import last_eval

    with tempfile.TemporaryDirectory(prefix="stalebench-dry-") as tmp:
        if suite.campaign:                  # the landed trials this machine lacks, read as a run restores them
            dest = campaign.campaign_dir(suite.name, tuning=True)
            lacking = [i for i in campaign.landed(dest)
                       if trialdir.read_status(tune_dir / i).get("status") not in trialdir.FINAL]
            campaign.take(dest, Path(tmp), lambda trial_dir: True, only=lacking)
        todo, left, added = [], 0, 0
        for algorithm in suite.algorithms:
            rounds = []

            def run(values: list[float]) -> list[dict]:
                trials = [tune_trial(suite, algorithm, v, s, split) for v in values for s in seeds]
                rounds.append(trials)
                where = {t.trial_id: next((d for d in (tune_dir / t.trial_id, Path(tmp) / t.trial_id)
                                           if trialdir.read_status(d).get("status") in trialdir.FINAL), None)
                         for t in trials}
                nonlocal added
                added += sum(d is not None for d in where.values()) if len(rounds) > 1 else 0
                if None in where.values():
                    raise _Unfinished([t for t in trials if where[t.trial_id] is None])
                return [tuning.trial_row(spec, t, trialdir.read_status(where[t.trial_id]).get("status"),
                                         last_eval(where[t.trial_id], spec.metric)) for t in trials]

            try:
                tuning.grid_rounds(spec, run)
            except _Unfinished as stop:
                todo += stop.args[0]
                left += (spec.max_extend + spec.max_refine - (len(rounds) - 1)) * len(seeds)
    return todo, left, added


def finished(suite: Suite, trials: list[Trial], suite_dir: Path, tuning: bool = False,
             also: set[str] = frozenset()) -> list[Trial]:
    """The trials with a result: in ``suite_dir``, or (a campaign suite) landed in campaigns/, which a run
    restores before anything else, so a fresh clone's dry run counts what earlier machines finished; and the
    ids ``also`` (those a run would take from the campaigns of `reuse:`)."""
    landed = set(campaign.landed(campaign.campaign_dir(suite.name, tuning))) if suite.campaign else set()
    landed |= also
    return [t for t in trials if t.trial_id in landed
            or trialdir.read_status(suite_dir / t.trial_id).get("status") in trialdir.FINAL]


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def cost_lines(suite: Suite, trials: list[Trial], todo: list[Trial], trial_root: Path) -> list[str]:
    """The cost of running `todo` (of `trials`, whose finished steps in `trial_root` measure a step): the
    training and evaluation minutes, and for a GPU suite the projected GPU-hours."""
    lines = []
    steps, step_s, source, parallel, evals, eval_s = _projection(suite, trials, todo, trial_root)
    if step_s is None:
        lines.append(f"cost: {steps} steps to run; seconds per step unknown for this model (run a few steps first)")
    else:
        train_min = steps * step_s / parallel / 60
        lines.append(f"cost: {steps} steps x {step_s:.3f} s/step ({source}) / {parallel} parallel trials "
                     f"~ {train_min:.0f} min of training" + (
                         f" + {evals} evaluations x {eval_s:.1f} s / {parallel} ~ {evals * eval_s / parallel / 60:.0f} min "
                         f"of evaluation = {train_min + evals * eval_s / parallel / 60:.0f} min" if eval_s else
                         " (evaluation not included)"))
    if todo and _model(todo[0]).gpu_projection and suite.resources.gpu:
        lines.append(gpu_projection(todo, suite.resources.gpu))
    return lines + memory.suite_lines(suite, trials)[0]


def check_memory(suite: Suite, trials: list[Trial]) -> list[str]:
    """The memory projection's lines of a GPU suite (suite/memory.py); a ConfigError when it exceeds the card."""
    lines, refusal = memory.suite_lines(suite, trials)
    if refusal:
        raise ConfigError(refusal)
    return lines


def projected_seconds(suite: Suite, trials: list[Trial], todo: list[Trial], trial_root: Path,
                      one_at_a_time: bool = False) -> float | None:
    """The wall time `cost_lines` projects for running `todo` (training and, for tiny bases, evaluation),
    ``one_at_a_time`` for a run in one process; None when seconds per step are unknown. A running suite's
    progress line counts its ETA down from it."""
    steps, step_s, _, parallel, evals, eval_s = _projection(suite, trials, todo, trial_root)
    return None if step_s is None else (steps * step_s + evals * eval_s) / (1 if one_at_a_time else parallel)


def _projection(suite: Suite, trials: list[Trial], todo: list[Trial], trial_root: Path):
    """(steps, s per step or None, where that came from, parallel trials, evaluations, s per evaluation)."""
    steps = sum(t.config.train.steps for t in todo)
    processes = max(t.config.train.workers for t in trials)           # per trial (train.workers)
    parallel = suite.resources.parallel_trials(os.cpu_count() or 1, workers=processes)
    step_s, source = _step_seconds(trial_root, trials)
    per_trial = [t.config.train.steps // t.config.eval.every_steps + 1 for t in todo]
    evals = sum(per_trial)
    task = trials[0].config.task.name
    eval_s = TINY_EVAL_S.get(task, 0.0) * _pinned_factor() if _model(trials[0]).measured else 0.0
    if (own := _own_figures(trials)) is not None:
        eval_s = own.eval_s[task]
    if eval_s and evals and (figure := EVAL_FIGURE_PROBLEMS.get(task)):   # the figure's size -> the mean size
        problems = sum(n * (_eval_size(t.config.task, t.config.eval) if t.config.task.name == task else figure)
                       for n, t in zip(per_trial, todo))                  # evaluated (a validation split is smaller)
        eval_s *= problems / evals / figure
    return steps, step_s, source, parallel, evals, eval_s


@functools.lru_cache(maxsize=64)
def _eval_size(task: TaskConfig, evaluation: EvalConfig) -> int:
    """How many problems one evaluation of a trial scores (the trainer's EvalConfig.problems)."""
    return len(evaluation.problems(task, task.build()))


def model_parameters(path: str) -> tuple[float | None, str]:
    """N of a local model: from its config.json when present, else from a size in its name ("Qwen3-1.7B")."""
    import json
    import re
    config = Path(path) / "config.json"
    if config.is_file():
        c = json.loads(config.read_text())
        h, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
        return float(layers * (4 * h * h + 3 * h * inter) + vocab * h), "config.json"
    match = re.search(r"(\d+(?:\.\d+)?)B\b", Path(path).name)
    return (float(match.group(1)) * 1e9, f"the size in its name {Path(path).name!r}") if match else (None, "")


def gpu_projection(trials, gpus_per_trial: float) -> str:
    """Projected GPU-hours of `trials` (local models on GPUs) from token counts and FLOPs; see the constants."""
    n, where = model_parameters(trials[0].config.model.path)
    if n is None:
        return "gpu: GPU-hours unknown (the model's size is neither in config.json nor in its directory name)"
    flops = sum(t.config.train.steps * t.config.train.prompts_per_step * t.config.group_size
                * (PROMPT_TOKENS_ASSUMED + t.config.train.max_new_tokens) * _flops_per_token(t.config.train) * n
                for t in trials)
    hours = flops / (GPU_PEAK_FLOPS * GPU_ASSUMED_MFU) / 3600
    per_token = sorted({_flops_per_token(t.config.train) for t in trials})
    return (f"gpu: projected <= {hours:,.0f} GPU-hours of arithmetic ({n / 1e9:.2f}B parameters from {where}; "
            f"{'/'.join(map(str, per_token))}N FLOPs "
            f"per token, <= {PROMPT_TOKENS_ASSUMED} prompt + max_new_tokens response tokens, "
            f"{GPU_ASSUMED_MFU:.0%} of {GPU_PEAK_FLOPS / 1e12:.0f} TFLOP/s bf16); {gpus_per_trial:g} GPU(s) per trial "
            f"-> {hours / gpus_per_trial:,.0f} h of wall time if trials run one at a time")


def _flops_per_token(train) -> int:
    """FLOPs per token over N: the rollout's forward, a forward and backward per full pass, and the proximal
    policy's forward when the batch takes several updates (passes x minibatches > 1)."""
    return 2 + 6 * train.passes + 2 * (train.updates_per_batch > 1)


def _step_seconds(suite_dir: Path, trials) -> tuple[float | None, str]:
    measured = [r["perf/step_s"] for t in trials[:50]
                for r in trialdir.read_metrics(suite_dir / t.trial_id) if "perf/step_s" in r]
    if measured:
        return statistics.median(measured), f"median of {len(measured)} measured steps of this suite"
    tasks = {t.config.task.name for t in trials}
    if (own := _own_figures(trials)) is not None:
        task = next(iter(tasks))
        step_s = statistics.mean(own.step_s[task] / TINY_RESPONSES * t.config.train.prompts_per_step
                                 * t.config.group_size * _updates_factor(t.config.train) for t in trials)
        return step_s, (f"the measured {own.step_s[task]} s per {TINY_RESPONSES}-response {task} step of one "
                        f"update on engine {own.engine_version} (2-core AMD EPYC, two trials side by side), scaled "
                        f"to this suite's responses and updates per step")
    if all(_model(t).measured for t in trials) and len(tasks) == 1 and next(iter(tasks)) in TINY_STEP_S:
        task = next(iter(tasks))
        responses = statistics.mean(t.config.train.prompts_per_step * t.config.group_size for t in trials)
        speedups = {t.config.forward.name: FORWARDS.get(t.config.forward.name).speedup.get(task, 1.0) for t in trials}
        pinned = _pinned_factor()
        scale = pinned / TINY_RESPONSES
        step_s = statistics.mean(TINY_STEP_S[task] * scale / speedups[t.config.forward.name]
                                 * t.config.train.prompts_per_step * t.config.group_size
                                 * _updates_factor(t.config.train) for t in trials)
        layouts = sorted({(t.config.train.passes, t.config.train.minibatches) for t in trials})
        return (step_s, f"the tiny CPU model's {TINY_STEP_S[task]} s per {TINY_RESPONSES}-response {task} step "
                        f"(transformers forward, native float path, idle 2-core machine)"
                        + "".join(f" x {1 / x:.2f} for the {name} forward" for name, x in sorted(speedups.items())
                                  if x != 1.0)
                        + (f" x {PINNED_FACTOR} for the pinned float path" if pinned != 1.0 else "")
                        + (f" x (1 + {EXTRA_UPDATE} (p - 1)) (1 + {EXTRA_MINIBATCHES} [m > 1]) for p passes x m "
                           f"minibatches = {', '.join(f'{p}x{m}' for p, m in layouts)}" if layouts != [(1, 1)] else "")
                        + f", scaled to this suite's {responses:.0f} responses per step")
    return None, ""


def _model(trial):
    """The trial's kind of starting model (bases/sources.py): what the dry run may cost it by."""
    return MODELS.get(trial.config.model.kind, "model.kind")


def _own_figures(trials):
    """The forward whose own measured figures (Forward.step_s, eval_s) cost the trials: every trial runs a tiny
    base with it on one task it has figures for (lean3 on cumsum-long); else None."""
    tasks = {t.config.task.name for t in trials}
    forwards = {t.config.forward.name for t in trials}
    if len(forwards) != 1 or len(tasks) != 1 or not all(_model(t).measured for t in trials):
        return None
    forward = FORWARDS.get(forwards.pop())
    return forward if next(iter(tasks)) in forward.step_s else None


def _updates_factor(train) -> float:
    """A step's cost with train.passes and train.minibatches relative to one update on the whole batch."""
    return (1 + EXTRA_UPDATE * (train.passes - 1)) * (1 + EXTRA_MINIBATCHES * (train.minibatches > 1))


def _pinned_factor() -> float:
    """How much slower than the native path the tiny model's measured figures run on this process's float path."""
    return PINNED_FACTOR if numerics.rule() == "pinned" else 1.0
