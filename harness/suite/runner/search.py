"""`stalebench tune`: hyper-parameter search (Optuna's TPE, run through Ray Tune) of one setting per
estimator with the same budget for each, written as suite `overrides:` (tuned-overrides.yaml)."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import ray
import yaml
from ray import tune

from harness.store import trialdir
from harness.config.run import ConfigError
from harness.config.suite import Suite, TuneSpec
from harness.suite.session import SuiteSession
from harness.suite.status import last_eval
from harness.config.expand import Trial, check_tune_range, resolve_config
from harness.store.tracking import Target, close_suite_run
from harness.suite.runner.console import Say, printer
from harness.suite.runner.grid import mirrors, open_mlflow, tracking_uri
from harness.suite.runner.ray_tune import check_fits, error_reason, ray_session, run_in_worker, storage_path
from harness.suite.runner.ray_train import alive_nodes, concurrent_trials, trial_resources

def parse_tune(suite: Suite) -> TuneSpec:
    """The suite's validated `tune:` section (schema.TuneSpec; its range checked against the setting's
    validation), or a one-line ConfigError when the suite has none."""
    if suite.tune is None:
        raise ConfigError(f"tune: suite {suite.name!r} has no tune section, e.g. "
                          f"tune: {{param: train.lr, low: 1e-5, high: 1e-3, trials_per_algorithm: 8}}")
    check_tune_range(suite)
    return suite.tune


def tune_suite(suite: Suite, results_root: Path = Path("results"), address: str | None = None,
               progress: bool = True) -> Path:
    """Search `tune.param` for every estimator of the suite's grid with the same number of trials, at
    `tune.delay` (default: the grid's largest delay, where the estimators differ), the first value of
    every other grid axis and `tune.seed` (never a seed the suite reports); write the best value per
    estimator as suite `overrides:` to results/<suite>/tuned-overrides.yaml and return that path.

    Trials live in results/<suite>/tune/<estimator>-<param><value>; an interrupted search starts again
    (the seeded sampler proposes the same values first, and a finished trial of a value is not rerun)."""
    spec = parse_tune(suite)
    say = printer(progress)
    algorithms = suite.algorithms
    delay = spec.tune_delay(suite)
    fixed = {**{k: v[0] for k, v in suite.grid.items() if k != "algorithm"}, "delay": delay, "seed": spec.tune_seed(suite)}
    examples = [_tune_trial(suite, spec, a, fixed, spec.low) for a in algorithms]   # one per estimator
    suite_dir = SuiteSession.open(suite, examples, Path(results_root), on_change=None).suite_dir
    say(f"tuning {spec.param} in [{spec.low:g}, {spec.high:g}] for {', '.join(algorithms)}: "
        f"{spec.trials_per_algorithm} trials each at delay {delay} -> {trialdir.tune_dir(suite_dir)}")
    uri = tracking_uri(Path(results_root))
    results: dict[str, list[dict[str, Any]]] = {}
    with ray_session(address, say):
        check_fits(suite.resources, examples[0].config.train.workers)
        target = open_mlflow(suite, uri, Path(results_root), "tune", len(algorithms) * spec.trials_per_algorithm)
        trialdir.tune_dir(suite_dir).mkdir(parents=True, exist_ok=True)
        trialdir.tune_trials(suite_dir).write_text("")     # this search's trials, one row each
        try:
            for algorithm in algorithms:
                results[algorithm] = _search(suite, spec, algorithm, fixed, suite_dir,
                                             mirrors(suite, target, Path(results_root)), say)
        finally:
            statuses = [r["status"] for rows in results.values() for r in rows]
            close_suite_run(target.tracking_uri, target.parent_run_id, {s: statuses.count(s) for s in set(statuses)},
                            interrupted=len(results) < len(algorithms))
    return _write_overrides(suite, spec, results, suite_dir)


def _tune_trial(suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any], value: float) -> Trial:
    params = {"algorithm": algorithm, **fixed, spec.param: value}
    config = resolve_config(suite.base, {**suite.overrides.get(algorithm, {}), **params})
    return Trial(f"tune-{algorithm}-{spec.param.rsplit('.', 1)[-1]}{value:.4e}", params, config)


def _search(suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any], suite_dir: Path,
            target: Target, say: Say) -> list[dict[str, Any]]:
    """One Tune experiment: Optuna's TPE proposes `trials_per_algorithm` values for one estimator."""
    import optuna
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)      # not 'A new study created in memory ...'
    res = suite.resources
    example = _tune_trial(suite, spec, algorithm, fixed, spec.low)     # every value's trial has its workers
    workers = example.config.train.workers
    cluster = ray.cluster_resources()
    fits = concurrent_trials(res, workers, alive_nodes()) if workers > 1 else \
        res.parallel_trials(cluster.get("CPU", 1), cluster.get("GPU", 0))
    concurrent = min(fits, spec.trials_per_algorithm)
    # TPE's default 10 random start-up trials would make a budget of 8 a random search.
    sampler = optuna.samplers.TPESampler(seed=spec.sampler_seed, n_startup_trials=max(2, spec.trials_per_algorithm // 2))
    searcher = ConcurrencyLimiter(OptunaSearch(metric="objective", mode=spec.mode, sampler=sampler), concurrent)
    trainable = tune.with_resources(
        tune.with_parameters(_tune_trainable, suite=suite, spec=spec, algorithm=algorithm, fixed=fixed,
                             tune_dir=str(trialdir.tune_dir(suite_dir)), mirror=target, cwd=os.getcwd()),
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
    rows = []
    for result in grid:
        value, metrics = float(result.config["value"]), result.metrics or {}
        rows.append({"algorithm": algorithm, spec.param: value, "status": metrics.get("status", "failed"),
                     "objective": metrics.get("objective"), "trial_id": _tune_trial(suite, spec, algorithm, fixed, value).trial_id})
    rows.sort(key=lambda r: r[spec.param])
    for row in rows:
        trialdir.append_jsonl(trialdir.tune_trials(suite_dir), row)
    return rows


def _tune_trainable(config: dict, *, suite: Suite, spec: TuneSpec, algorithm: str, fixed: dict[str, Any],
                    tune_dir: str, mirror: Target, cwd: str) -> None:
    """In a Ray worker: one tuning trial; reports the objective (a diverged run gets the worst value)."""
    trial = _tune_trial(suite, spec, algorithm, fixed, float(config["value"]))
    status = run_in_worker(trial, Path(tune_dir), mirror, cwd, suite.resources)
    value = last_eval(Path(tune_dir) / trial.trial_id, spec.metric)
    if status.get("status") != "completed" or value is None or not math.isfinite(value):
        value = -math.inf if spec.mode == "max" else math.inf
    tune.report({"objective": value, "status": status.get("status", "unknown")})


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


def _write_overrides(suite: Suite, spec: TuneSpec, results: dict[str, list[dict[str, Any]]], suite_dir: Path) -> Path:
    """results/<suite>/tuned-overrides.yaml: the best value per estimator as a suite `overrides:` mapping."""
    sign = 1 if spec.mode == "max" else -1
    chosen, lines = {}, []
    for algorithm, rows in results.items():
        ok = [r for r in rows if r["status"] == "completed" and r["objective"] is not None and math.isfinite(r["objective"])]
        lines += [f"#   {algorithm:<10} {spec.param}={r[spec.param]:.3e}  {spec.metric}="
                  f"{'n/a' if r['objective'] is None else r['objective']}  ({r['status']})" for r in rows]
        if ok:
            best = max(ok, key=lambda r: (sign * r["objective"], -r[spec.param]))   # ties: the smaller value
            chosen[algorithm] = {spec.param: float(f"{best[spec.param]:.4g}")}
    missing = sorted(set(results) - set(chosen))
    header = [
        f"# Tuned {spec.param} per estimator for suite {suite.name} by `stalebench tune` on {time.strftime('%Y-%m-%d %H:%M')}:",
        (f"# Optuna TPE through Ray Tune, {spec.trials_per_algorithm} trials per estimator, log-uniform in "
         f"[{spec.low:g}, {spec.high:g}], delay {spec.tune_delay(suite)}, seed {spec.tune_seed(suite)}, objective: "
         f"final {spec.metric} ({spec.mode})."),
        "# To use: copy the `overrides:` mapping into a suite file as its top-level `overrides:` key (keep only",
        "# the estimators that suite runs; the loader rejects overrides for estimators it does not use).",
        *([f"# No completed trial for: {', '.join(missing)} (no override written)."] if missing else []),
        "# Trials:", *lines, ""]
    path = suite_dir / "tuned-overrides.yaml"
    path.write_text("\n".join(header) + yaml.safe_dump({"overrides": chosen}, sort_keys=False))
    return path
