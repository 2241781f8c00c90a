"""Batches: a step's prompts sampled G times by one policy version (or each response by its own) and scored.

`Batches` is what every staleness source (staleness.py) generates with: it knows the trial's prompts,
engine, task and workers, and is told which policy (a model and its version) to sample with, so a source
never calls back into the trainer. Batch s's prompts and sampling seed are fixed by the trial seed and s;
with `train.workers` N the P prompts are N shards of whole groups, shard i sampled with its own seed by
the process holding it (world.py; one process holds them all when it runs such a trial alone).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable

import torch

from harness.config.inflight import Schedule
from harness.config.run import RunConfig
from harness.rollout import RolloutEngine, TokenLogp
from harness.rollout.base import Rollout
from harness.rollout.gap import EngineGap, measure
from harness.tasks import Problem, Task
from harness.trial.world import Group, Solo


def train_problems(cfg: RunConfig, task: Task) -> list[Problem]:
    """The trial's train problems, batch s taking P of them from s * P on: `task.train_size` of them, or
    by default one per prompt of the run (train.steps x train.prompts_per_step)."""
    tc = cfg.train
    size = tc.steps * tc.prompts_per_step if cfg.task.train_size is None else cfg.task.train_size
    return task.problems("train", size, cfg.seed)


@dataclass
class Batch:
    """One generated batch, as a staleness source holds it and the trainer consumes it (also in checkpoints)."""
    index: int
    problems: list[Problem]
    rollout: Rollout
    rewards: torch.Tensor          # (B,)
    group_ids: torch.Tensor        # (B,)
    engine_gap: EngineGap | None = None   # engine log-probs against the trainer's recomputation (external engines)
    logp_proximal: torch.Tensor | None = None   # (B, T) π_prox with several updates per batch (set at the first)
    version_start: int | None = None   # the trainer's version at the batch's first update (set then; A-3PO's v_θ)

    def minibatches(self, m: int) -> list["Batch"]:
        """The batch split into `m` minibatches of whole prompt groups, in row order (train.minibatches)."""
        if m == 1:
            return [self]
        per, rows = len(self.problems) // m, self.rewards.shape[0] // m
        parts = [slice(j * rows, (j + 1) * rows) for j in range(m)]
        return [Batch(self.index, self.problems[j * per:(j + 1) * per],
                      self.rollout.take(list(range(part.start, part.stop))), self.rewards[part], self.group_ids[part],
                      self.engine_gap, None if self.logp_proximal is None else self.logp_proximal[part],
                      self.version_start)
                for j, part in enumerate(parts)]


def batch_seed(seed: int, index: int) -> int:
    return (seed * 1_000_003 + index) % (2**63 - 1)


def shard_seed(seed: int, index: int, shard: int) -> int:
    """The sampling seed of shard `shard` of batch `index` with several workers (shard 0 keeps the batch's)."""
    return (batch_seed(seed, index) + shard * 0x9E3779B97F4A7C15) % (2**63 - 1)


class Batches:
    def __init__(self, *, seed: int, prompts: int, group_size: int, shards: int, temperature: float, max_new_tokens: int,
                 problems: list[Problem], task: Task, sampler: RolloutEngine, token_logp: TokenLogp,
                 recompute_behavior: bool, pad_token_id: int, device: torch.device, world: Solo | Group):
        self.seed, self.P, self.G, self.shards = seed, prompts, group_size, shards
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self.problems, self.task, self.sampler, self.token_logp = problems, task, sampler, token_logp
        self.recompute_behavior = recompute_behavior     # model.behavior_logp: recompute
        self.pad_token_id, self.device, self.world = pad_token_id, device, world

    def prompts_of(self, index: int) -> list[Problem]:
        return [self.problems[(index * self.P + j) % len(self.problems)] for j in range(self.P)]

    def sample(self, index: int, model: torch.nn.Module, version: int) -> Batch:
        """Batch `index` sampled G times per prompt by `model` as policy `version`."""
        problems, n = self.prompts_of(index), self.shards
        if n == 1:
            return self._sample(index, problems, batch_seed(self.seed, index), model, version)
        start, per = time.perf_counter(), self.P // n
        own = [_on_cpu(self._sample(index, problems[s * per:(s + 1) * per], shard_seed(self.seed, index, s), model,
                                    version)) for s in self.world.shards(n)]
        gathered = self.world.gather((own, time.perf_counter() - start))        # [(shards, seconds)] by rank
        shards = [b for bs, _ in gathered for b in bs]
        r = Rollout.concat([b.rollout for b in shards], self.pad_token_id)
        r.seconds = max(seconds for _, seconds in gathered)                      # the slowest process
        return Batch(index, problems, r.to(self.device), torch.cat([b.rewards for b in shards]).to(self.device),
                     torch.arange(self.P).repeat_interleave(self.G).to(self.device),
                     EngineGap.merge([b.engine_gap for b in shards]))

    def mixed(self, index: int, schedules: list[Schedule], model_at: Callable[[int], torch.nn.Module]) -> Batch:
        """Batch `index` with response i generated by the policy versions of schedules[i] (`model_at(v)`: that
        policy). One version in all: exactly `sample`; one per response: the rows of each version sampled
        together (n = 1 per row) with a seed of the batch and the version, put back in row order; several
        in a response (in-flight updates): the rows of each schedule likewise, the engine switching weights."""
        problems, seed = self.prompts_of(index), batch_seed(self.seed, index)
        if any(len(schedule) > 1 for schedule in schedules):
            return self._switching(index, problems, seed, schedules, model_at)
        versions = [schedule[0][1] for schedule in schedules]
        if len(set(versions)) == 1:
            return self._sample(index, problems, seed, model_at(versions[0]), versions[0])
        parts, order = [], []
        for v in sorted(set(versions)):
            rows = [i for i, x in enumerate(versions) if x == v]
            parts.append(self._generate([problems[i // self.G].prompt for i in rows], 1, shard_seed(seed, v, 1),
                                        model_at(v), v))
            order += rows
        return self._in_row_order(index, problems, parts, order)

    def _switching(self, index: int, problems: list[Problem], seed: int, schedules: list[Schedule],
                   model_at: Callable[[int], torch.nn.Module]) -> Batch:
        """The rows of each distinct schedule sampled together (n = 1 per row, seeded by the batch and the
        schedule's rank), the engine loading each segment's policy at its first token; put back in row order."""
        if not self.sampler.switches_midway:
            raise ValueError("responses of several policy versions need an engine that switches weights "
                             "mid-response; set model.forward: lean and model.engine: hf")
        # every version at once, each its own module (model_at may reload one shared copy)
        policy = {v: copy.deepcopy(model_at(v)) for v in sorted({v for sch in schedules for _, v in sch})}
        parts, order = [], []
        for rank, schedule in enumerate(sorted(set(schedules))):
            rows = [i for i, x in enumerate(schedules) if x == schedule]
            r = self.sampler.generate([problems[i // self.G].prompt for i in rows], n=1,
                                      temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                                      seed=shard_seed(seed, rank, 2),
                                      policies=[(first, policy[v], v) for first, v in schedule])
            if r.token_version is None:                     # a schedule of one segment among the others
                r.token_version = r.version[:, None].expand_as(r.response_ids).clone()
            parts.append((r, None))
            order += rows
        return self._in_row_order(index, problems, parts, order)

    def _in_row_order(self, index: int, problems: list[Problem], parts: list[tuple[Rollout, float | None]],
                      order: list[int]) -> Batch:
        r = Rollout.concat([part for part, _ in parts], self.pad_token_id).take(
            sorted(range(len(order)), key=order.__getitem__))
        r.seconds = sum(part.seconds for part, _ in parts)                       # the parts ran one after another
        return self._score(index, problems, r, EngineGap.merge([gap for _, gap in parts]))

    def _sample(self, index: int, problems: list[Problem], seed: int, model: torch.nn.Module, version: int) -> Batch:
        """`problems` sampled G times each with `seed`, scored: one batch (or one shard of it)."""
        r, gap = self._generate([p.prompt for p in problems], self.G, seed, model, version)
        return self._score(index, problems, r, gap)

    def _generate(self, prompts: list[str], n: int, seed: int, model: torch.nn.Module, version: int
                  ) -> tuple[Rollout, EngineGap | None]:
        """`prompts` sampled n times each by `model` as `version`, and the engine's log-prob gap (or None)."""
        with self.sampler.pinned(model, version) as engine:
            r = engine.generate(prompts, n=n, temperature=self.temperature, max_new_tokens=self.max_new_tokens,
                                seed=seed)
        gap = None
        if not engine.shares_weights:
            # An engine with its own copy of the weights (vLLM) generated with `model`'s: measure the gap between
            # its log-probs and the trainer's recomputation under the rule of the trainer's dtype (gap.py), and
            # optionally train on the recomputed ones.
            r = r.to(self.device)
            with torch.no_grad():
                recomputed = self.token_logp(model, r, slice(None), self.temperature, n)[0]
            gap = measure(r.logp_behavior, recomputed, r.response_mask, next(model.parameters()).dtype,
                          getattr(engine, "head_gap", None))     # the output layer's gap at its last push (vLLM)
            if self.recompute_behavior:
                r.logp_behavior = recomputed * r.response_mask
        return r, gap

    def _score(self, index: int, problems: list[Problem], r: Rollout, gap: EngineGap | None) -> Batch:
        rewards = torch.tensor([self.task.reward(text, problems[i // self.G]) for i, text in enumerate(r.texts)])
        group_ids = torch.arange(len(problems)).repeat_interleave(self.G)
        return Batch(index, problems, r.to(self.device), rewards.to(self.device), group_ids.to(self.device), gap)


def _on_cpu(b: Batch) -> Batch:
    return Batch(b.index, b.problems, b.rollout.to(torch.device("cpu")), b.rewards.cpu(), b.group_ids.cpu(), b.engine_gap)
