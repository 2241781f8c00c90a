"""Delayed-SGD training on the synthetic problem: one estimator-lab trial.

    outcome = LabRun(cfg, log).run()     # cfg: RunConfig with a `lab:` section; log: RunLog

The loop, step t = 0..steps−1 (CleanRL-style, top to bottom):
    π_b      = θ_{max(0, t−d)}                    (a FIFO of the last d+1 policies' log-prob tables, d = cfg.delay;
                                                    the first d steps use θ_0: realized staleness is min(t, d))
    batch    = prompts_per_step groups × G sequences sampled from π_b; rewards; `group_advantages`
    loss     = compute_loss(cfg.algorithm, LossInputs(logp under θ_t (grad), logp_behavior, ...), ε, ...)
    θ_{t+1}  = θ_t − lr · clip(∇_θ loss)          (plain SGD; train.grad_clip on the global norm, 0 = off)

Every run-config field a lab trial reads: algorithm, params, delay, eps, group_size, seed, train.steps,
train.prompts_per_step, train.lr, train.grad_clip, train.aggregation, train.advantage, train.threads,
eval.every_steps, lab.*. Ignored: model, task, train.beta1/beta2/weight_decay (plain SGD),
temperature, max_new_tokens, micro_batch_size, checkpoint_every, eval.size/pass_k. Refused (they would
change the meaning silently): passes or minibatches ≠ 1, kl_beta ≠ 0, async.

Rows (RunLog; metrics at step t+1 describe update t+1, like the LLM trainer):
    metrics.jsonl  train/reward_mean, rollout/zero_adv_frac, loss/value, opt/grad_norm (before clipping),
                   stale/mean, stale/max, lab/J (exact J(θ_{t+1})), lab/kl_behavior (exact sequence-level
                   KL(π_b ‖ π_θ_t) of the batch), policy/kl_behavior (the same per token, /L),
                   policy/entropy (exact mean per-token entropy of π_θ_t), perf/step_s, and the
                   estimator's own metrics; every lab.log_every steps (and the last step).
    eval.jsonl     eval/acc = J normalized to [0, 1] by the reward range (binary rewards: J itself),
                   lab/J; at step 0, every eval.every_steps and at the last step. The last eval row also
                   holds the trial's measurement (below).
Measurement (lab.measure_groups > 0): `estimate.measure` of this trial's estimator at its (ε, G), Monte
Carlo over lab.measure_groups groups in draws of train.prompts_per_step groups (the batch it trains on,
so M2PO's mask and BAPO's bounds see the same number of groups as in training), on the pair fixed by
lab.divergence — "delay": π_b = θ_0 and π_θ = θ_0 after d expected on-policy SGD steps
θ ← θ + lr·g*(θ) (g* = κ∇J, the target of estimate.py), the same pair for every estimator at a delay;
"kl": π_θ = θ_0, π_b = θ_0 perturbed to KL(π_b ‖ π_θ) = lab.kl. Logged as lab/bias_true, lab/bias_tis,
lab/bias_is, lab/second_moment, lab/mse, lab/cosine (each with _se), lab/cosine_mean, lab/rel_bias
(= bias_true/‖g*‖), lab/target_norm (‖g*‖, exact), lab/pair_kl, lab/pair_chi2 (exact), lab/measure_groups
(groups used), lab/batch_groups (groups per draw), lab/batched. Only the pair's numbers are exact; the
bias, second moment, MSE and cosines are Monte Carlo estimates with standard errors.
"""
from __future__ import annotations

import math
import time
from collections import deque
from typing import TYPE_CHECKING

import torch

from algorithms import LossInputs, compute_loss, group_advantages

from harness.lab import estimate, policy
from harness.store.trialdir import Outcome
from harness.config.lab import LabConfig, check_supported

if TYPE_CHECKING:
    from harness.config.run import RunConfig
    from harness.store.tracking import RunLog

MEASURE_KEYS = ("bias_true", "bias_tis", "bias_is", "second_moment", "mse", "cosine")


def make_setup(cfg: "RunConfig") -> tuple[policy.Problem, torch.Tensor]:
    """The trial's problem and initial logits θ_0."""
    lab = cfg.lab or LabConfig()
    seed = cfg.seed if lab.problem_seed is None else lab.problem_seed
    problem = policy.make_problem(lab.vocab, lab.length, lab.reward, lab.reward_frac, seed)
    return problem, policy.init_logits(problem, lab.init_scale, seed)


