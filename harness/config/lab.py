"""Configuration of an estimator-lab trial (the `lab:` section of a run config).

A run config with a `lab:` section trains a synthetic tabular policy (harness/lab/policy.py) instead of
an LLM; `model`, `task`, `train.prompts_per_step`… keep their meaning where one exists (see
harness/lab/dynamics.py for which run-config fields a lab trial reads). The `sweep_*` fields drive the
fixed-policy sweeps of the report section (harness/lab/sweeps.py), computed from the suite's base config.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.errors import ConfigError

REWARD_KINDS = ("binary", "uniform")
DIVERGENCES = ("delay", "kl")


@dataclass(frozen=True)
class LabConfig:
    # -- the synthetic problem --------------------------------------------------------------------
    vocab: int = 4                         # V tokens per position
    length: int = 4                        # L positions: V**L enumerable sequences
    reward: str = "binary"                 # binary: a random reward_frac of sequences pay 1 | uniform: R ~ U[0,1]
    reward_frac: float = 0.1               # share of rewarded sequences (reward: binary)
    init_scale: float = 1.0                # θ_0 = init_scale · N(0,1) logits (0: uniform policy)
    problem_seed: int | None = 0           # rewards and θ_0; None: the trial's seed (else shared by all trials)
    log_every: int = 1                     # steps between metrics rows (1: every step)
    # -- the per-trial bias / second-moment measurement ---------------------------------------------
    divergence: str = "delay"              # delay: π_θ = `delay` expected on-policy SGD steps ahead of π_b = θ_0
                                           # kl: π_b = θ_0 randomly perturbed to KL(π_b‖π_θ) = kl
    kl: float = 0.5                        # target KL(π_b‖π_θ) in nats (divergence: kl; the sweeps' pair)
    measure_groups: int = 1000             # Monte Carlo groups per measurement (0: skip the measurement)
    loop_groups: int = 256                 # groups for estimators that are not group-local (one call each)
    # -- fixed-policy sweeps of the report ----------------------------------------------------------
    sweep_group_sizes: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256)   # bias vs G
    sweep_group_size: int = 16             # G of the ε and divergence sweeps
    sweep_groups: int = 4000               # Monte Carlo groups per sweep point (G and ε sweeps: the first try)
    sweep_max_groups: int = 16000          # G and ε sweeps: ×4 groups while a bias's SE exceeds 1/3 of it, up to this
    sweep_fit_min_g: int = 8               # the log-log fit of bias vs G uses G >= this

    def validate(self, key: str) -> None:
        if self.vocab < 2 or self.length < 1 or self.vocab ** self.length > 100_000:
            raise ConfigError(f"{key}: need vocab >= 2, length >= 1 and vocab**length <= 100000; "
                              f"got vocab={self.vocab}, length={self.length}")
        if self.reward not in REWARD_KINDS:
            raise ConfigError(f"{key}.reward: {self.reward!r} is not valid; choose one of {', '.join(REWARD_KINDS)}")
        if self.divergence not in DIVERGENCES:
            raise ConfigError(f"{key}.divergence: {self.divergence!r} is not valid; choose one of "
                              f"{', '.join(DIVERGENCES)}")
        if not 0 < self.reward_frac < 1:
            raise ConfigError(f"{key}.reward_frac: must be in (0, 1); got {self.reward_frac}")
        for name in ("init_scale", "kl", "measure_groups"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{key}.{name}: must be >= 0; got {getattr(self, name)}")
        for name in ("log_every", "sweep_fit_min_g"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{key}.{name}: must be >= 1; got {getattr(self, name)}")
        for name in ("loop_groups", "sweep_groups"):
            if getattr(self, name) < 2:
                raise ConfigError(f"{key}.{name}: must be >= 2 (standard errors need two groups); "
                                  f"got {getattr(self, name)}")
        if self.measure_groups == 1:
            raise ConfigError(f"{key}.measure_groups: must be 0 (off) or >= 2; got 1")
        if not self.sweep_group_sizes or min(self.sweep_group_sizes) < 2:
            raise ConfigError(f"{key}.sweep_group_sizes: need a non-empty list of sizes >= 2; "
                              f"got {list(self.sweep_group_sizes)}")
        if self.sweep_max_groups < self.sweep_groups:
            raise ConfigError(f"{key}.sweep_max_groups: must be >= sweep_groups ({self.sweep_groups}); "
                              f"got {self.sweep_max_groups}")
        if self.sweep_group_size < 2:
            raise ConfigError(f"{key}.sweep_group_size: must be >= 2; got {self.sweep_group_size}")


def check_supported(cfg: Any) -> None:
    """The settings of `cfg` (a config.RunConfig, which imports this module) that a lab trial cannot honour,
    refused in one line naming the key (at check time, through the lab's trial kind: harness/lab/kind.py;
    and again when the trial starts)."""
    lab = cfg.lab or LabConfig()
    K = cfg.train.prompts_per_step
    refusals = [
        (not isinstance(cfg.delay, int), "delay: an estimator-lab trial takes an integer delay, not a distribution "
                                         "or trace"),
        (cfg.mismatch is not None, "mismatch: the mismatched engine is a transformers engine for LLM trials; use "
                                   "engine hf (vLLM's own gap is logged as is/engine_gap_max) and no lab section"),
        (cfg.train.updates_per_batch != 1, "train.passes, train.minibatches: a lab trial takes one optimizer update "
                                           "per batch; set both to 1"),
        (cfg.train.kl_beta != 0, "train.kl_beta: a lab trial has no KL penalty; set train.kl_beta: 0"),
        (cfg.train.prox_logp != "recompute", "train.prox_logp: a lab trial takes π_prox = π_θ (one update per batch); "
                                             "remove train.prox_logp"),
        (cfg.staleness is not None, "staleness: a lab trial uses the exact delay only; remove the staleness (async) "
                                    "section"),
        (cfg.inflight is not None, "inflight: a lab trial has no token-level generation; remove the inflight section"),
        (cfg.train.workers > 1, "train.workers: an estimator-lab trial runs in one process; remove train.workers"),
        (cfg.train.advantage == "std" and lab.reward != "binary",
         "train.advantage: 'std' needs lab.reward: binary (exact target); or use train.advantage: mean"),
        (0 < lab.measure_groups < 2 * K, f"lab.measure_groups: {lab.measure_groups} must be 0 or at least two batches "
                                         f"of train.prompts_per_step = {K} groups"),
    ]
    for refused, reason in refusals:
        if refused:
            raise ConfigError(reason)
