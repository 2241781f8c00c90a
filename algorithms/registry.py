"""The estimator registry: one name -> one pure loss function (and optional batch statistics).

An estimator is registered with

    @register("name", prepare=optional_prepare_fn)
    def token_loss(inp: LossInputs, ctx: BatchContext, *, eps: float, <own params with defaults>)
        -> tuple[Tensor (B, T), dict[str, Tensor]]

and, optionally, its family (see FAMILY_AXES) and source:

    @register("name", trust_region="token-clip", correction="token-is", reads=("theta", "behavior"),
              source="repo path@commit")

`prepare(inp, *, eps, <own params>) -> BatchContext` computes detached statistics once over the whole
optimizer-step batch (see BatchContext). `compute_loss` validates the inputs, runs both, aggregates,
and turns the metrics into floats — the single place that leaves tensor land.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Callable

import torch

from .common import AGGREGATIONS, BatchContext, LossInputs, LossOutput, aggregate, validate

TokenLossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
PrepareFn = Callable[..., BatchContext]


UNSPECIFIED = "unspecified"     # a plugin that does not declare its family gets this on every axis
# The family axes and their values. trust region: what bounds the update (a clip of the ratio's gradient,
# a mask that drops tokens or sequences, or nothing); correction: how the behavior/rollout mismatch is
# weighted (per-token or per-sequence importance weight, a group mass cap, or not at all); reads: which of
# the four policies (docs/estimators.md) the estimator uses.
TRUST_REGIONS = ("token-clip", "sequence-clip", "token-mask", "sequence-mask", "none")
CORRECTIONS = ("token-is", "sequence-is", "group-cap", "none")
POLICIES = ("theta", "prox", "behavior", "rollout")


@dataclass(frozen=True)
class Estimator:
    name: str
    token_loss: TokenLossFn
    prepare: PrepareFn | None
    defaults: dict[str, object]   # the estimator's own parameters (besides eps) and their defaults
    uses_eps: bool = True         # whether the suite-level ε changes the estimator (grids skip it otherwise)
    trust_region: str = UNSPECIFIED
    correction: str = UNSPECIFIED
    reads: tuple[str, ...] = ()   # policies read, a subset of POLICIES (empty: unspecified)
    source: str = UNSPECIFIED     # where the formula comes from (repository, path, commit; or paper; or "ours")

    @property
    def family(self) -> dict[str, str]:
        """The estimator's family as plain strings (what a trial records)."""
        return {"trust_region": self.trust_region, "correction": self.correction,
                "reads": "+".join(self.reads) if self.reads else UNSPECIFIED}


_REGISTRY: dict[str, Estimator] = {}


def _own_params(fn: Callable | None) -> dict[str, object]:
    if fn is None:
        return {}
    return {p.name: p.default for p in inspect.signature(fn).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.name != "eps"}


def _check_family(name: str, trust_region: str, correction: str, reads: tuple[str, ...]) -> None:
    for axis, value, valid in (("trust_region", trust_region, TRUST_REGIONS), ("correction", correction, CORRECTIONS)):
        if value != UNSPECIFIED and value not in valid:
            raise ValueError(f"estimator {name!r}: {axis} {value!r} is not one of {', '.join(valid)}")
    unknown = [p for p in reads if p not in POLICIES]
    if unknown:
        raise ValueError(f"estimator {name!r}: reads {unknown[0]!r}, not one of {', '.join(POLICIES)}")


def register(name: str, prepare: PrepareFn | None = None, uses_eps: bool = True, *,
             trust_region: str = UNSPECIFIED, correction: str = UNSPECIFIED, reads: tuple[str, ...] = (),
             source: str = UNSPECIFIED) -> Callable[[TokenLossFn], TokenLossFn]:
    """Register an estimator; `uses_eps=False` declares that it accepts and ignores ε. The family keywords
    (see TRUST_REGIONS, CORRECTIONS, POLICIES) and `source` are optional: a plugin that omits them is listed
    and recorded as "unspecified"."""
    def deco(fn: TokenLossFn) -> TokenLossFn:
        if not isinstance(name, str) or not NAME.fullmatch(name) or len(name) > MAX_NAME_CHARS:
            raise ValueError(f"estimator name {name!r:.80} is not valid: ASCII letters, digits, '_', '-', '.', "
                             f"not starting with '.', '_' or '-', at most {MAX_NAME_CHARS} characters (it names "
                             f"trials and files)")
        if name in _REGISTRY:
            raise ValueError(f"estimator {name!r} is registered twice")
        _check_family(name, trust_region, correction, tuple(reads))
        defaults = {**_own_params(prepare), **_own_params(fn)}
        _REGISTRY[name] = Estimator(name, fn, prepare, defaults, uses_eps, trust_region, correction,
                                    tuple(reads), source)
        return fn
    return deco


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")   # an estimator's name, and a suite's (harness/config/suite.py
MAX_NAME_CHARS = 100                                # holds the same pattern; tests/test_hardening3.py checks it):
                                                    # ASCII (no look-alike letters), no leading dot, fullmatch
                                                    # (no trailing newline, which `$` lets through)
PLUGIN_GROUP = "stalebench.estimators"     # entry points: name = "package.module" (imported to register)
PLUGIN_ENV = "STALEBENCH_PLUGINS"           # comma-separated modules to import (set by `--plugin`)


_plugins_loaded = False


