"""Trial kinds: what a trial *is* run by, behind one interface, so that no other module asks `if lab:`.

    llm   the LLM trainer (harness/trial/kind.py): rollouts of a causal LM on a task from a verified base
    lab   the estimator lab (harness/lab/kind.py): delayed SGD on a synthetic tabular policy; its suites
          also get fixed-policy sweeps after their trials

A kind answers, for a resolved run config:

    claims(cfg)                        whether the config is of this kind (the kind registered last that
                                       claims it wins; llm, registered first, claims every config)
    validate(cfg)                      what the kind cannot honour, as a one-line ConfigError — at check
                                       time, for every trial of the suite (suite.resolve_config)
    shares_on_policy                   whether its delay-0 trials of every estimator are one trial
                                       (suite `share_on_policy`: equal gradients); a lab trial measures
                                       each estimator's bias, so it does not
    needs_base(cfg)                    whether it starts from a base checkpoint the driver verifies
    prepare(cfg, log) -> Run           build the trial and resume it from its checkpoint; the lifecycle
                                       records the Run's start (resume_step, base, eval_set_sha256), then
                                       calls run.run(progress) -> trialdir.Outcome (trial/lifecycle.py)
    after_suite(suite_dir)             a step after the suite's trials (a console line or None)

Each kind registers itself in `KINDS` from its own package (harness/registry.py); importing this module
imports no torch (each kind imports its machinery when it runs).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.registry import KINDS, claimant

if TYPE_CHECKING:
    from harness.config.run import RunConfig
    from harness.store.trialdir import Outcome


class Run(Protocol):
    """A trial built and resumed, ready to run."""
    resume_step: int                   # the step its checkpoint resumes from (0: a fresh start)
    base: dict | None                  # the verified base's name and sha256 (None: no base)
    eval_set_sha256: str | None        # the held-out set's hash (None: none)

    def run(self, progress: bool = False) -> Outcome: ...


class TrialKind(Protocol):
    name: str
    shares_on_policy: bool

    def claims(self, cfg: RunConfig) -> bool: ...
    def validate(self, cfg: RunConfig) -> None: ...
    def needs_base(self, cfg: RunConfig) -> bool: ...
    def prepare(self, cfg: RunConfig, log: Any) -> Run: ...
    def after_suite(self, suite_dir: Path) -> str | None: ...


def kinds() -> list[TrialKind]:
    return [kind for _, kind in KINDS]


def kind_of(cfg: RunConfig) -> TrialKind:
    """The kind that runs `cfg`: the last registered kind that claims it."""
    return claimant(KINDS, cfg)


def suite_kinds(configs: list[RunConfig]) -> list[TrialKind]:
    """The distinct kinds of a suite's trial configs, in registration order."""
    names = {kind_of(c).name for c in configs}
    return [k for k in kinds() if k.name in names]
