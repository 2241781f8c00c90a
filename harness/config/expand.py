"""Suite files: loading a user's suite file (with --set and --overrides) and expanding its grid into
trials (pure; no Ray, no I/O beyond reading YAML).

The file's sections and their types are harness/config/suite.py's (`Suite`); this module reads the file,
applies the command line's overrides, and expands `base` × `grid` × `seeds` into validated trials. Trial
ids are readable and deterministic functions of the grid point and seed (`gmc_grpo-d16-e0.2-g8-s0`), so
rerunning a suite finds its finished trials.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.config.run import ConfigError, RunConfig, build_run_config

from harness.config.dicts import set_dotted, to_dict
from harness.config.components import source_of
from harness.config.kinds import kind_of
from harness.config.suite import Resources, Suite, TuneSpec, parse_suite  # noqa: F401 — the suite's types live in the schema
from harness.store.untrusted import load_yaml_text, read_text_file, short
from harness.store.untrusted import display

MAX_TRIALS = 20_000           # a larger grid needs --max-trials (it is counted before anything is expanded)
_ABBREV = {"algorithm": "", "delay": "d", "eps": "e", "group_size": "g"}


@dataclass(frozen=True)
class Trial:
    trial_id: str
    params: dict[str, Any]        # the grid point and seed (what distinguishes this trial)
    config: RunConfig


def load_suite_file(path: str | Path, sets: list[str] = (), max_trials: int = MAX_TRIALS,
                    overrides_file: str | Path | None = None) -> Suite:
    """Read and validate a suite file, with `--set key=value` overrides of its `base` and the
    per-estimator `overrides:` of `overrides_file` (e.g. tuned-overrides.yaml) applied: every section
    (schema.parse_suite), every trial's resolved config and the tune range (check_runnable). Every
    problem is a one-line ConfigError naming the key."""
    return load_suite_trials(path, sets, max_trials, overrides_file)[0]


def load_suite_trials(path: str | Path, sets: list[str] = (), max_trials: int = MAX_TRIALS,
                      overrides_file: str | Path | None = None, stored: bool = False) -> tuple[Suite, list[Trial]]:
    """load_suite_file and the suite's trials, expanded once (what the command line runs); `stored`: a
    snapshot a run wrote (schema.parse_suite)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such suite file; the predefined suites are in suites/")
    text = read_text_file(path, "suite file")
    data = load_yaml_text(text, str(path))
    if overrides_file is not None:
        data, text = apply_overrides_file(data, Path(overrides_file), text)
    if sets:
        data, text = apply_sets(data, sets, text)
    suite = parse_suite(data, str(path), text, stored)
    count = trial_count(suite)
    if count > max_trials:
        raise ConfigError(f"{path}: the grid has {count} trials, more than the limit {max_trials}; shrink the grid "
                          f"or raise the limit with --max-trials")
    return suite, check_runnable(suite)


def check_runnable(suite: Suite) -> list[Trial]:
    """What needs validated run configs (the estimator registry): every trial's config, and the bounds
    of the tune range as values of their setting. Returns the trials."""
    trials = expand(suite)
    check_tune_range(suite)
    return trials


def tune_spec(suite: Suite) -> TuneSpec:
    """The suite's validated `tune:` section (its range and split checked: check_tune_range), or a one-line
    ConfigError when the suite has none."""
    if suite.tune is None:
        raise ConfigError(f"tune: suite {suite.name!r} has no tune section, e.g. "
                          f"tune: {{param: train.lr, low: 1e-5, high: 1e-3, trials_per_algorithm: 8}}")
    check_tune_range(suite)
    return suite.tune


def check_tune_range(suite: Suite) -> None:
    """The tune range's bounds are values its setting accepts (validated run configs), a grid's furthest
    extensions too, and the split the tuning trials read exists (no tune section: nothing)."""
    spec = suite.tune
    if spec is None:
        return
    for bound in (spec.low, spec.high):
        build_run_config(suite.base, {spec.param: bound})
    if spec.method == "grid" and spec.max_extend:
        values = spec.grid_values(spec.max_extend, spec.max_extend)
        for bound in (values[0], values[-1]):
            try:
                build_run_config(suite.base, {spec.param: bound})
            except ConfigError as exc:
                raise ConfigError(f"tune.max_extend: {spec.max_extend} extensions could reach {spec.param}={bound:g}, "
                                  f"which is refused ({exc}); lower tune.max_extend or move the range") from None
    tune_split(suite)


