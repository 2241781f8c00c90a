"""One training run: rollout → reward → group advantages → estimator → AdamW update, with an exact delay.

Reads like CleanRL's loop: `train()` at the bottom is the whole run; `Trainer.update` is one optimizer
update and fits on a screen. Everything the run does is set by its RunConfig. Metrics (names in
docs/metrics.md) go to the trial's RunLog, one row per consumed batch.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from algorithms import LossInputs, aggregate, compute_loss, group_advantages, prepare_context

from .backends import make_backend
from .config import RunConfig, to_dict
from .delay import AsyncProducer, DelayBuffer
from .models import load_model, model_path
from .rollout import make_engine
from .rollout.base import Rollout
from .rollout.hf import position_ids_from
from .tasks import Problem, task_from_config
from .tracking import RunLog


class Diverged(Exception):
    """The loss or the gradient became NaN/inf: the run stops and is recorded as diverged."""


@dataclass
class Batch:
    index: int
    problems: list[Problem]
    rollout: Rollout
    rewards: torch.Tensor          # (B,)
    group_ids: torch.Tensor        # (B,)
    engine_gap: float | None = None   # max |engine log-prob − trainer recomputation| (external engines)


def batch_seed(seed: int, index: int) -> int:
    return (seed * 1_000_003 + index) % (2**63 - 1)


def token_logp(model: torch.nn.Module, r: Rollout, rows: slice, temperature: float, group_size: int = 1
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(response token) and the policy entropy per response token, both (b, T), for rows `rows`.

    When the rows hold whole groups (responses of one prompt are `group_size` consecutive rows), each
    prompt is run once and its KV cache repeated over the group, which roughly halves the cost of the
    update on short responses; values agree with a full forward to float rounding (tests check 1e-5).
    """
    prompt_ids, response_ids = r.prompt_ids[rows], r.response_ids[rows]
    prompt_mask, response_mask = r.prompt_mask[rows], r.response_mask[rows].long()
    b, T = response_ids.shape
    attn = torch.cat([prompt_mask, response_mask], dim=1)
    if group_size > 1 and b % group_size == 0 and (rows.start or 0) % group_size == 0:
        unique_mask = prompt_mask[::group_size]
        out = model(input_ids=prompt_ids[::group_size], attention_mask=unique_mask,
                    position_ids=position_ids_from(unique_mask), use_cache=True, logits_to_keep=1)
        cache = out.cache
        cache.batch_repeat_interleave(group_size)
        logits = out.logits.repeat_interleave(group_size, 0)                              # (b, 1, V)
        if T > 1:
            positions = prompt_mask.sum(-1, keepdim=True) + torch.arange(T - 1, device=attn.device)
            rest = model(input_ids=response_ids[:, :-1], attention_mask=attn[:, :-1], position_ids=positions,
                         cache=cache, use_cache=True).logits                                 # (b, T-1, V)
            logits = torch.cat([logits, rest], dim=1)
    else:
        logits = model(input_ids=torch.cat([prompt_ids, response_ids], 1), attention_mask=attn,
                       position_ids=position_ids_from(attn), logits_to_keep=T + 1).logits[:, :-1]
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)                    # (b, T, V)
    logp = logprobs.gather(2, response_ids.unsqueeze(2)).squeeze(2)
    with torch.no_grad():
        entropy = -(logprobs.exp() * logprobs).sum(-1)
    return logp, entropy


