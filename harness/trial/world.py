"""The processes a trial's trainer runs in: one (`Solo`) or a torch.distributed group (`Group`).

A trial of `train.workers` N samples each step's P prompts in N shards of P/N whole prompt groups, shard
s with its own seed (trainer.make_batch). Which process samples which shard is all that differs:

    Solo    one process samples every shard and trains on every row (`stalebench train`, and any trial
            of one worker: with N = 1 there is one shard and the trainer's code path is the original one)
    Group   N processes (Ray Train workers, DeepSpeed ZeRO across them): rank r samples and scores shard r,
            the shards are gathered so that every rank holds the whole step batch, and rank r trains on
            its rows r·B/N .. (r+1)·B/N with the step's global denominators

so a trial's numbers do not depend on how many processes ran it, up to float rounding (the gradient
all-reduce adds the ranks' partial gradients in another order; tests/test_workers.py measures it).
Every method is a collective in a Group: all ranks call it, in the same order. Only the main process
(rank 0) writes the trial's files.
"""
from __future__ import annotations

from typing import Any

import torch

from harness.errors import ConfigError


class Solo:
    """One process: every shard, every row; collectives are identities."""
    rank, size, is_main = 0, 1, True

    def shards(self, n: int) -> range:
        return range(n)

    def rows(self, batch_size: int) -> slice:
        return slice(0, batch_size)

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def cat(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def sum(self, x: float) -> float:
        return x

    def any(self, flag: bool) -> bool:
        return flag

    def sum_(self, tensors: list[torch.Tensor]) -> None:
        pass


class Group:
    """The processes of the default torch.distributed group, one per shard."""
    is_main: bool

    def __init__(self, workers: int):
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.is_main = self.rank == 0
        if self.size != workers:
            raise ConfigError(f"train.workers {workers}: the trial runs in a process group of {self.size}; "
                              f"start it with `stalebench run` (one Ray Train worker per train.workers)")
        # Tensor collectives on the backend's device: CPU tensors with gloo, CUDA ones with NCCL.
        nccl = dist.get_backend() == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")

    def shards(self, n: int) -> range:
        return range(self.rank, self.rank + 1)

    def rows(self, batch_size: int) -> slice:
        per = batch_size // self.size
        return slice(self.rank * per, (self.rank + 1) * per)

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj` (picklable; tensors on the CPU), in rank order."""
        out: list[Any] = [None] * self.size
        self.dist.all_gather_object(out, obj)
        return out

    def cat(self, t: torch.Tensor) -> torch.Tensor:
        """The ranks' equally shaped tensors concatenated along dim 0, in rank order."""
        parts = [torch.empty_like(t, device=self.device) for _ in range(self.size)]
        self.dist.all_gather(parts, t.detach().to(self.device).contiguous())
        return torch.cat(parts).to(t.device)

    def sum(self, x: float) -> float:
        t = torch.tensor([x], dtype=torch.float64, device=self.device)
        self.dist.all_reduce(t)
        return float(t)

    def any(self, flag: bool) -> bool:
        """Whether any rank's flag is set: every rank takes the same branch (a diverged step stops all)."""
        t = torch.tensor([float(flag)], device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return bool(t.item())

    def sum_(self, tensors: list[torch.Tensor]) -> None:
        """Sum each tensor over the ranks, in place (the workers' partial gradients of one step)."""
        for t in tensors:
            self.dist.all_reduce(t)


def world_for(workers: int) -> Solo | Group:
    """The Group when this process is one of several in a torch.distributed group, else Solo."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return Group(workers)
    return Solo()