def load_plugins() -> None:
    """Import estimator plugins (once, on the first registry lookup): every entry point of the group `stalebench.estimators` and every module
    named in $STALEBENCH_PLUGINS. Importing a plugin module runs its `@register` decorators. Ray workers
    inherit the variable, so a suite runs plugin estimators exactly like built-in ones."""
    import importlib
    import importlib.metadata
    import os

    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    targets = [(ep.name, ep.load) for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP)]
    targets += [(m, lambda m=m: importlib.import_module(m)) for m in filter(None, os.environ.get(PLUGIN_ENV, "").split(","))]
    for name, load in targets:
        try:
            load()
        except (SystemExit, KeyboardInterrupt) as exc:   # exit(0) at import must not end a `check` as a pass
            raise ValueError(f"estimator plugin {name!r} exited while it was imported ({type(exc).__name__}"
                             f"{': ' + str(exc) if str(exc) else ''}); a plugin module must only register "
                             f"estimators".splitlines()[0]) from None
        except Exception as exc:  # noqa: BLE001 — a broken plugin is one line naming it, not a traceback
            raise ValueError(f"estimator plugin {name!r} failed to load: {type(exc).__name__}: {exc}"
                             .splitlines()[0]) from None


def loss_names() -> list[str]:
    """Sorted names of every registered estimator (plugins included)."""
    load_plugins()
    return sorted(_REGISTRY)


def get_estimator(name: str) -> Estimator:
    load_plugins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown estimator {name!r}; valid: {', '.join(loss_names())}") from None


def uses_eps(name: str) -> bool:
    """Whether the suite-level ε changes estimator `name` (False: a grid need not run it at every ε)."""
    return get_estimator(name).uses_eps


def uses_batch_statistics(name: str) -> bool:
    """Whether estimator `name` computes statistics over the whole optimizer-step batch (`prepare`), which a
    trainer holding only part of the batch (a micro-batch, a worker's rows) must compute over all of it."""
    return get_estimator(name).prepare is not None


def estimator_defaults(name: str) -> dict[str, object]:
    """The estimator's own parameters (besides eps) and their defaults."""
    return dict(get_estimator(name).defaults)


def describe(name: str) -> dict[str, object]:
    """Everything the registry knows about estimator `name`, as plain data (the `stalebench estimators` listing):
    name, family axes, whether ε is used, batch statistics, source and the own parameters' defaults."""
    est = get_estimator(name)
    return {"name": name, **est.family, "uses_eps": est.uses_eps, "batch_statistics": est.prepare is not None,
            "source": est.source, "params": dict(est.defaults)}


def check_params(name: str, params: dict[str, object]) -> None:
    """Raise ValueError if `params` holds a name the estimator does not take."""
    est = get_estimator(name)
    unknown = sorted(set(params) - set(est.defaults))
    if unknown:
        valid = ", ".join(["eps", *sorted(est.defaults)])
        raise ValueError(f"estimator {name!r} has no parameter {unknown[0]!r}; valid: {valid}")


def _pick(fn: Callable, params: dict[str, object]) -> dict[str, object]:
    own = _own_params(fn)
    return {k: v for k, v in params.items() if k in own}


def prepare_context(name: str, inp: LossInputs, *, eps: float = 0.2, **params: object) -> BatchContext:
    """Batch statistics of estimator `name` over the whole optimizer-step batch (detached).

    Call it once per step on the full batch (logp may be the no-grad proximal log-probs), then pass
    `context.rows(idx)` with each micro-batch to `compute_loss`.
    """
    est = get_estimator(name)
    check_params(name, params)
    if est.prepare is None:
        return BatchContext()
    return _prepare(est, validate(inp), eps, params)


def _prepare(est: Estimator, inp: LossInputs, eps: float, params: dict[str, object]) -> BatchContext:
    """`prepare_context` on inputs that `validate` has already returned."""
    if est.prepare is None:
        return BatchContext()
    with torch.no_grad():
        detached = LossInputs(inp.logp.detach(), inp.logp_behavior, inp.advantages, inp.mask,
                              inp.group_ids, inp.logp_proximal, inp.logp_rollout)
        return est.prepare(detached, eps=eps, **_pick(est.prepare, params))


def compute_loss(name: str, inp: LossInputs, *, eps: float = 0.2, aggregation: str = "token-mean",
                 max_tokens: int | None = None, total_tokens: float | None = None,
                 total_seqs: float | None = None, context: BatchContext | None = None,
                 **params: object) -> LossOutput:
    """The loss of estimator `name` on `inp`, aggregated, with its metrics as floats.

    eps:           the trust-region width ε (each estimator says how it uses it).
    aggregation:   one of AGGREGATIONS; `max_tokens` is K for "seq-mean-token-sum-norm".
    total_tokens, total_seqs: global denominators of the optimizer step (default: this batch's).
    context:       batch statistics from `prepare_context` on the full step batch (default: computed
                   from `inp`, correct when `inp` is the whole batch).
    params:        the estimator's own parameters; unknown names raise ValueError listing the valid ones.
    """
    est = get_estimator(name)
    check_params(name, params)
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; valid: {', '.join(AGGREGATIONS)}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0; got {eps}")
    inp = validate(inp)
    if context is None:
        context = _prepare(est, inp, eps, params)            # inputs validated once, not twice
    token_loss, metrics = est.token_loss(inp, context, eps=eps, **_pick(est.token_loss, params))
    loss = aggregate(token_loss, inp.mask, aggregation, total_tokens=total_tokens,
                     total_seqs=total_seqs, max_tokens=max_tokens)
    merged = {**context.metrics, **metrics}
    values = torch.stack([v.detach().to(torch.float64).reshape(()) for v in merged.values()]).tolist() if merged else []
    return LossOutput(loss=loss, metrics=dict(zip(merged, values)))
