"""Trial kinds: what a trial *is* run by, behind one interface, so that no other module asks `if lab:`.

    llm   the LLM trainer (harness/trainer.py): rollouts of a causal LM on a task from a verified base
    lab   the estimator lab (harness/lab/kind.py): delayed SGD on a synthetic tabular policy; its suites
          also get fixed-policy sweeps after their trials and extra report sections

A kind answers, for a resolved run config:

    claims(cfg)                        whether the config is of this kind (the kind registered last that
                                       claims it wins; llm, registered first, claims every config)
    validate(cfg)                      what the kind cannot honour, as a one-line ConfigError — at check
                                       time, for every trial of the suite (suite.resolve_config)
    shares_on_policy                   whether its delay-0 trials of every estimator are one trial
                                       (suite `share_on_policy`: equal gradients); a lab trial measures
                                       each estimator's bias, so it does not
    needs_base(cfg)                    whether it starts from a base checkpoint the driver verifies
    run(cfg, log, start, progress)     train; returns the trialdir.Outcome (trial.run_trial's lifecycle)
    after_suite(suite_dir)             a step after the suite's trials (a console line or None)
    report_sections(results_dir, out)  (title, blocks) sections the report adds (read, never computed)

Importing this module imports no torch (each kind imports its machinery when it runs).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from .config import RunConfig
    from .trialdir import Outcome

Section = tuple[str, list[dict[str, Any]]]      # (title, blocks) as report/html.Section takes them


class TrialKind(Protocol):
    name: str
    shares_on_policy: bool

    def claims(self, cfg: RunConfig) -> bool: ...
    def validate(self, cfg: RunConfig) -> None: ...
    def needs_base(self, cfg: RunConfig) -> bool: ...
    def run(self, cfg: RunConfig, log: Any, start: Callable[..., None], progress: bool = False) -> Outcome: ...
    def after_suite(self, suite_dir: Path) -> str | None: ...
    def report_sections(self, results_dir: Path, out_dir: Path) -> list[Section]: ...


class LlmKind:
    """A trial of the LLM trainer: the default kind."""
    name = "llm"
    shares_on_policy = True

    def claims(self, cfg: RunConfig) -> bool:
        return True

    def validate(self, cfg: RunConfig) -> None:
        pass                                   # RunConfig.validate covers every setting it reads

    def needs_base(self, cfg: RunConfig) -> bool:
        return True

    def run(self, cfg: RunConfig, log: Any, start: Callable[..., None], progress: bool = False) -> Outcome:
        from .trainer import train
        return train(cfg, log, start, progress=progress)

    def after_suite(self, suite_dir: Path) -> str | None:
        return None

    def report_sections(self, results_dir: Path, out_dir: Path) -> list[Section]:
        return []                              # the report's own sections are the LLM trials'


_KINDS: dict[str, TrialKind] = {}


def register_kind(kind: TrialKind) -> TrialKind:
    if kind.name in _KINDS:
        raise ValueError(f"trial kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def kinds() -> list[TrialKind]:
    return list(_KINDS.values())


def kind_of(cfg: RunConfig) -> TrialKind:
    """The kind that runs `cfg`: the last registered kind that claims it."""
    return next(k for k in reversed(_KINDS.values()) if k.claims(cfg))


def suite_kinds(configs: list[RunConfig]) -> list[TrialKind]:
    """The distinct kinds of a suite's trial configs, in registration order."""
    names = {kind_of(c).name for c in configs}
    return [k for k in _KINDS.values() if k.name in names]


register_kind(LlmKind())


def _register_builtin() -> None:
    from .lab.kind import LabKind
    register_kind(LabKind())


_register_builtin()
