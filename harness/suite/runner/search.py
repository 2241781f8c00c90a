"""`stalebench tune`: a search of one setting per estimator with the same budget for each, run through Ray
Tune and written as suite `overrides:` (tuned-overrides.yaml). Two methods (`tune.method`):

- tpe (the default): Optuna's TPE proposes `trials_per_algorithm` values; a value runs on every tuning seed,
  one after another inside its Tune trial, and Optuna is told their mean.
- grid: `points` log-spaced values from low to high, every value on every tuning seed (one Tune trial each);
  where an estimator's best value is the lowest or highest run, the next point beyond that edge is added,
  at most `max_extend` times (harness/suite/tuning.py, which also scores values and writes the file).

Tuning trials evaluate on the task's validation split where it has one (`tune.split`, config.expand.tune_split).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import ray
from ray import tune

from harness.store import trialdir
from harness.config.suite import Suite, TuneSpec
from harness.suite import tuning
from harness.store.campaign import campaign_dir
from harness.suite.session import SuiteSession
from harness.suite.status import last_eval
from harness.config.expand import Trial, tune_spec, tune_split, tune_trial
from harness.store.tracking import Target, close_suite_run
from harness.suite.console import Say, printer
from harness.suite.runner.grid import mirrors, open_mlflow, tracking_uri
from harness.suite.runner.ray_tune import check_fits, error_reason, fit, ray_session, run_in_worker, storage_path
from harness.suite.runner.ray_train import alive_nodes, concurrent_trials, trial_resources
from harness.trial.lifecycle import check_identity


def tune_suite(suite: Suite, results_root: Path = Path("results"), address: str | None = None,
               progress: bool = True) -> Path:
    """Search `tune.param` for every estimator of the suite's grid with the same budget, at `tune.delay`
    (default: the grid's largest delay, where the estimators differ), the first value of every other grid
    axis, on the tuning seeds (never a seed the suite reports) and the split of tune_split; write the best
    value per estimator as suite `overrides:` to results/<suite>/tuned-overrides.yaml and return that path.

    Trials live in results/<suite>/tune/<estimator>-<param><value>[-seed<seed>]; an interrupted search starts
    again (TPE's seeded sampler proposes the same values first, a grid has fixed values, and a finished trial
    is not rerun; a grid's trial whose config changed is rerun, its old results kept under tune/.superseded/)."""
    spec = tune_spec(suite)
    say = printer(progress)
    algorithms = suite.algorithms
    seeds, split = spec.tune_seeds(suite), tune_split(suite)
    examples = [tune_trial(suite, a, spec.low, seeds[0], split) for a in algorithms]   # one per estimator
    suite_dir = SuiteSession.open(suite, examples, Path(results_root), on_change=None).suite_dir
    header = _header(suite, spec, seeds, split, examples[0].config.task.name)
    say(_plan_line(suite, spec, seeds) + f" -> {trialdir.tune_dir(suite_dir)}")
    say(header[-1].lstrip("# "))                   # the split tuning reads
    uri = tracking_uri(Path(results_root))
    results: dict[str, list[dict[str, Any]]] = {}
    per_algorithm = (spec.points if spec.method == "grid" else spec.trials_per_algorithm) * len(seeds)
    with ray_session(address, say):
        check_fits(suite.resources, examples[0].config.train.workers)
        target = open_mlflow(suite, uri, Path(results_root), "tune", len(algorithms) * per_algorithm)
        trialdir.tune_dir(suite_dir).mkdir(parents=True, exist_ok=True)
        trialdir.write_atomic(trialdir.tune_trials(suite_dir), "")     # this search's trials, one row each
        search = _grid if spec.method == "grid" else _search
        try:
            for algorithm in algorithms:
                results[algorithm] = search(suite, spec, algorithm, seeds, split, suite_dir,
                                            mirrors(suite, target, Path(results_root)), say)
        finally:
            statuses = [r["status"] for rows in results.values() for r in rows]
            close_suite_run(target.tracking_uri, target.parent_run_id, {s: statuses.count(s) for s in set(statuses)},
                            interrupted=len(results) < len(algorithms))
    return _write_overrides(suite, spec, results, suite_dir, header)


def _plan_line(suite: Suite, spec: TuneSpec, seeds: list[int]) -> str:
    """What the search will run, in one line."""
    on = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))} (objective: their mean)"
    if spec.method == "grid":
        values = ", ".join(f"{v:g}" for v in spec.grid_values())
        return (f"tuning {spec.param} on a log grid of {spec.points} values ({values}) for {', '.join(suite.algorithms)}, "
                f"each on {on}, up to {spec.max_extend} more beyond an edge where the best lies"
                + (f" and {spec.max_refine} midpoints where it falls by more than {spec.cliff:g} beside the best"
                   if spec.max_refine else "") + f", at delay {spec.tune_delay(suite)}")
    return (f"tuning {spec.param} in [{spec.low:g}, {spec.high:g}] for {', '.join(suite.algorithms)}: "
            f"{spec.trials_per_algorithm} trials each at delay {spec.tune_delay(suite)}"
            + (f", each value on {on}" if len(seeds) > 1 else ""))


