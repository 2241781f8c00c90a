"""One training run: rollout → reward → group advantages → estimator → AdamW update, with an exact delay.

Reads like CleanRL's loop: `Trainer.__init__` builds the trial's components from its RunConfig in one
place, `TrainerRun.run` at the bottom is the whole run (source -> rollout -> reward -> estimator -> update
-> metrics), and `Trainer.update` is one optimizer update that fits on a screen. Metrics (names in
docs/metrics.md) go to the trial's RunLog, one row per consumed batch.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from algorithms import LossInputs, aggregate, compute_loss, group_advantages, prepare_context, uses_batch_statistics
from algorithms.proximal import interpolate_proximal

from harness.config.components import source_of
from harness.registry import MODELS
from harness.bases import base_identity
from harness.bases.models import load_model, problems_sha256
from harness.rollout import EngineSettings, make_engine, token_logp_of
from harness.rollout.base import Rollout
from harness.rollout.hf import enable_checkpointing
from harness.rollout.mismatch import MismatchEngine
from harness.config.run import RunConfig
from harness.config.dicts import to_dict
from harness.config.trace import trace_line
from harness.store.tracking import RunLog
from harness.store.trialdir import (CHECKPOINT, IS_HIST, TRACE, Outcome, TrialDirError, config_sha256, policy_dir,
                                    truncate_side_rows)
from harness.trial.backends import make_backend
from harness.trial.batches import Batch, Batches, train_problems
from harness.trial.metrics import (add_histograms, combine_metrics, importance_diagnostics, policy_metrics,
                                   rollout_metrics, token_age_histogram)
from harness.trial.staleness import Source, schedules_of
from harness.trial.world import world_for


class Diverged(Exception):
    """The loss or the gradient became NaN/inf: the run stops and is recorded as diverged."""


class Trainer:
    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        path, self.base = base_identity(cfg.model)
        self.device = torch.device("cuda" if torch.cuda.is_available() and cfg.model.device != "cpu" else "cpu")
        self.model, self.tokenizer = load_model(path, cfg.model.dtype)
        self.model.to(self.device).train()
        if cfg.model.gradient_checkpointing:          # each layer recomputed in the backward (model.gradient_checkpointing)
            enable_checkpointing(self.model)
        self.ref_model = load_model(path, cfg.model.dtype)[0].to(self.device).eval() if cfg.train.kl_beta > 0 else None
        self.task = cfg.task.build()
        tc = cfg.train
        self.train_problems = train_problems(cfg, self.task)
        test = cfg.eval.split == "test"
        self.eval_problems = cfg.eval.problems(cfg.task, self.task)
        self.eval_set_sha256 = problems_sha256(self.eval_problems)
        if test:                                  # the frozen base's fixed eval set, where it has one
            MODELS.get(cfg.model.kind).check_eval_set(path, self.eval_set_sha256, len(self.eval_problems))
        B = tc.prompts_per_step * cfg.group_size
        self.world = world_for(tc.workers)        # this process and its rows of each step (world.py)
        own = self.world.rows(B)
        micro_batches = -(-(own.stop - own.start) // (tc.micro_batch_size or B))      # per step, on this process
        self.backend = make_backend(self.model, cfg, micro_batches=micro_batches, world=self.world)
        self.engine = make_engine(cfg.engine.name, self.model, self.tokenizer, path,
                                  EngineSettings(cfg.forward.name, cfg.model.dtype, cfg.engine.settings), cfg.seed)
        # the trainer's log-probs: the forward, full logits or chunks through the head (model.logp_chunk_tokens)
        self.token_logp = token_logp_of(cfg.forward.name, cfg.model.logp_chunk_tokens)
        # training rollouts: the engine, or a copy of it whose log-probs differ from the trainer's (evaluation: the engine)
        sampler = self.engine if cfg.mismatch is None else MismatchEngine(self.tokenizer, seed=cfg.seed,
                                                                            **to_dict(cfg.mismatch))
        self.batches = Batches(seed=cfg.seed, prompts=tc.prompts_per_step, group_size=cfg.group_size, shards=tc.workers,
                               temperature=tc.temperature, max_new_tokens=tc.max_new_tokens,
                               problems=self.train_problems, task=self.task, sampler=sampler,
                               token_logp=self.token_logp,
                               recompute_behavior=cfg.behavior_logp == "recompute",
                               pad_token_id=self.tokenizer.pad_token_id, device=self.device, world=self.world)
        self.version = 0          # optimizer updates applied so far
        self.histogram: dict[str, list[int]] | None = None   # the current batch's log ρ histograms (is_hist.jsonl)
        self.batches_done = 0
        self.kept: dict[str, Any] | None = None   # the kept policy (train.save): its step and eval/acc
        self.source: Source | None = None         # started by TrainerRun.run, after a resume

    def start_source(self, state: dict[str, Any] | None = None) -> Source:
        """Start the staleness source that serves this config (staleness.py), from the current version and batch
        (after a resume), with its checkpointed `state`."""
        self.source = source_of(self.cfg).build(self.cfg, self.batches, self.model, self.batches_done, self.version)
        if state is not None:
            self.source.load_state_dict(state)
        return self.source

    def make_batch(self, index: int) -> Batch:
        """Batch `index` sampled by the current policy (on-policy; benchmarks and tests)."""
        return replace(self.batches.sample(index, self.model, self.version), version_start=self.version)

    # -- one optimizer update ----------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        cfg, tc = self.cfg, self.cfg.train
        r = batch.rollout
        B = r.response_ids.shape[0]
        adv = group_advantages(batch.rewards, batch.group_ids, tc.advantage)                 # (B,)
        mask = r.response_mask
        micro = tc.micro_batch_size or B
        own = self.world.rows(B)              # the rows this process trains on (all B in one process)
        context = None
        if micro < B or (own.stop - own.start < B and uses_batch_statistics(cfg.algorithm)):
            # batch statistics once over the whole step batch
            now = self.logp_now(r)
            context = prepare_context(cfg.algorithm, LossInputs(now, r.logp_behavior, adv, mask, batch.group_ids,
                                                                self._proximal(batch, slice(None), now), r.logp_rollout),
                                      eps=cfg.eps, **cfg.params)
        self.backend.zero_grad()
        totals = {"total_tokens": float(mask.sum()), "total_seqs": float(B)}
        loss_sum, parts, logps, entropies = 0.0, [], [], []
        for i in range(own.start, own.stop, micro):
            rows = slice(i, min(i + micro, own.stop))
            logp, entropy = self.token_logp(self.backend.model, r, rows, tc.temperature, cfg.group_size)
            if self.world.any(not torch.isfinite(logp.detach()[mask[rows]]).all()):
                raise Diverged("policy log-probs are NaN/inf")
            inp = LossInputs(logp, r.logp_behavior[rows], adv[rows], mask[rows], batch.group_ids[rows],
                             self._proximal(batch, rows, logp.detach()),
                             None if r.logp_rollout is None else r.logp_rollout[rows])
            out = compute_loss(cfg.algorithm, inp, eps=cfg.eps, aggregation=tc.aggregation, max_tokens=tc.max_new_tokens,
                               context=None if context is None else context.rows(rows), **totals, **cfg.params)
            loss = out.loss + self._kl_penalty(r, rows, logp, totals)
            if self.world.any(not torch.isfinite(loss)):
                raise Diverged("loss is NaN/inf")
            self.backend.backward(loss)
            loss_sum += float(loss.detach())
            parts.append(((rows.stop - i) / B, out.metrics))
            logps.append(logp.detach())
            entropies.append(entropy)
        grad_norm = self.backend.step()           # of the whole step's gradient (all-reduced across processes)
        if self.world.any(not torch.isfinite(grad_norm)):
            raise Diverged("gradient norm is NaN/inf")
        logp, entropy = self.world.cat(torch.cat(logps)), self.world.cat(torch.cat(entropies))   # (B, T)
        parts = [part for rank_parts in self.world.gather(parts) for part in rank_parts]
        diagnostics, histogram = importance_diagnostics(logp, r.logp_behavior, mask, entropy, adv, batch.group_ids, cfg.eps)
        self.histogram = add_histograms(self.histogram, histogram)         # this batch's is_hist.jsonl row
        return {"loss/value": self.world.sum(loss_sum), "opt/grad_norm": float(grad_norm),
                **combine_metrics(parts), **policy_metrics(logp, r.logp_behavior, mask, entropy), **diagnostics}

    def _proximal(self, batch: Batch, rows: slice, logp: torch.Tensor) -> torch.Tensor | None:
        """log π_prox of `rows` (train.prox_logp): recompute, the batch's recomputed one (None with one update per
        batch: π_θ detached); loglinear | linear, AReaL's A-3PO interpolation from π_rollout (AReaL's old_logp),
        π_θ (`logp`, detached) and the tokens' versions, with v_θ the version at the batch's first update."""
        method = self.cfg.train.prox_logp
        if method == "recompute":
            return None if batch.logp_proximal is None else batch.logp_proximal[rows]
        r = batch.rollout
        old = r.logp_behavior if r.logp_rollout is None else r.logp_rollout
        versions = r.version[:, None].expand_as(old) if r.token_version is None else r.token_version
        return interpolate_proximal(old[rows], logp, versions[rows], batch.version_start, method)

    @torch.no_grad()
    def logp_now(self, r: Rollout) -> torch.Tensor:
        """log π of the batch's tokens under the current parameters, (B, T), without grad (each process
        computes its rows)."""
        micro, B = self.cfg.train.micro_batch_size or r.response_ids.shape[0], r.response_ids.shape[0]
        own = self.world.rows(B)
        return self.world.cat(torch.cat([self.token_logp(self.backend.model, r, slice(i, min(i + micro, own.stop)),
                                                         self.cfg.train.temperature, self.cfg.group_size)[0]
                                         for i in range(own.start, own.stop, micro)]))

    def _kl_penalty(self, r: Rollout, rows: slice, logp: torch.Tensor, totals: dict[str, float]) -> torch.Tensor:
        """β · KL(π_θ ‖ π_ref) per token with the k3 estimator, aggregated like the policy loss."""
        if self.ref_model is None:
            return torch.zeros(())
        with torch.no_grad():
            ref = self.token_logp(self.ref_model, r, rows, self.cfg.train.temperature, self.cfg.group_size)[0]
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
        row = {"eval/acc": sum(r >= 1.0 for r in rewards) / len(rewards), "eval/n": len(rewards),
               "eval/reward_mean": sum(rewards) / len(rewards),
               "eval/len_mean": float(out.response_mask.sum(1).float().mean())}
        k = self.cfg.eval.pass_k
        if k:
            sampled = engine.generate([p.prompt for p in problems], n=k, temperature=1.0,
                                      max_new_tokens=self.cfg.train.max_new_tokens, seed=1)
            hits = torch.tensor([self.task.reward(t, problems[i // k]) >= 1.0 for i, t in enumerate(sampled.texts)])
            row[f"eval/pass_at_{k}"] = float(hits.view(len(problems), k).any(1).float().mean())
        return row

    # -- checkpoints -------------------------------------------------------------------------
    def save(self, path: Path, identity: dict[str, str]) -> None:
        self.backend.save(path, {"source": self.source.state_dict() if self.source else {}, "version": self.version,
                                 "batches_done": self.batches_done, "identity": identity, "kept": self.kept})

    def load(self, path: Path, identity: dict[str, str]) -> dict[str, Any]:
        """Resume from `path`, refusing a checkpoint of another trial or of another config; returns the
        state of its staleness source."""
        state = self.backend.load(path)
        if state.get("identity") != identity:
            found = state.get("identity") or {}
            raise TrialDirError(f"{path}: checkpoint of trial {found.get('trial_id')!r} with config "
                                f"{str(found.get('config_sha256'))[:12]}, not of this trial {identity['trial_id']!r} "
                                f"with config {identity['config_sha256'][:12]}; delete it to restart the trial, or "
                                f"rerun with --rerun-changed/--force")
        self.version, self.batches_done, self.kept = state["version"], state["batches_done"], state.get("kept")
        return state["source"]

    def keep(self, policy_dir: Path, step: int, eval_row: dict[str, float]) -> None:
        """Save the policy (train.save) as a loadable transformers model directory, atomically."""
        save = self.cfg.train.save
        acc = eval_row.get("eval/acc", float("nan"))
        if save == "none" or (save == "final" and step < self.cfg.train.steps) or (
                save == "best" and self.kept is not None and not acc > self.kept["eval_acc"]):
            return
        tmp = policy_dir.with_name(policy_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.backend.module.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        shutil.rmtree(policy_dir, ignore_errors=True)
        os.replace(tmp, policy_dir)
        self.kept = {"path": policy_dir.name, "kind": save, "step": step, "eval_acc": acc}


class TrainerRun:
    """A trial of the LLM trainer, built and resumed from its checkpoint: what the trial's lifecycle records at
    its start (`resume_step`, `base`, `eval_set_sha256`; trial/lifecycle.py), then `run()`."""

    def __init__(self, cfg: RunConfig, log: RunLog):
        torch.set_num_threads(cfg.train.threads)
        self.trainer = trainer = Trainer(cfg)
        self.log, self.ckpt = log, log.dir / CHECKPOINT
        self.identity = {"trial_id": log.dir.name, "config_sha256": config_sha256(to_dict(cfg))}
        self.source_state = trainer.load(self.ckpt, self.identity) if self.ckpt.exists() else None
        truncate_side_rows(log.dir, trainer.batches_done)
        self.resume_step, self.base, self.eval_set_sha256 = trainer.batches_done, trainer.base, trainer.eval_set_sha256

    def run(self, progress: bool = False) -> Outcome:
        trainer, log = self.trainer, self.log
        if trainer.batches_done == 0:
            _evaluate(trainer, log, 0)
        trainer.start_source(self.source_state)
        try:
            outcome = _loop(trainer, log, self.ckpt, self.identity, progress)
        finally:
            trainer.source.close()
        if outcome.status == "completed" and trainer.world.is_main:
            trainer.backend.remove_checkpoint(self.ckpt)
        return replace(outcome, extra={"policy": trainer.kept}) if trainer.kept else outcome


def _loop(trainer: Trainer, log: RunLog, ckpt: Path, identity: dict[str, str], progress: bool) -> Outcome:
    cfg = trainer.cfg
    steps, k, m = cfg.train.steps, cfg.train.updates_per_batch, cfg.train.minibatches
    bar = _progress(steps, trainer.batches_done, progress and trainer.world.is_main)
    for s in range(trainer.batches_done, steps):
        start = time.perf_counter()
        rows = []
        try:
            for j in range(k):            # train.passes passes over the batch's train.minibatches minibatches
                trainer.source.ready(trainer.version)
                if j == 0:
                    batch = trainer.source.take(s)
                    if trainer.source.records_versions and trainer.world.is_main:
                        log.side(TRACE, s + 1, trace_line(schedules_of(batch.rollout)))
                    if k > 1 and cfg.train.prox_logp == "recompute":   # π_prox: the policy that starts consuming
                        batch.logp_proximal = trainer.logp_now(batch.rollout)   # the batch, for all its updates
                    batch.version_start = trainer.version
                    minibatches = batch.minibatches(m)
                part = minibatches[j % m]
                row = rollout_metrics(batch, trainer.version, part)
                row.update(trainer.update(part))
                trainer.histogram = add_histograms(trainer.histogram, token_age_histogram(part.rollout, trainer.version))
                trainer.version += 1
                rows.append(row)
        except Diverged as exc:
            log.metrics(s + 1, {"loss/value": float("nan"), **rollout_metrics(batch, trainer.version, part)})
            return Outcome("diverged", s + 1, error=str(exc), diverged_step=s + 1)
        row = combine_metrics([(1 / k, r) for r in rows])
        if trainer.world.is_main:
            log.side(IS_HIST, s + 1, trainer.histogram)
        trainer.histogram = None
        row["perf/step_s"] = time.perf_counter() - start
        trainer.batches_done = s + 1
        log.metrics(s + 1, row)
        if (s + 1) % cfg.eval.every_steps == 0 or s + 1 == steps:
            _evaluate(trainer, log, s + 1)
        if cfg.train.checkpoint_every and (s + 1) % cfg.train.checkpoint_every == 0 and s + 1 < steps:
            trainer.save(ckpt, identity)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(reward=f"{row['train/reward_mean']:.2f}", stale=int(row["stale/max"]))
    if bar is not None:
        bar.close()
    return Outcome("completed", steps)


def _evaluate(trainer: Trainer, log: RunLog, step: int) -> None:
    """The main process evaluates, logs and keeps the policy (every process holds the same weights)."""
    if trainer.world.is_main:
        row = trainer.evaluate()
        log.eval(step, row)
        trainer.keep(policy_dir(log.dir), step, row)


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, desc="train", unit="step")