def train_step(cfg: "RunConfig", problem: policy.Problem, theta: torch.Tensor, table_b: torch.Tensor,
               gen: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
    """One delayed-SGD update from θ_t with behavior per-token log-probs `table_b` (N, L).

    Returns θ_{t+1} and the metrics row without the staleness, J and timing fields.
    """
    K, G, L = cfg.train.prompts_per_step, cfg.group_size, problem.length
    seq_b = table_b.sum(1)                                                        # (N,) log π_b(o)
    flat = policy.sample_of(seq_b, K * G, gen)                                    # (B,) sequence ids
    group_ids = torch.arange(K).repeat_interleave(G)
    rewards = problem.rewards[flat]
    th = theta.clone().requires_grad_(True)
    table = policy.token_logp_table(problem, th)                                  # (N, L), grad to θ
    adv = group_advantages(rewards, group_ids, cfg.train.advantage)
    mask = torch.ones(K * G, L, dtype=torch.bool)
    out = compute_loss(cfg.algorithm, LossInputs(table[flat], table_b[flat], adv, mask, group_ids), eps=cfg.eps,
                       aggregation=cfg.train.aggregation, max_tokens=L, **dict(cfg.params))
    (grad,) = torch.autograd.grad(out.loss, th)
    grad_norm = float(grad.norm())
    clip = cfg.train.grad_clip
    if clip > 0 and grad_norm > clip:
        grad = grad * (clip / grad_norm)
    seq = table.detach().sum(1)                                                   # (N,) log π_θ(o)
    kl_b = policy.kl_of(seq_b, seq)
    by_group = rewards.view(K, G)
    row = {"train/reward_mean": float(rewards.mean()),
           "rollout/zero_adv_frac": float((by_group.max(1).values == by_group.min(1).values).double().mean()),
           "loss/value": float(out.loss.detach()), "opt/grad_norm": grad_norm, "lab/kl_behavior": kl_b,
           "policy/kl_behavior": kl_b / L, "policy/entropy": policy.entropy_of(seq) / L, **out.metrics}
    return theta - cfg.train.lr * grad, row


def eval_row(problem: policy.Problem, theta: torch.Tensor) -> dict[str, float]:
    J = float(policy.objective(problem, theta))
    return {"eval/acc": policy.normalized(problem, J), "lab/J": J}


def measurement_pair(cfg: "RunConfig", problem: policy.Problem, theta0: torch.Tensor) -> estimate.Pair:
    """The fixed (behavior, current) pair of this trial's measurement (module docstring)."""
    lab = cfg.lab or LabConfig()
    if lab.divergence == "kl":
        seed = cfg.seed if lab.problem_seed is None else lab.problem_seed
        return estimate.Pair.build(problem, theta0, policy.perturb_to_kl(problem, theta0, lab.kl, seed))
    theta = theta0.clone()
    for _ in range(cfg.delay):
        J = float(policy.objective(problem, theta))
        scale = estimate.target_scale(problem, J, cfg.group_size, cfg.train.advantage)
        theta = theta + cfg.train.lr * scale * policy.exact_gradient(problem, theta)
    return estimate.Pair.build(problem, theta, theta0)


def measurement_row(cfg: "RunConfig", problem: policy.Problem, theta0: torch.Tensor) -> dict[str, float]:
    lab = cfg.lab or LabConfig()
    pair = measurement_pair(cfg, problem, theta0)
    spec = estimate.Spec(cfg.algorithm, cfg.eps, tuple(sorted(dict(cfg.params).items())))
    res = estimate.measure(pair, {"est": spec}, G=cfg.group_size, n_groups=lab.measure_groups,
                           adv_mode=cfg.train.advantage, aggregation=cfg.train.aggregation,
                           seed=cfg.seed + 1, batch_groups=cfg.train.prompts_per_step,
                           max_loop_groups=lab.loop_groups)
    m = res["est"]
    row = {f"lab/{k}": m[k] for k in MEASURE_KEYS}
    row.update({f"lab/{k}_se": m[f"{k}_se"] for k in MEASURE_KEYS})
    row.update({"lab/cosine_mean": m["cosine_mean"], "lab/rel_bias": m["rel_bias"],
                "lab/pair_kl": res["pair"]["kl_behavior"], "lab/pair_chi2": res["pair"]["chi2"],
                "lab/target_norm": res["pair"]["target_norm"],
                "lab/measure_groups": m["n_groups"], "lab/batch_groups": m["batch_groups"],
                "lab/batched": m["batched"]})
    return row


class LabRun:
    """A lab trial, ready to run (spec/kinds.py Run). Lab trials are short and always start from step 0."""
    resume_step, base, eval_set_sha256 = 0, None, None

    def __init__(self, cfg: "RunConfig", log: "RunLog"):
        check_supported(cfg)
        torch.set_num_threads(cfg.train.threads)     # before the lifecycle's start records: provenance has the threads
        self.cfg, self.log = cfg, log

    def run(self, progress: bool = False) -> Outcome:
        """Train the synthetic policy with delayed SGD, log rows, measure."""
        return _train(self.cfg, self.log)


def _train(cfg: "RunConfig", log: "RunLog") -> Outcome:
    lab = cfg.lab or LabConfig()
    problem, theta0 = make_setup(cfg)
    gen = torch.Generator().manual_seed(int(cfg.seed))
    steps, d = cfg.train.steps, cfg.delay
    theta = theta0.clone()
    table = policy.token_logp_table(problem, theta)
    history = deque([table], maxlen=d + 1)                  # tables of θ_{max(0,t−d)} .. θ_t; [0] is π_b
    log.eval(0, eval_row(problem, theta))
    for t in range(steps):
        start = time.perf_counter()
        theta, row = train_step(cfg, problem, theta, history[0], gen)
        table = policy.token_logp_table(problem, theta)
        finite = math.isfinite(row["loss/value"]) and bool(torch.isfinite(table).all())
        staleness = float(min(t, d))
        row.update({"stale/mean": staleness, "stale/max": staleness,
                    "lab/J": float((table.sum(1).exp() * problem.rewards).sum()) if finite else math.nan,
                    "perf/step_s": time.perf_counter() - start})
        if not finite:
            log.metrics(t + 1, {**row, "loss/value": math.nan})
            return Outcome("diverged", t + 1, error="loss or policy is NaN/inf", diverged_step=t + 1)
        history.append(table)
        if (t + 1) % lab.log_every == 0 or t + 1 == steps:
            log.metrics(t + 1, row)
        if (t + 1) % cfg.eval.every_steps == 0 and t + 1 < steps:
            log.eval(t + 1, eval_row(problem, theta))
    final = eval_row(problem, theta)
    if lab.measure_groups > 0:
        final.update(measurement_row(cfg, problem, theta0))
    log.eval(steps, final)
    return Outcome("completed", steps)
