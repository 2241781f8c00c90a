"""The LLM trainer as a trial kind (harness/config/kinds.py): the default kind, claiming every config."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.registry import KINDS

if TYPE_CHECKING:
    from harness.config.run import RunConfig
    from harness.config.kinds import Run


@KINDS.register("llm")
class LlmKind:
    """A trial of the LLM trainer."""
    name = "llm"
    shares_on_policy = True

    @staticmethod
    def claims(cfg: RunConfig) -> bool:
        return True

    @staticmethod
    def validate(cfg: RunConfig) -> None:
        """RunConfig.validate covers every setting it reads; here, that the task holds the trial's train
        problems (trial/batches.py train_problems: task.train_size, else train.steps x train.prompts_per_step)."""
        size, key = cfg.task.train_size, "task.train_size"
        if size is None:
            size, key = cfg.train.steps * cfg.train.prompts_per_step, "train.steps x train.prompts_per_step"
        cfg.task.check_train_size(key, size)

    @staticmethod
    def needs_base(cfg: RunConfig) -> bool:
        return True

    @staticmethod
    def prepare(cfg: RunConfig, log: Any) -> Run:
        from harness.trial.trainer import TrainerRun
        return TrainerRun(cfg, log)

    @staticmethod
    def after_suite(suite_dir: Path) -> str | None:
        return None
