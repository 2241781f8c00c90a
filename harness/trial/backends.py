"""Training backends: how gradients are accumulated and the optimizer steps.

    backend.model          the module to call for training forwards
    backend.module         the plain transformers model (for generation and checkpoints)
    backend.backward(loss) accumulate the gradient of one micro-batch (its loss is already normalized by
                           the step's global denominators)
    backend.step() -> grad norm (before clipping); clips and applies the update

`torch` is a plain AdamW loop (with several workers, each holds the whole optimizer state and the workers'
gradients are summed before clipping). `deepspeed` (extra `gpu`, or `pip install deepspeed`) wraps the same AdamW
in a DeepSpeed engine with ZeRO stage 0-3 and optional CPU offload; it runs on CPU with the gloo
backend as well as on GPUs, in one process or across the workers of a multi-worker trial (world.py:
the engine all-reduces the workers' gradients; ZeRO 1-2 partition the optimizer state and gradients).
The estimator and trainer code are the same for both.
"""
from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.errors import ConfigError
from harness.registry import BACKENDS
from harness.store.safewrite import open_atomic
from harness.config.components import can
from harness.config.run import RunConfig
from harness.trial.world import Group, Solo


def _adamw(params, cfg: RunConfig) -> torch.optim.Optimizer:
    """torch's AdamW; for a forward that asks for it (lean3) its fused CPU kernel, whose square root is ATen's correctly rounded one
    (MKL's, in the per-tensor loop, is not, and differs between CPU vendors: docs/reproducibility.md §5)."""
    tc = cfg.train
    fused = {"fused": True} if can(cfg.forward, "fused_adamw") else {}   # v1 and v2 keep the call they were made with
    return torch.optim.AdamW(params, lr=tc.lr, betas=(tc.beta1, tc.beta2), weight_decay=tc.weight_decay, **fused)


def load_checkpoint(path: Path) -> dict:
    """A checkpoint written by a backend, unpickled with torch's weights-only loader: tensors, numbers,
    strings and containers, plus the few stalebench types a delay buffer holds (listed here). A crafted
    file cannot run code; a file that is not such a checkpoint is refused with one line."""
    from harness.trial.batches import Batch
    from harness.rollout.base import Rollout
    from harness.rollout.gap import EngineGap
    from harness.tasks.base import Problem

    try:                       # older checkpoints name Batch by the module that pickled it then
        with torch.serialization.safe_globals([Batch, (Batch, "harness.trainer.Batch"), (Batch, "harness.delay.Batch"),
                                               Rollout, Problem, EngineGap]):
            state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 — pickle errors of any kind: refuse the file, never execute it
        raise ValueError(f"{path}: not a loadable stalebench checkpoint ({type(exc).__name__}); delete it to "
                         f"restart the trial") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path}: not a stalebench checkpoint; delete it to restart the trial")
    return state


@BACKENDS.register("torch")
class TorchBackend:
    custom_forward = True          # runs the configured forward itself (the lean forwards need it)

    def __init__(self, model: torch.nn.Module, cfg: RunConfig, micro_batches: int, world: Solo | Group = Solo()):
        self.model = self.module = model
        self.world = world
        self.opt = _adamw(model.parameters(), cfg)
        self.clip = cfg.train.grad_clip if cfg.train.grad_clip > 0 else math.inf

    def zero_grad(self) -> None:
        self.opt.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> torch.Tensor:
        # Each worker's loss is normalized by the step's global denominators: the step's gradient is the sum.
        self.world.sum_([p.grad for p in self.model.parameters() if p.grad is not None])
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        if torch.isfinite(norm):
            self.opt.step()
        return norm

    def save(self, path: Path, extra: dict) -> None:
        if not self.world.is_main:              # every worker holds the same weights and optimizer state
            return
        with open_atomic(path) as f:            # a private temporary name beside it, renamed when whole
            torch.save({"model": self.module.state_dict(), "opt": self.opt.state_dict(), **extra}, f)

    def load(self, path: Path) -> dict:
        state = load_checkpoint(path)
        self.module.load_state_dict(state.pop("model"))
        self.opt.load_state_dict(state.pop("opt"))
        return state

    def remove_checkpoint(self, path: Path) -> None:
        path.unlink(missing_ok=True)


DS_TAG = "state"                   # the DeepSpeed checkpoint's tag: <trial>/checkpoint.ds/state/