def _header(suite: Suite, spec: TuneSpec, seeds: list[int], split: str, task: str) -> list[str]:
    """The comments of tuned-overrides.yaml that say how the values were tuned; the last one names the split."""
    objective = f"final {spec.metric} ({spec.mode})" + (", the mean over the seeds" if len(seeds) > 1 else "")
    seed_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"
    if spec.method == "grid":
        method = (f"# Grid through Ray Tune: {spec.points} log-spaced values in [{spec.low:g}, {spec.high:g}] (4 "
                  f"significant digits), each on every seed, then up to {spec.max_extend} more beyond an edge "
                  f"where an estimator's best value lies" + (f", then up to {spec.max_refine} midpoints where the "
                  f"objective falls by more than {spec.cliff:g} beside the best" if spec.max_refine else "")
                  + f"; delay {spec.tune_delay(suite)}, {seed_text}, objective: {objective}.")
    else:
        count = f"{spec.trials_per_algorithm} " + ("trials" if len(seeds) == 1 else "values, each on every seed,")
        method = (f"# Optuna TPE through Ray Tune, {count} per estimator, log-uniform in [{spec.low:g}, "
                  f"{spec.high:g}], delay {spec.tune_delay(suite)}, {seed_text}, objective: {objective}.")
    if split == "validation":
        where = f"# tuning reads the validation split of task {task} (never the test split a table reports)"
    elif spec.split == "test":
        where = f"# tuning reads the test split of task {task} (tune.split: test)"
    else:
        where = f"# tuning reads the test split: task {task} has no validation split"
    return [method, where]