def tune_split(suite: Suite) -> str:
    """The split `stalebench tune` evaluates on: tune.split, where `auto` is the task's validation split if it
    has one, else its test split; ConfigError for `validation` on a task without one."""
    config = build_run_config(suite.base, _tune_fixed(suite, 0))          # the task the tuning trials run
    task = config.task.build()                                               # task.validation_size included
    has_validation = "validation" in getattr(task, "splits", ())
    if suite.tune.split == "validation" and not has_validation:
        raise ConfigError(f"tune.split: task {config.task.name!r} has no validation split; set tune.split: auto "
                          f"(its test split) or test")
    return suite.tune.split if suite.tune.split != "auto" else "validation" if has_validation else "test"


def tune_trial(suite: Suite, algorithm: str, value: float, seed: int, split: str) -> Trial:
    """A trial of `stalebench tune`: `algorithm` at `value` of tune.param on tuning seed `seed`, at the tuning
    delay and the first value of every other grid axis, evaluated on `split` (tune_split). Its id is
    `tune-<estimator>-<param><value>`, and `-seed<seed>` after it in a grid or with several tuning seeds."""
    spec = suite.tune
    params = {"algorithm": algorithm, **_tune_fixed(suite, seed), spec.param: value}
    config = resolve_config(suite.base, {**suite.overrides.get(algorithm, {}), **params})
    if config.eval.split != split:                 # set only where it differs: today's trials keep their params
        params["eval.split"] = split
        config = resolve_config(suite.base, {**suite.overrides.get(algorithm, {}), **params})
    named_seed = spec.method == "grid" or len(spec.tune_seeds(suite)) > 1
    return Trial(f"tune-{algorithm}-{spec.param.rsplit('.', 1)[-1]}{value:.4e}" + (f"-seed{seed}" if named_seed else ""),
                 params, config)


def _tune_fixed(suite: Suite, seed: int) -> dict[str, Any]:
    """What every tuning trial shares: the first value of each grid axis but the estimator, the delay, the seed."""
    return {**{k: v[0] for k, v in suite.grid.items() if k != "algorithm"}, "delay": suite.tune.tune_delay(suite),
            "seed": seed}


def apply_sets(data: Any, sets: list[str], text: str) -> tuple[Any, str]:
    """The suite with each `key=value` (a dotted key of `base`, a YAML value) applied, and its new text:
    the effective suite, so that results/<suite>/suite.yaml and config identity see the overrides."""
    if not isinstance(data, Mapping) or not isinstance(data.get("base"), Mapping):
        raise ConfigError("--set: the suite has no base section to override")
    base = dict(data["base"])
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item[:80]!r}: expected key=value with a dotted key of base, e.g. train.lr=3e-4")
        _not_identity(data, key.strip(), f"--set {short(item)}")
        base = set_dotted(base, key.strip(), load_yaml_text(raw, f"--set {short(item)}"))
    data = {**data, "base": base}
    header = "# effective suite: " + " ".join(f"--set {s}" for s in sets).replace("\n", " ")[:2000] + "\n"
    return data, header + yaml.safe_dump(data, sort_keys=False)


def _not_identity(data: Mapping[str, Any], key: str, where: str, always: tuple[str, ...] = ("seed",)) -> None:
    """Refuse an override of what tells a suite's trials apart (the seed, a grid key): each trial sets it
    from `seeds:` or `grid:`, which win over `base`, so the override would be silently ignored (and, in an
    overrides file, would split the shared on-policy run)."""
    grid = data.get("grid") if isinstance(data.get("grid"), Mapping) else {}
    if key in always or key in grid:
        source = "the suite's seeds: list" if key == "seed" else ("its grid: values" if key in grid else
                                                                   "the estimator it overrides")
        raise ConfigError(f"{where}: {key} tells the suite's trials apart and is set per trial by {source}; "
                          f"change the suite file instead (an override of it would be ignored)")


