"""stalebench estimators: pure policy-gradient loss functions behind one registry.

    from algorithms import LossInputs, compute_loss, loss_names, group_advantages
    out = compute_loss("gmc_grpo", LossInputs(...), eps=0.2, aggregation="token-mean")

Imports only torch and the standard library (a test checks it).
"""
from .common import (AGGREGATIONS, ADVANTAGE_MODES, BatchContext, LossInputs, LossOutput, aggregate,
                     group_advantages)
from .registry import (check_params, compute_loss, estimator_defaults, load_plugins, loss_names, prepare_context,
                       register, uses_batch_statistics, uses_eps)
from . import bapo, decoupled, gmc_grpo, grpo, gspo, is_none, m2po, naive, tic_grpo, tis, topr  # noqa: F401

__all__ = ["AGGREGATIONS", "ADVANTAGE_MODES", "BatchContext", "LossInputs", "LossOutput", "aggregate",
           "check_params", "compute_loss", "estimator_defaults", "group_advantages", "loss_names",
           "prepare_context", "register", "uses_batch_statistics", "uses_eps"]
