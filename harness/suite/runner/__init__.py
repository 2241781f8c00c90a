"""The suite runner: schedules a suite's trials on Ray Tune (local or a cluster) and searches
hyper-parameters with Optuna through Ray Tune. The only package that imports ray. (Its console, the
progress and event lines, is harness/suite/console.py: `reproduce --in-process` prints them without Ray.)

    grid.py      run_suite: the grid of a suite -> results/<suite>/, MLflow (`stalebench run`)
    search.py    tune_suite: per-estimator hyper-parameter search (`stalebench tune`)
    ray_tune.py  Ray session, the Tune experiment, the trainable and its callbacks
    ray_train.py a multi-worker trial (train.workers > 1) as a Ray Train run inside its Tune trial
"""
from harness.suite.runner.grid import run_suite
from harness.config.expand import tune_spec
from harness.suite.runner.search import TuneSpec, tune_suite

__all__ = ["TuneSpec", "run_suite", "tune_spec", "tune_suite"]