def apply_overrides_file(data: Any, path: Path, text: str) -> tuple[Any, str]:
    """The suite with the `overrides:` mapping of `path` merged into its own (the file's values win)."""
    extra = load_yaml_text(read_text_file(path, "overrides file"), str(path))
    if not isinstance(extra, Mapping) or not isinstance(extra.get("overrides"), Mapping) or not all(
            isinstance(v, Mapping) for v in extra["overrides"].values()):
        raise ConfigError(f"{path}: expected a mapping `overrides: {{estimator: {{dotted.key: value}}}}` "
                          f"(as `stalebench tune` writes it)")
    if not isinstance(data, Mapping):
        raise ConfigError("--overrides: the suite is not a mapping")
    merged = {k: dict(v) for k, v in (data.get("overrides") or {}).items()}
    for algorithm, values in extra["overrides"].items():
        for key in values:
            _not_identity(data, str(key), f"{display(path)}: overrides.{display(algorithm)}.{display(key)}",
                          always=("seed", "algorithm"))
        merged[algorithm] = {**merged.get(algorithm, {}), **values}
    data = {**data, "overrides": merged}
    return data, f"# effective suite: --overrides {short(str(path))}\n" + yaml.safe_dump(data, sort_keys=False)


def resolve_config(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> RunConfig:
    """A trial's validated run config: config.build_run_config, then what its trial kind cannot honour
    (kinds.py), so that `check` refuses a trial that would fail when it starts."""
    config = build_run_config(base, overrides)
    kind_of(config).validate(config)
    return config


def trial_count(suite: Suite) -> int:
    """The number of grid points × seeds, before de-duplication (cheap: nothing is expanded)."""
    count = len(suite.seeds)
    for values in suite.grid.values():
        count *= len(values)
    return count


def _fmt(value: Any) -> str:
    text = str(value)
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_") or "x"


def trial_id(params: Mapping[str, Any]) -> str:
    """Readable id: algorithm, then d/e/g for delay/eps/group_size, other grid keys by their last name
    segment, then s<seed>; e.g. gmc_grpo-d16-e0.2-g8-s0."""
    parts = []
    for key, value in params.items():
        if key == "seed":
            continue
        short = _ABBREV.get(key)
        parts.append(f"{short}{_fmt(value)}" if short is not None else f"{key.rsplit('.', 1)[-1]}{_fmt(value)}")
    parts.append(f"s{params['seed']}")
    return "-".join(parts)


def expand(suite: Suite) -> list[Trial]:
    """Every distinct trial of the suite, in a stable order: the grid's cross product × seeds, except that

    - an estimator is not multiplied over `eps` when it does not read ε (algorithms.uses_eps): it runs
      once, at the base's ε, and its params.json lists `ignored: [eps]`;
    - with `share_on_policy: true`, the delay-0 points of all estimators (one update per batch, no
      async) are one trial per seed, run with the first estimator of the grid: there every estimator's
      gradient equals plain GRPO's to float rounding (tests/test_algorithms_contract.py); its
      params.json lists the estimators it `stands_for`;
    - with `overrides_scope: stale`, an estimator's `overrides:` (its tuned lr) apply only to its trials that
      are not on-policy, so the delay-0 run keeps the base's settings and is still shared.
    """
    from algorithms import uses_eps

    keys = sorted(suite.grid, key=lambda k: (list(_ABBREV).index(k) if k in _ABBREV else len(_ABBREV), k))
    algorithms = suite.algorithms
    trials, seen = [], {}
    for values in itertools.product(*(suite.grid[k] for k in keys)):
        point = dict(zip(keys, values))
        first_eps = "eps" not in point or point["eps"] == suite.grid["eps"][0]
        algorithm = str(point.get("algorithm", algorithms[0]))
        base_only = suite.overrides_scope == "stale" and _on_policy(suite, point, {})

        def overrides_of(a: str, base_only: bool = base_only) -> dict[str, Any]:   # on-policy under `stale`: none
            return {} if base_only else suite.overrides.get(a, {})

        overrides = overrides_of(algorithm)
        ignored = [] if "eps" not in point or uses_eps(algorithm) else ["eps"]
        if ignored:
            if not first_eps:
                continue                                       # the same trial as at the first ε
            point.pop("eps")
        stands_for = None
        if (suite.share_on_policy and all(overrides_of(a) == overrides for a in algorithms)
                and _on_policy(suite, point, overrides)):
            if ("algorithm" in point and algorithm != algorithms[0]) or not first_eps:
                continue
            stands_for, ignored = algorithms, sorted({*ignored, "eps"} & set(keys))
            point.pop("eps", None)
        for seed in suite.seeds:
            params = {**point, "seed": seed}
            try:
                config = resolve_config(suite.base, {**overrides, **params})
            except ConfigError as exc:
                where = ", ".join(f"{k}={v}" for k, v in params.items())
                raise ConfigError(f"{exc} (trial {where})") from None
            tid = trial_id(params)
            if tid in seen:
                raise ConfigError(f"grid: trials {seen[tid]} and {params} get the same id {tid!r}; make the values distinct")
            seen[tid] = params
            extra = {**({"ignored": ignored} if ignored else {}), **({"stands_for": stands_for} if stands_for else {})}
            trials.append(Trial(tid, {**params, **extra}, config))
    unknown = sorted(set(suite.overrides) - {str(a) for a in algorithms} - {str(t.config.algorithm) for t in trials})
    if unknown:
        raise ConfigError(f"overrides.{unknown[0]}: no trial of the suite uses this estimator")
    return trials


def on_policy(cfg: RunConfig) -> bool:
    """Whether `cfg` trains on-policy: one optimizer update per batch, and its staleness source
    (harness/trial/staleness.py) samples every batch with the policy that consumes it (delay 0)."""
    return cfg.train.updates_per_batch == 1 and source_of(cfg).on_policy(cfg)


def _on_policy(suite: Suite, point: Mapping[str, Any], overrides: Mapping[str, Any]) -> bool:
    """Whether a grid point trains on-policy with a trial kind whose on-policy runs are shared."""
    cfg = build_run_config(suite.base, {**overrides, **point})
    return on_policy(cfg) and kind_of(cfg).shares_on_policy


def matching(trials: list[Trial], spec: str, flag: str = "--trial") -> list[Trial]:
    """The trials matching 'key=value,...' (keys: grid keys, dotted config keys, `id`); a value is read as
    YAML and compared as the setting's type (seed=true is not seed 1). An empty filter (it would select every
    trial) and a key given twice (only its last value counted) are refused."""
    want = {}
    parts = [p.strip() for p in spec.split(",")]
    if not any(parts):
        raise ConfigError(f"{flag} {short(spec)}: an empty filter would select every trial; give key=value "
                          f"(e.g. 'algorithm=gmc_grpo,delay=16,seed=0'), or leave {flag} out")
    for part in filter(None, parts):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag}: {short(part)} is not key=value (e.g. 'algorithm=gmc_grpo,delay=16,seed=0')")
        if key.strip() in want:
            raise ConfigError(f"{flag} {short(spec)}: key {short(key.strip())} is given twice; one filter holds each "
                              f"key once (repeat {flag} to select several values: {flag} algorithm=grpo {flag} "
                              f"algorithm=m2po)")
        want[key.strip()] = load_yaml_text(value, f"{flag} value {short(part)}")
    return [t for t in trials if all(_match(t, k, v) for k, v in want.items())]


