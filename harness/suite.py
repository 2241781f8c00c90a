"""Suite files: strict loading and grid expansion into trials (pure; no Ray, no I/O beyond reading YAML).

A suite is `suite`, `version`, `base` (a full run config), `grid` (dotted keys → value lists, crossed),
`seeds`, `resources` and optional `overrides` (estimator → dotted settings, e.g. its tuned learning
rate), `notes` and `report` (read by the report), `tracking` (mirrors besides MLflow, e.g. W&B). Trial ids are readable and deterministic functions of
the grid point and seed (`gmc_grpo-d16-e0.2-g8-s0`), so rerunning a suite finds its finished trials.
"""
from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from algorithms import uses_eps

from .config import DEFAULT_ESTIMATOR, ConfigError, RunConfig, build_run_config, from_dict, set_dotted, to_dict
from .tracking.config import TrackingConfig
from .yamlio import load_yaml_text, read_text_file, short

SUITE_KEYS = ("suite", "version", "base", "grid", "seeds", "resources", "overrides", "notes", "report", "tune",
              "share_on_policy", "tracking")
MAX_TRIALS = 20_000           # a larger grid needs --max-trials (it is counted before anything is expanded)
_ABBREV = {"algorithm": "", "delay": "d", "eps": "e", "group_size": "g"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MAX_NAME_CHARS = 100          # a suite name is a directory and an MLflow experiment name (limit 255 chars
                              # for a path segment; trial ids and timestamps are appended to it)
MAX_FAILURES = 10             # retries of a trial: more would only repeat a deterministic failure


@dataclass(frozen=True)
class Resources:
    cpu: float = 1.0              # CPUs per trial process: a trial of train.workers N reserves N x cpu
    gpu: float = 0.0              # GPUs per trial process (N x gpu)
    max_concurrent: int | None = None   # trials at once (default: as many as fit)
    max_failures: int = 1         # retries of a trial that raised (transient failures), 0..MAX_FAILURES

    def validate(self, key: str) -> None:
        if self.cpu <= 0 or self.gpu < 0:
            raise ConfigError(f"{key}: cpu must be > 0 and gpu >= 0; got cpu={self.cpu}, gpu={self.gpu}")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ConfigError(f"{key}.max_concurrent: must be >= 1 (or omitted: as many as fit); got {self.max_concurrent}")
        if not 0 <= self.max_failures <= MAX_FAILURES:     # Tune's -1 (retry forever) loops on a deterministic bug
            raise ConfigError(f"{key}.max_failures: must be between 0 and {MAX_FAILURES} (retries of a failed "
                              f"trial); got {self.max_failures}")


@dataclass(frozen=True)
class Trial:
    trial_id: str
    params: dict[str, Any]        # the grid point and seed (what distinguishes this trial)
    config: RunConfig


@dataclass(frozen=True)
class Suite:
    name: str
    version: int
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    seeds: list[int]
    resources: Resources = field(default_factory=Resources)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    tune: dict[str, Any] = field(default_factory=dict)
    share_on_policy: bool = False # delay 0, one update per batch: run one trial per seed for all estimators
    tracking: TrackingConfig = field(default_factory=TrackingConfig)   # mirrors besides MLflow (not trial config)
    source: str = ""              # the suite file's text (hashed for provenance)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


def _fail(path: str, msg: str) -> ConfigError:
    return ConfigError(f"{path}: {msg}")


def load_suite(path: str | Path, sets: list[str] = (), max_trials: int = MAX_TRIALS,
               overrides_file: str | Path | None = None) -> Suite:
    """Read and validate a suite file, with `--set key=value` overrides of its `base` and the
    per-estimator `overrides:` of `overrides_file` (e.g. tuned-overrides.yaml) applied; every problem is a
    one-line ConfigError naming the key."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such suite file; the predefined suites are in suites/")
    text = read_text_file(path, "suite file")
    data = load_yaml_text(text, str(path))
    if overrides_file is not None:
        data, text = apply_overrides_file(data, Path(overrides_file), text)
    if sets:
        data, text = apply_sets(data, sets, text)
    suite = parse_suite(data, str(path), text)
    count = trial_count(suite)
    if count > max_trials:
        raise _fail(str(path), f"the grid has {count} trials, more than the limit {max_trials}; shrink the grid "
                               f"or raise the limit with --max-trials")
    expand(suite)                 # validates every trial's config
    return suite


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
        base = set_dotted(base, key.strip(), load_yaml_text(raw, f"--set {short(item)}"))
    data = {**data, "base": base}
    header = "# effective suite: " + " ".join(f"--set {s}" for s in sets).replace("\n", " ")[:2000] + "\n"
    return data, header + yaml.safe_dump(data, sort_keys=False)


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
        merged[algorithm] = {**merged.get(algorithm, {}), **values}
    data = {**data, "overrides": merged}
    return data, f"# effective suite: --overrides {short(str(path))}\n" + yaml.safe_dump(data, sort_keys=False)


def trial_count(suite: Suite) -> int:
    """The number of grid points × seeds, before de-duplication (cheap: nothing is expanded)."""
    count = len(suite.seeds)
    for values in suite.grid.values():
        count *= len(values)
    return count


def parse_suite(data: Any, where: str = "suite", source: str = "") -> Suite:
    if not isinstance(data, Mapping):
        raise _fail(where, "a suite file must be a mapping with keys " + ", ".join(SUITE_KEYS))
    unknown = sorted(set(data) - set(SUITE_KEYS))
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r}; valid keys: {', '.join(SUITE_KEYS)}")
    for key in ("suite", "base"):
        if key not in data:
            raise _fail(where, f"missing key {key!r}")
    name = data["suite"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail(where, f"suite: {short(name)} is not a valid name (letters, digits, '_', '-', '.'; it names a directory)")
    if len(name) > MAX_NAME_CHARS:
        raise _fail(where, f"suite: the name is {len(name)} characters, over the limit of {MAX_NAME_CHARS} "
                           f"({short(name, 40)})")
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise _fail(where, f"version: expected an integer; got {version!r}")
    base = data["base"]
    if not isinstance(base, Mapping):
        raise _fail(where, "base: expected a mapping (a full run config)")
    grid = data.get("grid") or {}
    if not isinstance(grid, Mapping):
        raise _fail(where, "grid: expected a mapping of dotted keys to lists of values")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise _fail(where, f"grid.{key}: expected a non-empty list of values; got {values!r}")
        seen = [yaml.safe_dump(v) for v in values]
        if len(set(seen)) != len(seen):
            raise _fail(where, f"grid.{key}: duplicate values in {values!r}")
        if key == "seed":
            raise _fail(where, "grid.seed: list seeds under the top-level key 'seeds', not in the grid")
    seeds = data.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise _fail(where, f"seeds: expected a non-empty list of integers; got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise _fail(where, f"seeds: duplicate values in {seeds!r}")
    if isinstance(data.get("resources"), Mapping) and "workers" in data["resources"]:
        raise _fail(where, "resources.workers: set a trial's workers with train.workers in base or the grid (they "
                           "change how its rollouts are sampled, so they are part of its config); resources.cpu "
                           "and gpu are per worker")
    try:
        resources = from_dict(Resources, data.get("resources") or {}, "resources")
        resources.validate("resources")
        if not isinstance(data.get("tracking") or {}, Mapping):
            raise ConfigError("tracking: expected a mapping, e.g. {wandb: {project: stalebench, mode: offline}}")
        tracking = from_dict(TrackingConfig, data.get("tracking") or {}, "tracking")
        tracking.validate("tracking")
    except ConfigError as exc:
        raise _fail(where, str(exc)) from None
    overrides = data.get("overrides") or {}
    if not isinstance(overrides, Mapping) or not all(isinstance(v, Mapping) for v in overrides.values()):
        raise _fail(where, "overrides: expected a mapping of estimator name -> mapping of dotted keys")
    for key in ("notes",):
        if not isinstance(data.get(key, ""), str):
            raise _fail(where, f"{key}: expected a string")
    share = data.get("share_on_policy", False)
    if not isinstance(share, bool):
        raise _fail(where, f"share_on_policy: expected true or false; got {share!r}")
    return Suite(name, version, dict(base), {k: list(v) for k, v in grid.items()}, list(seeds), resources,
                 {k: dict(v) for k, v in overrides.items()}, data.get("notes", ""), dict(data.get("report") or {}),
                 dict(data.get("tune") or {}), share, tracking, source)


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
      params.json lists the estimators it `stands_for`.
    """
    keys = sorted(suite.grid, key=lambda k: (list(_ABBREV).index(k) if k in _ABBREV else len(_ABBREV), k))
    algorithms = [str(a) for a in suite.grid.get("algorithm", [suite.base.get("algorithm", DEFAULT_ESTIMATOR)])]
    trials, seen = [], {}
    for values in itertools.product(*(suite.grid[k] for k in keys)):
        point = dict(zip(keys, values))
        first_eps = "eps" not in point or point["eps"] == suite.grid["eps"][0]
        algorithm = str(point.get("algorithm", suite.base.get("algorithm", DEFAULT_ESTIMATOR)))
        overrides = suite.overrides.get(algorithm, {})
        ignored = [] if "eps" not in point or uses_eps(algorithm) else ["eps"]
        if ignored:
            if not first_eps:
                continue                                       # the same trial as at the first ε
            point.pop("eps")
        stands_for = None
        if (suite.share_on_policy and all(suite.overrides.get(a, {}) == overrides for a in algorithms)
                and _on_policy(suite, point, overrides)):
            if ("algorithm" in point and algorithm != algorithms[0]) or not first_eps:
                continue
            stands_for, ignored = algorithms, sorted({*ignored, "eps"} & set(keys))
            point.pop("eps", None)
        for seed in suite.seeds:
            params = {**point, "seed": seed}
            try:
                config = build_run_config(suite.base, {**overrides, **params})
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


def _on_policy(suite: Suite, point: Mapping[str, Any], overrides: Mapping[str, Any]) -> bool:
    """Whether a grid point trains on-policy: delay 0, one update per batch, synchronous."""
    cfg = build_run_config(suite.base, {**overrides, **point})
    return cfg.delay == 0 and cfg.train.updates_per_batch == 1 and cfg.async_ is None and cfg.lab is None


def matching(trials: list[Trial], spec: str, flag: str = "--trial") -> list[Trial]:
    """The trials matching 'key=value,...' (keys: grid keys, dotted config keys, `id`)."""
    want = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"{flag}: {short(part)} is not key=value (e.g. 'algorithm=gmc_grpo,delay=16,seed=0')")
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
    return flat == value or str(flat) == str(value)
