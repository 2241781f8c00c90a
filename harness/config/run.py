"""Typed run configuration: frozen dataclasses, a strict loader, and dotted overrides.

One `RunConfig` drives every part of a run (model, task, rollout, delay, trainer, evaluation). It is
built from the `base` section of a suite YAML plus the trial's grid point; nothing reads a setting the
config does not declare. Every error is one line naming the key and the valid values.

Importing this module imports no torch: the estimator registry (`algorithms`) is imported by the
validation that needs it, so torch-free readers (the suite schema, the report) share these types.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from harness.config.delays import DelayDistribution
from harness.config.inflight import InflightConfig
from harness.config.components import Choice, can, component, current, stored_dict
from harness.config.dicts import NEW_SETTING, from_dict, set_dotted, to_dict, yaml_name
from harness.errors import ConfigError
from harness.registry import FORWARDS, MODELS
from harness.config.trace import read_trace, trace_sha256
from harness.config.lab import LabConfig
from harness.store.untrusted import short


DEFAULT_ESTIMATOR = "grpo"
MAX_STEPS = 10_000_000                     # a bound on train.steps (a typo of 10**30 would never end)
FLOAT32_MAX = 3.4028234663852886e38        # torch.finfo(torch.float32).max: the trainer's float settings become
                                           # float32 tensors (eps 1e300: "cannot be converted without overflow")
MAX_THREADS = 1024                         # train.threads: torch.set_num_threads(10**6) kills the process
MAX_PASS_K = 1024
MIN_TEMPERATURE = 1e-6                     # logits / temperature stays finite in float32 (1e-40 sampled NaNs)


def _float32(key: str, value: float) -> None:
    if value > FLOAT32_MAX:
        raise ConfigError(f"{key}: at most {FLOAT32_MAX:.4g} (the trainer holds it as a float32); got {value:g}")


def _choice(key: str, value: object, valid: typing.Iterable[object]) -> None:
    valid = list(valid)
    if value not in valid:
        raise ConfigError(f"{key}: {value!r} is not valid; choose one of {', '.join(map(str, valid))}")


def _positive(key: str, value: float | int, strict: bool = True) -> None:
    if (value <= 0) if strict else (value < 0):
        raise ConfigError(f"{key}: must be {'> 0' if strict else '>= 0'}; got {value}")


@dataclass(frozen=True)
class ModelConfig:
    kind: str = "tiny"                     # "tiny": a frozen base shipped with stalebench; "path": a local HF model dir
    base: str = "tiny-addrev-v1"           # the frozen base (kind: tiny), harness/bases/<base>/
    path: str | None = None                # local directory of a transformers causal LM (kind: path)
    dtype: str = "float32"                 # float32 | bfloat16
    device: str = "auto"                   # auto (cuda when available) | cpu
    logp_chunk_tokens: int = field(default=0, metadata=NEW_SETTING)   # the trainer's log-probs and entropy through
                                           # the LM head this many tokens at a time, never a full (b, T, V) float32
                                           # copy (rollout/logp.py): 0 auto (chunks of 1,024 when the vocabulary is
                                           # >= 32,768 tokens, full logits below: the tiny bases) | -1 full logits
    gradient_checkpointing: bool = field(default=False, metadata=NEW_SETTING)   # recompute each transformers
                                           # layer in the backward instead of keeping its activations (forward hf)

    def validate(self, key: str) -> None:
        MODELS.get(self.kind, f"{key}.kind").validate(self, key)      # its own settings (bases/sources.py)
        _choice(f"{key}.dtype", self.dtype, ("float32", "bfloat16"))
        _choice(f"{key}.device", self.device, ("auto", "cpu"))
        if self.logp_chunk_tokens < -1:
            raise ConfigError(f"{key}.logp_chunk_tokens: tokens per chunk (> 0), 0 (auto: chunked for a large "
                              f"vocabulary) or -1 (full logits); got {self.logp_chunk_tokens}")


@dataclass(frozen=True)
class TaskConfig:
    name: str = "addrev"                   # addrev (synthetic, CPU default) or a benchmark name
    train_size: int | None = None          # None: the task's default
    eval_size: int = 500
    data_dir: str | None = None            # benchmark files (default: $STALEBENCH_DATA_DIR or the repo's data/benchmarks)
    validation_size: int = field(default=0, metadata=NEW_SETTING)   # a benchmark with a train file (gsm8k):
                                           # its last N train problems held out as the validation split
                                           # (cumsum-long has a fixed one)

    def validate(self, key: str) -> None:
        from harness.tasks import task_entry, task_names
        _choice(f"{key}.name", self.name, task_names())
        _positive(f"{key}.eval_size", self.eval_size)
        if self.train_size is not None:
            _positive(f"{key}.train_size", self.train_size)
        _positive(f"{key}.validation_size", self.validation_size, strict=False)
        if self.data_dir is not None and "data_dir" not in task_entry(self.name).settings:   # else ignored, silently
            raise ConfigError(f"{key}.data_dir: task {self.name!r} generates its problems and reads no files (the "
                              f"benchmark tasks, e.g. gsm8k, read them); remove it, or set {key}.name to a benchmark")
        if self.validation_size and "validation_size" not in task_entry(self.name).settings:
            raise ConfigError(f"{key}.validation_size: task {self.name!r} takes none (a benchmark with a train file, "
                              f"gsm8k, does; cumsum-long has a fixed validation split); remove it")
        try:                                   # the task's own bounds (addrev: eval_size below 1,000,000)
            self.build()
        except ValueError as exc:
            raise ConfigError(f"{key}: task {self.name!r} refuses these settings: {exc}") from None

    def check_train_size(self, key: str, size: int) -> None:
        """The trial's `size` train problems (trial/batches.py train_problems) fit the task's pool, when the
        task states one (`max_train_size`)."""
        limit = getattr(self.build(), "max_train_size", None)
        if limit is not None and size > limit:
            raise ConfigError(f"{key}: {size} train problems, more than task {self.name!r} has ({limit} with "
                              f"task.eval_size {self.eval_size}); lower it")

    def build(self) -> Any:
        """The task these settings name (harness/tasks)."""
        from harness.tasks import task_from_config
        return task_from_config(self.name, self.eval_size, self.data_dir, self.validation_size)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 200                       # steps: batches consumed (each one or more optimizer updates)
    prompts_per_step: int = 16
    lr: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.99
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    passes: int = 1                        # full passes over each batch, one optimizer update each (PPO epochs;
                                           # TRL's num_iterations): every response is used `passes` times
    minibatches: int = field(default=1, metadata=NEW_SETTING)   # each batch split into this many minibatches
                                           # of whole prompt groups, one optimizer update each, every response
                                           # used once (verl's ppo_mini_batch_size = the batch / minibatches;
                                           # docs/staleness.md)
    micro_batch_size: int | None = None    # responses per forward/backward; None = whole batch
    aggregation: str = "token-mean"
    advantage: str = "std"                 # std (GRPO) | mean (Dr. GRPO)
    kl_beta: float = 0.0                   # KL to the initial policy (k3 estimator); 0 = off
    temperature: float = 1.0
    max_new_tokens: int = 8
    checkpoint_every: int = 50             # steps between resumable checkpoints; 0 = never
    threads: int = 1                       # torch CPU threads per process
    workers: int = 1                       # data-parallel workers (Ray Train processes; gradients summed across
                                           # them): each samples and scores prompts_per_step / workers whole prompt
                                           # groups with its own seed, so it is part of what a trial is (docs/workers.md)
    save: str = "none"                     # keep the policy as a transformers model dir <trial>/policy:
                                           # final (at the last step) | best (best eval/acc) | none
    prox_logp: str = field(default="recompute", metadata=NEW_SETTING)   # how π_prox is obtained: recompute (a
                                           # forward of each batch when it takes several updates) | loglinear |
                                           # linear: AReaL's A-3PO interpolation from the version tags, no
                                           # forward (algorithms/proximal.py; docs/staleness.md)

    @property
    def updates_per_batch(self) -> int:
        """Optimizer updates per batch, passes x minibatches (pass-major): batch s is consumed by updates
        U·s .. U·s+U−1, so its responses are `delay` .. `delay`+U−1 updates old when they are used."""
        return self.passes * self.minibatches

    def validate(self, key: str) -> None:
        for name in ("steps", "prompts_per_step", "lr", "passes", "minibatches", "max_new_tokens", "temperature",
                     "threads", "workers"):
            _positive(f"{key}.{name}", getattr(self, name))
        if self.prompts_per_step % self.minibatches:
            raise ConfigError(f"{key}.minibatches: {key}.prompts_per_step {self.prompts_per_step} does not divide into "
                              f"{self.minibatches} minibatches (each minibatch holds whole prompt groups)")
        per = self.prompts_per_step // self.minibatches
        if per % self.workers:
            what = f"{key}.prompts_per_step {per}" if self.minibatches == 1 else f"each minibatch's {per} prompts"
            raise ConfigError(f"{key}.workers: {what} does not divide into {self.workers} workers (each worker samples "
                              f"whole prompt groups)")
        if self.steps > MAX_STEPS:
            raise ConfigError(f"{key}.steps: at most {MAX_STEPS}; got {self.steps}")
        if self.threads > MAX_THREADS:
            raise ConfigError(f"{key}.threads: at most {MAX_THREADS} torch CPU threads per process; got {self.threads}")
        for name in ("weight_decay", "kl_beta", "checkpoint_every", "grad_clip"):
            _positive(f"{key}.{name}", getattr(self, name), strict=False)
        for name in ("lr", "weight_decay", "kl_beta", "grad_clip", "temperature"):
            _float32(f"{key}.{name}", getattr(self, name))
        if self.temperature < MIN_TEMPERATURE:
            raise ConfigError(f"{key}.temperature: at least {MIN_TEMPERATURE:g} (logits / temperature must stay a "
                              f"finite float32); got {self.temperature:g}")
        for name in ("beta1", "beta2"):               # Adam's decay rates: torch refuses anything outside [0, 1)
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(f"{key}.{name}: must be in [0, 1) (Adam's decay rate); got {getattr(self, name)}")
        if self.micro_batch_size is not None:
            _positive(f"{key}.micro_batch_size", self.micro_batch_size)
        from algorithms import AGGREGATIONS, ADVANTAGE_MODES
        from algorithms.proximal import PROX_LOGP_METHODS

        _choice(f"{key}.aggregation", self.aggregation, AGGREGATIONS)
        _choice(f"{key}.save", self.save, ("none", "final", "best"))
        _choice(f"{key}.advantage", self.advantage, ADVANTAGE_MODES)
        _choice(f"{key}.prox_logp", self.prox_logp, PROX_LOGP_METHODS)


EVAL_SPLITS = {"test": "eval", "validation": "validation"}     # eval.split -> the task's split


@dataclass(frozen=True)
class EvalConfig:
    every_steps: int = 20                  # held-out evaluation period (also at step 0 and the last step)
    size: int | None = None                # None: the task's eval_size
    pass_k: int = 0                        # also report pass@k with k samples at temperature 1 (0 = off)
    split: str = field(default="test", metadata=NEW_SETTING)   # test: the task's held-out eval split (tables) |
                                           # validation: its validation split (tuning, design choices)

    def validate(self, key: str) -> None:
        _positive(f"{key}.every_steps", self.every_steps)
        _positive(f"{key}.pass_k", self.pass_k, strict=False)
        if self.pass_k > MAX_PASS_K:       # k samples of every eval problem at once (10**6: 32 GB for 32 problems)
            raise ConfigError(f"{key}.pass_k: at most {MAX_PASS_K} samples per problem; got {self.pass_k}")
        if self.size is not None:
            _positive(f"{key}.size", self.size)
        _choice(f"{key}.split", self.split, EVAL_SPLITS)

    def problems(self, task_config: TaskConfig, task: Any) -> list:
        """What each held-out evaluation scores: `size` problems of `split`, else the test split's task.eval_size
        or the whole validation split (`task`: task_config built)."""
        test = self.split == "test"
        return task.problems(EVAL_SPLITS[self.split], self.size or (task_config.eval_size if test else None), 0)


@dataclass(frozen=True)
class MismatchConfig:
    """The rollout engine's log-probs differ from the trainer's (harness/rollout/mismatch.py)."""
    sigma: float = 0.0                     # noise on the engine's weights, σ · rms of each tensor
    bf16: bool = False                     # round the engine's weights to bfloat16
    top_p: float = 1.0                     # nucleus sampling; recorded log-probs are the renormalized ones
    top_k: int = 0                         # top-k sampling (0 = off), applied before top-p as vLLM does

    def validate(self, key: str) -> None:
        if not 0 <= self.sigma <= 10:
            raise ConfigError(f"{key}.sigma: must be in [0, 10] (noise relative to each weight tensor's rms); got {self.sigma}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"{key}.top_p: must be in (0, 1] (1 = no nucleus truncation); got {self.top_p}")
        _positive(f"{key}.top_k", self.top_k, strict=False)


@dataclass(frozen=True)
class RunConfig:
    algorithm: str = DEFAULT_ESTIMATOR     # a registered estimator (algorithms.loss_names())
    params: Mapping[str, Any] = field(default_factory=dict)   # the estimator's own parameters
    delay: int | DelayDistribution = 0     # exact rollout delay d (optimizer updates), or a law of lags (spec/delays.py)
    eps: float = 0.2                       # trust-region width ε
    group_size: int = 8                    # G responses per prompt
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: Choice = component("engine", "hf")     # the rollout engine: hf (transformers) | vllm (extra `gpu`;
                                           # docs/vllm.md), with its settings (engine: {vllm: {...}})
    forward: Choice = component("forward", "hf")   # the model's forward: hf (transformers) | lean (the tiny Qwen3
                                           # bases; rollout/lean.py) | lean3 (engine version 3: docs/lean.md)
    behavior_logp: str = "engine"          # engine: the engine's own log-probs | recompute: the trainer's
    backend: Choice = component("backend", "torch")   # the training backend: torch | deepspeed (extra `gpu`)
    task: TaskConfig = field(default_factory=TaskConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    staleness: Choice | None = component("staleness", None)   # a staleness source chosen by name (async: real
                                           # concurrent generation); None: the delay law's (exact, mixed)
    lab: LabConfig | None = None           # estimator-lab trial on a synthetic policy instead of an LLM
    mismatch: MismatchConfig | None = None # engine log-probs apart from the trainer's (None = the plain engine)
    inflight: InflightConfig | None = field(default=None, metadata=NEW_SETTING)   # weights updated while
                                           # responses are generated (config/inflight.py; None: one version each)

    current = staticmethod(current)        # the keys written before components had settings, mapped
    stored_dict = stored_dict              # the stored form: config.yaml and config_sha256 (components.py)

    @property
    def engine_version(self) -> int:
        """The engine version the forward declares (rollout/base.py Forward): 1 transformers (hf), 2 the lean
        forward, 3 lean3 (its own float path and fused AdamW). Not a setting: it follows the forward."""
        return FORWARDS.get(self.forward.name, "forward").engine_version

    def validate(self, key: str = "base") -> None:
        from algorithms import check_params, loss_names
        from harness.tasks import task_entry

        _choice("algorithm", self.algorithm, loss_names())
        try:
            check_params(self.algorithm, dict(self.params))
        except ValueError as exc:
            raise ConfigError(f"params: {exc}") from None
        if isinstance(self.delay, DelayDistribution):
            self.delay.validate("delay")
            if self.delay.dist == "trace":          # the file must fit this run's batch shape and length
                trace = read_trace(self.delay.path, self.train.prompts_per_step * self.group_size,
                                   updates_per_batch=self.train.updates_per_batch, max_lag=self.delay.max,
                                   steps=self.train.steps)
                if any(len(schedule) > 1 for step in trace for schedule in step):
                    self._validate_switching("delay.path: a trace of responses of several segments needs")
        else:
            _positive("delay", self.delay, strict=False)
        _positive("eps", self.eps)
        _float32("eps", self.eps)
        _positive("seed", self.seed, strict=False)    # numpy's generators take no negative seed
        if self.group_size < 2:
            raise ConfigError(f"group_size: must be >= 2 (group-relative advantages need a baseline); got {self.group_size}")
        for f in fields(self):                 # each section validates its own keys
            section = getattr(self, f.name)
            if dataclasses.is_dataclass(section) and not isinstance(section, DelayDistribution):
                section.validate(yaml_name(f))
        self._validate_components()
        if self.eval.split == "validation":
            if "validation" not in getattr(self.task.build(), "splits", ()):
                raise ConfigError(f"eval.split: task {self.task.name!r} has no validation split (cumsum-long has "
                                  f"one; gsm8k with task.validation_size); set eval.split: test")
        if self.eval.split == "test" and self.eval.size is not None and self.eval.size > self.task.eval_size and \
                "eval_size" in task_entry(self.task.name).settings:
            raise ConfigError(f"eval.size: {self.eval.size} is more than the task's held-out set, whose first "
                              f"eval.size problems it evaluates (task.eval_size {self.task.eval_size}); lower "
                              f"eval.size or raise task.eval_size")
        if self.staleness is not None and self.delay:
            raise ConfigError(f"staleness: set either delay (exact, synchronous) or staleness source "
                              f"{self.staleness.name!r} (its own lags), not both")
        if self.inflight is not None:
            self._validate_inflight()
        if self.train.workers > 1:
            self._validate_workers()

    def _validate_components(self) -> None:
        """The rules that involve several components (each one's own settings validate themselves)."""
        _choice("behavior_logp", self.behavior_logp, ("engine", "recompute"))
        forward, engine, backend, dtype = self.forward.name, self.engine.name, self.backend.name, self.model.dtype
        if can(self.forward, "tiny_qwen3_only") and not (can(self.engine, "in_process") and dtype == "float32"
                                                         and can(self.backend, "custom_forward")):
            # kind: path is fine (build-base's probe of a candidate): a model the lean forward does not support
            # (not a dense Qwen3, ...) is refused with the same fix when the trial builds it (rollout/lean.py)
            raise ConfigError(f"forward: {forward!r} is written for Qwen3 models like the tiny bases, in float32 "
                              f"with an in-process engine (hf) and a backend that runs it (torch); set forward: hf "
                              f"for dtype {dtype!r}, engine {engine!r}, backend {backend!r}")
        if self.model.gradient_checkpointing and not can(self.forward, "checkpointing"):
            raise ConfigError(f"model.gradient_checkpointing: checkpoints transformers' layers, which forward "
                              f"{forward!r} does not run; set forward: hf or remove gradient_checkpointing")
        if self.mismatch is not None and not can(self.engine, "supports_mismatch"):
            raise ConfigError(f"mismatch: the mismatched engine stands in for an in-process engine (hf), not "
                              f"{engine!r}; use engine hf (vLLM's own gap is logged as is/engine_gap_max)")

    def _validate_inflight(self) -> None:
        if isinstance(self.delay, DelayDistribution) or self.staleness is not None:
            raise ConfigError("inflight: takes an integer delay (the lag of a full-length response's last token), "
                              "not a delay distribution, trace or staleness source; remove one of them")
        self.inflight.check_lag("inflight", self.delay, self.train.max_new_tokens)
        self._validate_switching("inflight: needs")

    def _validate_switching(self, what: str) -> None:
        """What responses generated under several versions need: an engine that switches weights between
        two decoding steps (the lean engines), in one process, without the mismatched engine."""
        if not (can(self.forward, "switches_weights") and can(self.engine, "in_process")):
            raise ConfigError(f"{what} an engine that switches weights mid-response: set forward: lean "
                              f"(the tiny Qwen3 bases) and engine: hf")
        if self.mismatch is not None or self.train.workers > 1:
            raise ConfigError(f"{what} the plain lean engine in one process: remove the mismatch section "
                              f"and train.workers")

    def _validate_workers(self) -> None:
        """What several data-parallel workers need (docs/workers.md); each refusal is one line."""
        refusals = [
            (getattr(self.backend.settings, "zero_stage", 0) > 2, "ZeRO-3 partitions the parameters, which each "
             "worker's own rollouts and rank 0's evaluation cannot use; set backend.deepspeed.zero_stage 0, 1 or 2"),
            (not can(self.engine, "multi_worker"), f"engine {self.engine.name!r} is not supported with several workers yet (each "
                                       f"worker would start its own engine inside the Train process group); use hf"),
            (self.staleness is not None, f"staleness source {getattr(self.staleness, 'name', '')!r} is not supported "
                                         f"with several workers (a producer thread would share the workers' "
                                         f"collectives); use delay"),
            (isinstance(self.delay, DelayDistribution), "a delay distribution or trace runs in one process (its "
                                                        "policy snapshots are not shared); use an integer delay"),
        ]
        for refused, reason in refusals:
            if refused:
                raise ConfigError(f"train.workers: {reason}")


# ----------------------------------------------------------------------------------------------
# Strict loading
# ----------------------------------------------------------------------------------------------

def build_run_config(base: Mapping[str, Any], overrides: Mapping[str, Any] = types.MappingProxyType({})) -> RunConfig:
    """The validated RunConfig for `base` with dotted `overrides` applied (grid point, seed, ...)."""
    data = to_dict(base)
    for dotted, value in overrides.items():
        data = set_dotted(data, dotted, value)
    cfg = from_dict(RunConfig, data, "base")
    cfg.validate()
    return _with_trace_sha256(cfg)


def _with_trace_sha256(cfg: RunConfig) -> RunConfig:
    """A trace-replaying config with `delay.sha256` set to its file's (the trial's identity follows the
    trace's contents, not its path); ConfigError when the config already names another sha256."""
    delay = cfg.delay
    if not isinstance(delay, DelayDistribution) or delay.dist != "trace":
        return cfg
    digest = trace_sha256(delay.path)
    if delay.sha256 not in (None, digest):
        raise ConfigError(f"delay.sha256: the trace {short(delay.path)} now has sha256 {digest[:12]}..., not "
                          f"{short(delay.sha256)[:16]}... as recorded; it was edited since (rerun the changed "
                          f"trials, or restore the trace)")
    return dataclasses.replace(cfg, delay=dataclasses.replace(delay, sha256=digest))