def select_trials(trials: list[Trial], only: list[str]) -> list[Trial]:
    """The trials matching any of the `--only` specs (all trials when none is given)."""
    if not only:
        return trials
    chosen = {t.trial_id for spec in only for t in matching(trials, spec, "--only")}
    if not chosen:
        raise ConfigError(f"--only {short(' '.join(only))}: matches no trial of the suite")
    return [t for t in trials if t.trial_id in chosen]


def select(trials: list[Trial], spec: str) -> Trial:
    """The trial matching 'key=value,...' (e.g. 'algorithm=gmc_grpo,delay=16,seed=0')."""
    matches = matching(trials, spec)
    if len(matches) != 1:
        ids = ", ".join(t.trial_id for t in matches[:5]) or "none"
        raise ConfigError(f"--trial {spec!r} matches {len(matches)} trials ({ids}); add keys until exactly one matches")
    return matches[0]


def _match(trial: Trial, key: str, value: Any) -> bool:
    if key in ("algo",):
        key = "algorithm"
    if key == "id":
        return trial.trial_id == str(value)
    flat = to_dict(trial.config)
    for part in key.split("."):
        if not isinstance(flat, Mapping) or part not in flat:
            return False
        flat = flat[part]
    if isinstance(flat, bool) != isinstance(value, bool):     # true is not 1, nor 0 false
        return False
    return flat == value or str(flat) == str(value)
