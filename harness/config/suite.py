"""The suite file's schema: one typed, strict object that parsing fills once and every reader uses —
`check`, `run`, `tune`, `status`, the estimator lab and the report. Importing it imports no torch (the
run config's types are torch-free; only their validation asks the estimator registry), so the report
reads results/<suite>/suite.yaml through the same schema that `stalebench check` enforces.

    suite: quickstart                 # a name: a directory and an MLflow experiment
    version: 1
    base: {...}                       # a full run config (config.RunConfig; each trial's is validated by suite.expand)
    grid: {dotted.key: [values]}      # crossed; trial ids are made from it (suite.trial_id)
    seeds: [0, 1]
    resources: {cpu, gpu, max_concurrent, max_failures}            # Resources
    overrides: {estimator: {dotted.key: value}}                    # e.g. its tuned learning rate
    overrides_scope: all              # all trials, or `stale`: only trials that are not on-policy (delay > 0)
    share_on_policy: false            # delay 0, one update per batch: one trial per seed for all estimators
    notes: "..."
    report: {collapse: {...}, baseline: grpo}                      # ReportSection (read by the report)
    tune: {param: train.lr, low: 1e-5, high: 1e-3, ...}            # TuneSpec (read by `stalebench tune`)
    tracking: {wandb: {project: stalebench, mode: offline}}        # tracking.TrackingConfig (mirrors)
    campaign: false                   # true: finished trials are committed to campaigns/<suite>/ as they land
    reuse: [reference-v4]             # other campaigns whose landed trials of the same id and config are this suite's
                                      # (reports/<name>: a committed report's raw.tar.gz)
    slice_of: reference-v3            # a slice of that suite's trials (same ids), to check row by row, not rank

Every problem is a one-line ConfigError naming the key. What needs a resolved, validated run config
(every trial's config, the tune bounds) is checked by suite.load_suite_file, which `check` runs.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.config.run import DEFAULT_ESTIMATOR, RunConfig
from harness.config.tune import TuneSpec

from harness.config.dicts import NEW_SETTING, from_dict, to_dict
from harness.errors import ConfigError
from harness.registry import STATISTICS
from harness.config.collapse import CollapseRules
from harness.store import trialdir
from harness.store.tracking.mirrors import TrackingConfig
from harness.store.untrusted import load_yaml_text, read_text_file, short

SUITE_KEYS = ("suite", "version", "base", "grid", "seeds", "resources", "overrides", "notes", "report", "tune",
              "share_on_policy", "overrides_scope", "tracking", "campaign", "reuse", "slice_of")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")   # a suite's name (and an estimator's: algorithms/registry.py),
                                                    # matched whole (fullmatch: no trailing newline), ASCII only
REUSED = re.compile(rf"(reports/)?{NAME.pattern}")   # a `reuse:` entry: a campaign, or a committed report's dir
MAX_NAME_CHARS = 100          # a suite name is a directory and an MLflow experiment name (limit 255 chars
                              # for a path segment; trial ids and timestamps are appended to it)
DEFAULT_BASELINE = DEFAULT_ESTIMATOR   # the report's baseline estimator when `report.baseline` is not set
OVERRIDES_SCOPES = ("all", "stale")   # where `overrides:` apply: every trial, or the stale ones only
MAX_FAILURES = 10             # retries of a trial: more would only repeat a deterministic failure


@dataclass(frozen=True)
class Resources:
    cpu: float = 1.0              # CPUs per trial process: a trial of train.workers N reserves N x cpu
    gpu: float = 0.0              # GPUs per trial process (N x gpu)
    max_concurrent: int | None = None   # trials at once (default: as many as fit)
    max_failures: int = 1         # retries of a trial that raised (transient failures), 0..MAX_FAILURES
    gpu_memory_gib: float = field(default=80.0, metadata=NEW_SETTING)   # memory of one GPU (H100: 80): a GPU suite
                                  # whose projection exceeds it is refused by check and --dry-run (suite/memory.py)

    def validate(self, key: str) -> None:
        if self.cpu <= 0 or self.gpu < 0:
            raise ConfigError(f"{key}: cpu must be > 0 and gpu >= 0; got cpu={self.cpu}, gpu={self.gpu}")
        if self.max_concurrent is not None and self.max_concurrent < 1:
            raise ConfigError(f"{key}.max_concurrent: must be >= 1 (or omitted: as many as fit); got {self.max_concurrent}")
        if self.gpu_memory_gib <= 0:
            raise ConfigError(f"{key}.gpu_memory_gib: the memory of one GPU in GiB, > 0; got {self.gpu_memory_gib}")
        if not 0 <= self.max_failures <= MAX_FAILURES:     # Tune's -1 (retry forever) loops on a deterministic bug
            raise ConfigError(f"{key}.max_failures: must be between 0 and {MAX_FAILURES} (retries of a failed "
                              f"trial); got {self.max_failures}")

    def parallel_trials(self, cpus: float, gpus: float | None = None, workers: int = 1) -> int:
        """How many trials of `workers` processes each fit in `cpus` CPUs (and `gpus` GPUs, when given and
        the trials take GPUs), at least 1, at most max_concurrent: the one count of "how many trials fit"
        (the dry run's estimate on this machine, `tune`'s on the Ray cluster)."""
        fits = int(cpus // max(self.cpu * workers, 1e-9))
        if self.gpu and gpus is not None:
            fits = min(fits, int(gpus // (self.gpu * workers)))
        return max(1, min(fits, self.max_concurrent or fits))


@dataclass(frozen=True)
class ReportSection:
    """The `report:` section: the collapse rules (report/collapse.py), the estimator the probability of
    improvement is measured against (one of the suite's estimators; default: DEFAULT_ESTIMATOR), and the
    cells' point estimate, by the name of a registered statistic (harness/registry.py STATISTICS, the objects
    in harness/report/stats.py: "iqm", IQM with a bootstrap interval from 5 seeds, the mean below; "mean", the
    mean with a Student-t interval, the statistic the pair tests compare)."""
    collapse: CollapseRules = field(default_factory=CollapseRules)
    baseline: str = DEFAULT_BASELINE
    statistic: str = "iqm"
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)  # {figure: {setting: value}}: a registered
    # figure's own settings (its settings class, harness/registry.py FIGURES), built and checked by the report


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
    report: ReportSection = field(default_factory=ReportSection)
    tune: TuneSpec | None = None  # None: the suite has no tune section
    share_on_policy: bool = False # delay 0, one update per batch: run one trial per seed for all estimators
    overrides_scope: str = "all"  # `stale`: overrides apply only where the trial is not on-policy (a tuned lr at
                                  # delay > 0, the base's lr in the shared delay-0 run)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)   # mirrors besides MLflow (not trial config)
    campaign: bool = False        # finished trials committed to campaigns/<suite>/ (store/campaign.py)
    reuse: tuple[str, ...] = ()   # campaigns (or committed reports, reports/<name>) whose landed trials of the
                                  # same id and resolved config are this suite's (never run again; session.py)
    source: str = ""              # the suite file's text (hashed for provenance)
    slice_of: str = ""            # the suite whose trials these are, cut short or fewer ("": none); its report
                                  # says so and ranks nothing (report/slice.py); not part of any trial's config

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def algorithms(self) -> list[str]:
        """The suite's estimators: the grid's `algorithm` values, else the base's."""
        return [str(a) for a in self.grid.get("algorithm", [self.base.get("algorithm", DEFAULT_ESTIMATOR)])]

    def base_config(self) -> RunConfig:
        """The base as a typed run config with every default filled in (not validated: no torch)."""
        return from_dict(RunConfig, self.base, "base")

    def text(self) -> str:
        """The suite file's text: its source, or for a suite built in code its sections as YAML."""
        if self.source:
            return self.source
        data = {"suite": self.name, "version": self.version, "base": self.base, "grid": self.grid, "seeds": self.seeds,
                **({"overrides": self.overrides} if self.overrides else {}),
                **({"slice_of": self.slice_of} if self.slice_of else {}),
                **({"tune": to_dict(self.tune)} if self.tune is not None else {})}
        return yaml.safe_dump(data, sort_keys=False)