@dataclass(frozen=True)
class DeepSpeedSettings:
    """`backend: {deepspeed: {...}}` (stored as model.zero_stage, model.zero_offload, their keys before
    backends had settings)."""
    zero_stage: int = 0                    # ZeRO stage 0..3
    zero_offload: bool = False             # keep the optimizer states on the CPU

    def validate(self, key: str) -> None:
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError(f"{key}.zero_stage: must be 0, 1, 2 or 3; got {self.zero_stage}")


@BACKENDS.register("deepspeed", settings=DeepSpeedSettings)
class DeepSpeedBackend:
    """A DeepSpeed engine around the model; gradient accumulation over the step's micro-batches (of this
    process's rows) and, with several workers, the gradient all-reduce between them."""

    def __init__(self, model: torch.nn.Module, cfg: RunConfig, micro_batches: int, world: Solo | Group = Solo()):
        try:
            import deepspeed
        except ImportError:
            raise ValueError("model.backend 'deepspeed' needs DeepSpeed: pip install deepspeed (or the gpu extra)") from None
        for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
            os.environ.setdefault(key, value)
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        if not torch.distributed.is_initialized():
            deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
        settings = cfg.backend.settings
        zero: dict = {"stage": settings.zero_stage}
        if settings.zero_offload:
            zero["offload_optimizer"] = {"device": "cpu"}
        self.micro_batches = micro_batches
        # The engine divides each micro-batch's gradient by gradient_accumulation_steps and averages the workers'
        # gradients; our losses are already normalized by the step's global denominators, so it must sum.
        self.loss_scale = micro_batches * world.size
        self.is_main = world.is_main
        ds_config = {
            "train_micro_batch_size_per_gpu": 1,          # bookkeeping only: the trainer forms its own micro-batches
            "gradient_accumulation_steps": micro_batches,
            "gradient_clipping": cfg.train.grad_clip,
            "zero_optimization": zero,
            "zero_allow_untested_optimizer": True,        # the same torch AdamW as the torch backend
            "bf16": {"enabled": cfg.model.dtype == "bfloat16"},
            "steps_per_print": 10**9,
        }
        self.model, self.opt, _, _ = deepspeed.initialize(model=model, optimizer=_adamw(model.parameters(), cfg),
                                                          config=ds_config)
        self.module = self.model.module

    def zero_grad(self) -> None:
        pass                                    # the engine zeroes gradients after each optimizer step

    def backward(self, loss: torch.Tensor) -> None:
        self.model.backward(loss * self.loss_scale)
        if self.model.is_gradient_accumulation_boundary():
            # ZeRO-0 keeps full gradients on the parameters and records no norm: measure it before the step.
            grads = [p.grad for p in self.module.parameters() if p.grad is not None]
            self._norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])) if grads else None
        self.model.step()                       # a real step only at the accumulation boundary

    def step(self) -> torch.Tensor:
        norm = self.model.get_global_grad_norm()
        if norm is None:
            norm = self._norm
        return torch.as_tensor(float("nan") if norm is None else float(norm))

    def save(self, path: Path, extra: dict) -> None:
        # Every worker writes its part. A named tag, and no DeepSpeed `latest` file: that file would be
        # <dir>/latest, the tag directory itself.
        self.model.save_checkpoint(str(path.with_suffix(".ds")), tag=DS_TAG, client_state=extra, save_latest=False)
        if self.is_main:                        # the marker last: its presence means every worker's part is written
            torch.save({"deepspeed": True, **extra}, path)

    def load(self, path: Path) -> dict:
        if "identity" not in load_checkpoint(path):   # the marker carries the trial's identity too
            raise ValueError(f"{path}: not a stalebench DeepSpeed checkpoint marker; delete it to restart the trial")
        _, client_state = self.model.load_checkpoint(str(path.with_suffix(".ds")), tag=DS_TAG)
        return dict(client_state or {})

    def remove_checkpoint(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        shutil.rmtree(path.with_suffix(".ds"), ignore_errors=True)


def make_backend(model: torch.nn.Module, cfg: RunConfig, micro_batches: int,
                 world: Solo | Group = Solo()) -> TorchBackend | DeepSpeedBackend:
    """The configured backend (model.backend); `micro_batches` per step on this process's rows of the batch
    (world.rows)."""
    return BACKENDS.get(cfg.backend.name, "backend")(model, cfg, micro_batches, world)