class Trainer:
    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        path = model_path(cfg.model, cfg.task)
        self.device = torch.device("cuda" if torch.cuda.is_available() and cfg.model.device != "cpu" else "cpu")
        self.model, self.tokenizer = load_model(path, cfg.model.dtype)
        self.model.to(self.device).train()
        self.ref_model = load_model(path, cfg.model.dtype)[0].to(self.device).eval() if cfg.train.kl_beta > 0 else None
        self.task = task_from_config(cfg.task.name, cfg.task.eval_size, cfg.task.data_dir)
        tc = cfg.train
        self.train_problems = self.task.problems("train", tc.steps * tc.prompts_per_step if cfg.task.train_size is None
                                                 else cfg.task.train_size, cfg.seed)
        self.eval_problems = self.task.problems("eval", cfg.eval.size or cfg.task.eval_size, 0)
        B = tc.prompts_per_step * cfg.group_size
        self.backend = make_backend(self.model, cfg, micro_batches=-(-B // (tc.micro_batch_size or B)))
        self.engine = make_engine(cfg.model.engine, self.model, self.tokenizer, path, dtype=cfg.model.dtype,
                                  gpu_memory_utilization=cfg.model.gpu_memory_utilization, seed=cfg.seed)
        self.version = 0          # optimizer updates applied so far
        self.batches_done = 0
        self.source: DelayBuffer | AsyncProducer = DelayBuffer(cfg.delay, tc.updates_per_batch, tc.steps, self.make_batch)

    def start_async(self) -> None:
        """Replace the exact delay buffer by a concurrent producer (config `async`), from the current state."""
        tc = self.cfg.train
        self.source = AsyncProducer(self.model, self.cfg.async_.max_staleness, tc.updates_per_batch, tc.steps,
                                    self.make_batch,
                                    start_batch=self.batches_done, start_version=self.version)

    # -- rollouts ----------------------------------------------------------------------------
    def make_batch(self, index: int, model: torch.nn.Module | None = None, version: int | None = None) -> Batch:
        """Batch `index`: its prompts (fixed by seed and index) sampled G times by the current policy
        (or by `model` as `version`: the asynchronous producer's copy)."""
        cfg, P = self.cfg, self.cfg.train.prompts_per_step
        problems = [self.train_problems[(index * P + j) % len(self.train_problems)] for j in range(P)]
        model, version = (self.model, self.version) if model is None else (model, version)
        with self.engine.pinned(model, version) as engine:
            r = engine.generate([p.prompt for p in problems], n=cfg.group_size, temperature=cfg.train.temperature,
                                max_new_tokens=cfg.train.max_new_tokens, seed=batch_seed(cfg.seed, index))
        gap = None
        if not engine.shares_weights:
            # An engine with its own copy of the weights (vLLM) generated with `model`'s: measure the gap between
            # its log-probs and the trainer's recomputation, and optionally train on the recomputed ones.
            r = r.to(self.device)
            with torch.no_grad():
                recomputed = token_logp(model, r, slice(None), cfg.train.temperature, cfg.group_size)[0]
            gap = float((recomputed - r.logp_behavior.to(recomputed.device))[r.response_mask].abs().max())
            if cfg.model.behavior_logp == "recompute":
                r.logp_behavior = recomputed * r.response_mask
        rewards = torch.tensor([self.task.reward(text, problems[i // cfg.group_size]) for i, text in enumerate(r.texts)])
        group_ids = torch.arange(len(problems)).repeat_interleave(cfg.group_size)
        return Batch(index, problems, r.to(self.device), rewards.to(self.device), group_ids.to(self.device), gap)

    # -- one optimizer update ----------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        cfg, tc = self.cfg, self.cfg.train
        r = batch.rollout
        B = r.response_ids.shape[0]
        adv = group_advantages(batch.rewards, batch.group_ids, tc.advantage)                 # (B,)
        mask = r.response_mask
        micro = tc.micro_batch_size or B
        context = None
        if micro < B:                       # batch statistics once over the whole step batch
            with torch.no_grad():
                logp_prox = torch.cat([token_logp(self.backend.model, r, slice(i, i + micro), tc.temperature, cfg.group_size)[0]
                                       for i in range(0, B, micro)])
            context = prepare_context(cfg.algorithm, LossInputs(logp_prox, r.logp_behavior, adv, mask, batch.group_ids),
                                      eps=cfg.eps, **cfg.params)
        self.backend.zero_grad()
        totals = {"total_tokens": float(mask.sum()), "total_seqs": float(B)}
        loss_sum, metric_sums, logps, entropies = 0.0, {}, [], []
        for i in range(0, B, micro):
            rows = slice(i, i + micro)
            logp, entropy = token_logp(self.backend.model, r, rows, tc.temperature, cfg.group_size)
            if not torch.isfinite(logp.detach()[mask[rows]]).all():
                raise Diverged("policy log-probs are NaN/inf")
            inp = LossInputs(logp, r.logp_behavior[rows], adv[rows], mask[rows], batch.group_ids[rows])
            out = compute_loss(cfg.algorithm, inp, eps=cfg.eps, aggregation=tc.aggregation, max_tokens=tc.max_new_tokens,
                               context=None if context is None else context.rows(rows), **totals, **cfg.params)
            loss = out.loss + self._kl_penalty(r, rows, logp, totals)
            if not torch.isfinite(loss):
                raise Diverged("loss is NaN/inf")
            self.backend.backward(loss)
            share = (min(i + micro, B) - i) / B
            loss_sum += float(loss.detach())
            for k, v in out.metrics.items():
                metric_sums[k] = metric_sums.get(k, 0.0) + share * v
            logps.append(logp.detach())
            entropies.append(entropy)
        grad_norm = self.backend.step()
        if not torch.isfinite(grad_norm):
            raise Diverged("gradient norm is NaN/inf")
        logp = torch.cat(logps)
        return {"loss/value": loss_sum, "opt/grad_norm": float(grad_norm),
                **policy_metrics(logp, r.logp_behavior, mask, torch.cat(entropies)), **metric_sums}

    def _kl_penalty(self, r: Rollout, rows: slice, logp: torch.Tensor, totals: dict[str, float]) -> torch.Tensor:
        """β · KL(π_θ ‖ π_ref) per token with the k3 estimator, aggregated like the policy loss."""
        if self.ref_model is None:
            return torch.zeros(())
        with torch.no_grad():
            ref = token_logp(self.ref_model, r, rows, self.cfg.train.temperature, self.cfg.group_size)[0]
        kl = torch.exp(ref - logp) - (ref - logp) - 1
        return self.cfg.train.kl_beta * aggregate(kl, r.response_mask[rows], self.cfg.train.aggregation,
                                                  max_tokens=self.cfg.train.max_new_tokens, **totals)

    # -- evaluation --------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        with self.engine.pinned(self.model, self.version) as engine:     # the producer may share the engine
            return self._evaluate(engine)

    def _evaluate(self, engine) -> dict[str, float]:
        problems = self.eval_problems
        out = engine.generate([p.prompt for p in problems], n=1, temperature=0.0,
                              max_new_tokens=self.cfg.train.max_new_tokens, seed=0)
        rewards = [self.task.reward(t, p) for t, p in zip(out.texts, problems)]
        row = {"eval/acc": sum(r >= 1.0 for r in rewards) / len(rewards), "eval/reward_mean": sum(rewards) / len(rewards),
               "eval/len_mean": float(out.response_mask.sum(1).float().mean())}
        k = self.cfg.eval.pass_k
        if k:
            sampled = engine.generate([p.prompt for p in problems], n=k, temperature=1.0,
                                      max_new_tokens=self.cfg.train.max_new_tokens, seed=1)
            hits = torch.tensor([self.task.reward(t, problems[i // k]) >= 1.0 for i, t in enumerate(sampled.texts)])
            row[f"eval/pass_at_{k}"] = float(hits.view(len(problems), k).any(1).float().mean())
        return row

    # -- checkpoints -------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        self.backend.save(path, {"source": self.source.state_dict(), "version": self.version,
                                 "batches_done": self.batches_done})

    def load(self, path: Path) -> None:
        state = self.backend.load(path)
        self.source.load_state_dict(state["source"])
        self.version, self.batches_done = state["version"], state["batches_done"]


def policy_metrics(logp: torch.Tensor, logp_behavior: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor) -> dict[str, float]:
    """Estimator-independent diagnostics of π_θ against π_b on the batch."""
    lam = (logp - logp_behavior) * mask                                   # (B, T)
    traj = lam.sum(1)                                                     # Λ_i
    ess = torch.exp(2 * torch.logsumexp(traj, 0) - torch.logsumexp(2 * traj, 0)) / traj.numel()
    m = mask.float()
    return {"policy/entropy": float((entropy * m).sum() / m.sum()),
            "policy/kl_behavior": float(((torch.exp(lam) - 1 - lam) * m).sum() / m.sum()),
            "is/ratio_max": float(torch.exp(lam.masked_fill(~mask, -torch.inf).max().clamp(max=80))),
            "is/ess_frac": float(ess)}


def rollout_metrics(batch: Batch, version: int) -> dict[str, float]:
    r = batch.rollout
    staleness = (version - r.version).float()
    rewards = batch.rewards.view(-1, len(batch.rewards) // len(batch.problems))
    return {"train/reward_mean": float(batch.rewards.mean()),
            "rollout/len_mean": float(r.response_mask.sum(1).float().mean()),
            "rollout/zero_adv_frac": float((rewards.max(1).values == rewards.min(1).values).float().mean()),
            "stale/mean": float(staleness.mean()), "stale/max": float(staleness.max()),
            "perf/rollout_s": r.seconds, "perf/tokens_per_s": r.num_tokens / max(r.seconds, 1e-9),
            **({} if batch.engine_gap is None else {"is/engine_gap_max": batch.engine_gap})}


def train(cfg: RunConfig, log: RunLog, params: dict[str, Any], progress: bool = False) -> str:
    """Run (or resume from its checkpoint) one trial; returns its final status: completed or diverged.

    `params` is the trial's grid point (written to params.json for reports).
    """
    torch.set_num_threads(cfg.train.threads)
    trainer = Trainer(cfg)
    ckpt = log.dir / "checkpoint.pt"
    if ckpt.exists():
        trainer.load(ckpt)
    log.start(to_dict(cfg), params, resume_step=trainer.batches_done)
    if trainer.batches_done == 0:
        log.eval(0, trainer.evaluate())
    if cfg.async_ is not None:
        trainer.start_async()
    try:
        return _loop(trainer, log, ckpt, progress)
    finally:
        trainer.source.close()


def _loop(trainer: Trainer, log: RunLog, ckpt: Path, progress: bool) -> str:
    cfg = trainer.cfg
    steps, k = cfg.train.steps, cfg.train.updates_per_batch
    bar = _progress(steps, trainer.batches_done, progress)
    for s in range(trainer.batches_done, steps):
        start = time.perf_counter()
        rows = []
        try:
            for j in range(k):
                trainer.source.ready(trainer.version)
                if j == 0:
                    batch = trainer.source.take(s)
                row = rollout_metrics(batch, trainer.version)
                row.update(trainer.update(batch))
                trainer.version += 1
                rows.append(row)
        except Diverged as exc:
            log.metrics(s + 1, {"loss/value": float("nan"), **rollout_metrics(batch, trainer.version)})
            log.status("diverged", step=s + 1, error=str(exc), diverged_step=s + 1)
            return "diverged"
        row = {key: sum(r[key] for r in rows) / k for key in rows[0]}
        row["stale/max"] = max(r["stale/max"] for r in rows)
        row["perf/step_s"] = time.perf_counter() - start
        trainer.batches_done = s + 1
        log.metrics(s + 1, row)
        if (s + 1) % cfg.eval.every_steps == 0 or s + 1 == steps:
            log.eval(s + 1, trainer.evaluate())
        if cfg.train.checkpoint_every and (s + 1) % cfg.train.checkpoint_every == 0 and s + 1 < steps:
            trainer.save(ckpt)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(reward=f"{row['train/reward_mean']:.2f}", stale=int(row["stale/max"]))
    if bar is not None:
        bar.close()
    log.status("completed", step=steps)
    ckpt.unlink(missing_ok=True)
    shutil.rmtree(ckpt.with_suffix(".ds"), ignore_errors=True)     # DeepSpeed's checkpoint directory
    return "completed"


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, desc="train", unit="step")