def _fail(path: str, msg: str) -> ConfigError:
    return ConfigError(f"{path}: {msg}")


def read_suite_yaml(path: Path) -> Suite:
    """A suite file as it is (no --set, no overrides file, trials not expanded): results/<suite>/suite.yaml
    for `status`, the lab and the report, read as a stored snapshot (parse_suite). A one-line ConfigError
    naming the path and key otherwise."""
    text = read_text_file(Path(path), "suite file")
    return parse_suite(load_yaml_text(text, str(path)), str(path), text, stored=True)


def parse_suite(data: Any, where: str = "suite", source: str = "", stored: bool = False) -> Suite:
    """The suite of a file's `data`. `stored`: a snapshot a run wrote (results/<suite>/suite.yaml, a report's
    archive), whose settings renamed since (trialdir.RENAMED_KEYS) are read under their new names."""
    if not isinstance(data, Mapping):
        raise _fail(where, "a suite file must be a mapping with keys " + ", ".join(SUITE_KEYS))
    if stored:
        data = _upgraded(data)
    unknown = sorted(set(data) - set(SUITE_KEYS))
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r}; valid keys: {', '.join(SUITE_KEYS)}")
    for key in ("suite", "base"):
        if key not in data:
            raise _fail(where, f"missing key {key!r}")
    name = data["suite"]
    if not isinstance(name, str) or not NAME.fullmatch(name):
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
    grid = _grid(data.get("grid") or {}, where)
    seeds = data.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise _fail(where, f"seeds: expected a non-empty list of integers; got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise _fail(where, f"seeds: duplicate values in {seeds!r}")
    if min(seeds) < 0:
        raise _fail(where, f"seeds: must be >= 0 (numpy's generators take no negative seed); got {min(seeds)}")
    if isinstance(data.get("resources"), Mapping) and "workers" in data["resources"]:
        raise _fail(where, "resources.workers: set a trial's workers with train.workers in base or the grid (they "
                           "change how its rollouts are sampled, so they are part of its config); resources.cpu "
                           "and gpu are per worker")
    overrides = data.get("overrides") or {}
    if not isinstance(overrides, Mapping) or not all(isinstance(v, Mapping) for v in overrides.values()):
        raise _fail(where, "overrides: expected a mapping of estimator name -> mapping of dotted keys")
    if not isinstance(data.get("notes", ""), str):
        raise _fail(where, "notes: expected a string")
    share = data.get("share_on_policy", False)
    if not isinstance(share, bool):
        raise _fail(where, f"share_on_policy: expected true or false; got {share!r}")
    if not isinstance(campaign := data.get("campaign", False), bool):
        raise _fail(where, f"campaign: expected true or false; got {short(campaign)}")
    reuse = [] if data.get("reuse") is None else data["reuse"]          # `reuse:` left empty: none
    if not isinstance(reuse, list) or not all(isinstance(r, str) and REUSED.fullmatch(r)
                                              and r != name for r in reuse):
        raise _fail(where, f"reuse: expected a list of other campaigns' suite names or committed reports, e.g. "
                           f"[reference-v4, reports/reference-v3]; got {short(reuse)}")
    if len(set(reuse)) != len(reuse):
        raise _fail(where, f"reuse: {short(reuse)} names one source twice; name each once")
    if reuse and not campaign:
        raise _fail(where, "reuse: the trials it takes are landed as this suite's; add campaign: true")
    slice_of = data.get("slice_of", "")
    if not isinstance(slice_of, str) or (slice_of and not NAME.fullmatch(slice_of)) or slice_of == name:
        raise _fail(where, f"slice_of: expected the name of the suite this one is a slice of (e.g. reference-v3), "
                           f"not this suite's own; got {short(slice_of)}")
    scope = data.get("overrides_scope", "all")
    if scope not in OVERRIDES_SCOPES:
        raise _fail(where, f"overrides_scope: expected one of {', '.join(OVERRIDES_SCOPES)}; got {short(scope)}")
    try:
        resources = _section(Resources, data.get("resources"), "resources", "{cpu: 1, gpu: 0}")
        resources.validate("resources")
        value = data.get("tracking")
        if not isinstance(value if value is not None else {}, Mapping):
            raise ConfigError("tracking: expected a mapping, e.g. {wandb: {project: stalebench, mode: offline}}")
        tracking = TrackingConfig.parse(value or {}, "tracking", _mirror)
        tracking.validate("tracking")
        suite = Suite(name, version, dict(base), grid, list(seeds), resources, {k: dict(v) for k, v in overrides.items()},
                      data.get("notes", ""), share_on_policy=share, overrides_scope=scope, tracking=tracking,
                      campaign=campaign, reuse=tuple(reuse), source=source, slice_of=slice_of)
        return Suite(**{**{f.name: getattr(suite, f.name) for f in fields(Suite)},
                        "report": _report(data.get("report"), suite), "tune": _tune(data.get("tune"), suite)})
    except ConfigError as exc:
        raise _fail(where, str(exc)) from None


def _upgraded(data: Mapping[str, Any]) -> dict[str, Any]:
    """A stored suite's data with trialdir.RENAMED_KEYS applied to its base, grid axes, overrides and tune."""
    def rename(key: Any) -> Any:
        return trialdir.RENAMED_KEYS.get(key, key)

    out = dict(data)
    if isinstance(out.get("base"), Mapping):
        out["base"] = trialdir.upgraded(out["base"])
    if isinstance(out.get("grid"), Mapping):
        out["grid"] = {rename(k): v for k, v in out["grid"].items()}
    if isinstance(out.get("overrides"), Mapping):
        out["overrides"] = {name: {rename(k): v for k, v in o.items()} if isinstance(o, Mapping) else o
                            for name, o in out["overrides"].items()}
    if isinstance(out.get("tune"), Mapping) and "param" in out["tune"]:
        out["tune"] = {**out["tune"], "param": rename(out["tune"]["param"])}
    return out


def _grid(grid: Any, where: str) -> dict[str, list[Any]]:
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
    return {k: list(v) for k, v in grid.items()}


def _mirror(cls: type, value: Any, key: str) -> Any:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a mapping of {', '.join(f.name for f in fields(cls))}; got {value!r}")
    return from_dict(cls, value, key)


def _section(cls: type, value: Any, key: str, example: str) -> Any:
    if not isinstance(value if value is not None else {}, Mapping):
        raise ConfigError(f"{key}: expected a mapping, e.g. {example}")
    return from_dict(cls, value or {}, key)


def _report(value: Any, suite: Suite) -> ReportSection:

    if not isinstance(value if value is not None else {}, Mapping):
        raise ConfigError("report: expected a mapping, e.g. {baseline: grpo, collapse: {patience: 3}}")
    value = dict(value or {})
    valid = [f.name for f in fields(ReportSection)]
    unknown = sorted(set(value) - set(valid), key=str)
    if unknown:
        raise ConfigError(f"report.{str(unknown[0])[:60]}: unknown key; valid keys: {', '.join(sorted(valid))}")
    collapse = value.get("collapse")
    if collapse is not None and not isinstance(collapse, Mapping):
        raise ConfigError(f"report.collapse: expected a mapping of rule settings; got {short(collapse)}")
    try:
        rules = CollapseRules.from_mapping(collapse)
    except ValueError as exc:                  # the rules' own messages name the rule ("collapse.patience ...")
        raise ConfigError(f"report.{exc}" if str(exc).startswith("collapse.") else f"report.collapse: {exc}") from None
    baseline = value.get("baseline", DEFAULT_BASELINE)
    if "baseline" in value and (not isinstance(baseline, str) or baseline not in suite.algorithms):
        raise ConfigError(f"report.baseline: {short(baseline)} is not an estimator of this suite; choose one "
                          f"of {', '.join(suite.algorithms)}")
    statistic = value.get("statistic", "iqm")
    if not isinstance(statistic, str) or statistic not in STATISTICS:
        raise ConfigError(f"report.statistic: {short(statistic)} is not a statistic the report prints; choose one "
                          f"of {', '.join(STATISTICS.names())}")
    figures = value.get("figures") or {}
    if not (isinstance(figures, Mapping) and all(isinstance(k, str) and isinstance(v, (Mapping, type(None)))
                                                 for k, v in figures.items())):
        raise ConfigError(f"report.figures: expected a mapping of figure names to their settings, e.g. {{<figure>: "
                          f"{{<setting>: <value>}}}}; got {short(figures)}")
    return ReportSection(collapse=rules, baseline=baseline, statistic=statistic,
                         figures={k: dict(v or {}) for k, v in figures.items()})


def _tune(value: Any, suite: Suite) -> TuneSpec | None:
    if not value:
        return None
    if isinstance(value, Mapping):
        for key in ("low", "high"):
            if key not in value:
                raise ConfigError(f"tune.{key}: required (the log-uniform search range)")
    spec = _section(TuneSpec, value, "tune", "{param: train.lr, low: 1e-5, high: 1e-3, trials_per_algorithm: 8}")
    spec.validate(suite.base_config(), suite.seeds)
    return spec