def _search(suite: Suite, spec: TuneSpec, algorithm: str, seeds: list[int], split: str, suite_dir: Path,
            target: Target, say: Say) -> list[dict[str, Any]]:
    """One Tune experiment: Optuna's TPE proposes `trials_per_algorithm` values for one estimator."""
    import optuna
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)      # not 'A new study created in memory ...'
    res = suite.resources
    example = tune_trial(suite, algorithm, spec.low, seeds[0], split)     # every value's trial has its workers
    workers = example.config.train.workers
    cluster = ray.cluster_resources()
    fits = concurrent_trials(res, workers, alive_nodes()) if workers > 1 else \
        res.parallel_trials(cluster.get("CPU", 1), cluster.get("GPU", 0))
    concurrent = min(fits, spec.trials_per_algorithm)
    # TPE's default 10 random start-up trials would make a budget of 8 a random search.
    sampler = optuna.samplers.TPESampler(seed=spec.sampler_seed, n_startup_trials=max(2, spec.trials_per_algorithm // 2))
    searcher = ConcurrencyLimiter(OptunaSearch(metric="objective", mode=spec.mode, sampler=sampler), concurrent)
    tune_dir = trialdir.tune_dir(suite_dir)
    trainable = tune.with_resources(
        tune.with_parameters(_tune_trainable, suite=suite, spec=spec, algorithm=algorithm, seeds=seeds, split=split,
                             tune_dir=str(tune_dir), mirror=target, cwd=os.getcwd()),
        trial_resources(res, [example]))
    grid = tune.Tuner(
        trainable, param_space={"value": tune.loguniform(spec.low, spec.high)},
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=spec.trials_per_algorithm, reuse_actors=True),
        run_config=tune.RunConfig(name=f"{suite.name}-tune-{algorithm}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=storage_path(suite_dir), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=res.max_failures),
                                  callbacks=[_TuneEvents(algorithm, spec, say)])).fit()
    if any(r.error is None and not (r.metrics or {}).get("status") for r in grid):
        raise KeyboardInterrupt(f"tuning {algorithm} was interrupted")      # Ctrl+C: Tune stopped and returned
    trials = [tune_trial(suite, algorithm, float(r.config["value"]), seed, split) for r in grid for seed in seeds]
    return _record(spec, trials, suite_dir)


def _grid(suite: Suite, spec: TuneSpec, algorithm: str, seeds: list[int], split: str, suite_dir: Path,
          target: Target, say: Say) -> list[dict[str, Any]]:
    """The grid of one estimator (tuning.grid_rounds), each round one Tune experiment of values x seeds."""
    tune_dir = trialdir.tune_dir(suite_dir)

    def run(values: list[float]) -> list[dict[str, Any]]:
        trials = [tune_trial(suite, algorithm, v, s, split) for v in values for s in seeds]
        superseded = check_identity(trials, tune_dir, on_change="rerun-changed")
        if superseded:
            say(f"rerunning {len(superseded)} tuning trials whose config changed (old results in "
                f"{tune_dir / trialdir.SUPERSEDED})")
        todo = [t for t in trials if trialdir.read_status(tune_dir / t.trial_id).get("status") not in trialdir.FINAL]
        if todo:          # a finished trial (run here, or restored from a campaign) is read, never handed to Tune
            fit(suite, todo, tune_dir, target, say, storage_dir=suite_dir,       # a round's name: its first value
                name=f"{suite.name}-tune-{algorithm}-{values[0]:.4e}-{time.strftime('%Y%m%d-%H%M%S')}",
                land_to=campaign_dir(suite.name, tuning=True) if suite.campaign else None)
        if any(trialdir.read_status(tune_dir / t.trial_id).get("status") not in trialdir.ENDED for t in trials):
            raise KeyboardInterrupt(f"tuning {algorithm} was interrupted")   # Ctrl+C: Tune stopped and returned
        return _record(spec, trials, suite_dir, append=False)

    rows = tuning.grid_rounds(spec, run)
    for row in rows:
        trialdir.append_jsonl(trialdir.tune_trials(suite_dir), row)
    summary = tuning.bracket(spec, rows)
    trialdir.append_jsonl(trialdir.tune_trials(suite_dir), {"algorithm": algorithm, "method": "grid", **summary})
    say(f"tune {algorithm}: {tuning.bracket_line(spec, summary)}")
    return rows


def _record(spec: TuneSpec, trials: list[Trial], suite_dir: Path, append: bool = True) -> list[dict[str, Any]]:
    """The rows of finished tuning trials, read from their files (by value, then seed), appended to
    tune/trials.jsonl unless `append` is False."""
    tune_dir = trialdir.tune_dir(suite_dir)
    rows = [tuning.trial_row(spec, t, trialdir.read_status(tune_dir / t.trial_id).get("status"),
                             last_eval(tune_dir / t.trial_id, spec.metric)) for t in trials]
    rows.sort(key=lambda r: (r[spec.param], r["seed"]))
    for row in rows if append else []:
        trialdir.append_jsonl(trialdir.tune_trials(suite_dir), row)
    return rows


def _tune_trainable(config: dict, *, suite: Suite, spec: TuneSpec, algorithm: str, seeds: list[int], split: str,
                    tune_dir: str, mirror: Target, cwd: str) -> None:
    """In a Ray worker: the trials of one value, one per tuning seed; reports their mean objective (the worst
    value when one diverged)."""
    objectives, statuses = [], []
    for seed in seeds:
        trial = tune_trial(suite, algorithm, float(config["value"]), seed, split)
        status = run_in_worker(trial, Path(tune_dir), mirror, cwd, suite.resources).get("status", "unknown")
        objectives.append(tuning.trial_objective(spec, status, last_eval(Path(tune_dir) / trial.trial_id, spec.metric)))
        statuses.append(status)
    tune.report({"objective": tuning.mean_objective(spec, objectives),
                 "status": next((s for s in statuses if s != "completed"), "completed")})


class _TuneEvents(tune.Callback):
    def __init__(self, algorithm: str, spec: TuneSpec, say: Say):
        self.algorithm, self.spec, self.say, self.n = algorithm, spec, say, 0

    def _line(self, trial, outcome: str) -> None:
        self.n += 1
        self.say(f"tune {self.algorithm} {self.n}/{self.spec.trials_per_algorithm}: "
                 f"{self.spec.param}={trial.config['value']:.3e} -> {outcome}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        m = trial.last_result or {}
        self._line(trial, f"{self.spec.metric} {m.get('objective')} ({m.get('status')})")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._line(trial, f"FAILED: {error_reason(trial)}")


def _write_overrides(suite: Suite, spec: TuneSpec, results: dict[str, list[dict[str, Any]]], suite_dir: Path,
                     header: list[str] | None = None) -> Path:
    """results/<suite>/tuned-overrides.yaml (tuning.write_overrides); `header`: the method and split lines
    (default: the suite's, from its tune section)."""
    if header is None:
        seeds, split = spec.tune_seeds(suite), tune_split(suite)
        task = tune_trial(suite, suite.algorithms[0], spec.low, seeds[0], split).config.task.name
        header = _header(suite, spec, seeds, split, task)
    return tuning.write_overrides(suite, spec, results, suite_dir, header)
