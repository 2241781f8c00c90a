"""stalebench estimators: pure policy-gradient loss functions behind one registry.

    from algorithms import LossInputs, compute_loss, loss_names, group_advantages
    out = compute_loss("gmc_grpo", LossInputs(...), eps=0.2, aggregation="token-mean")

Imports only torch and the standard library (a test checks it).
"""
from .common import (AGGREGATIONS, ADVANTAGE_MODES, BatchContext, LossInputs, LossOutput, aggregate,
                     group_advantages)
from .registry import (CORRECTIONS, POLICIES, TRUST_REGIONS, UNSPECIFIED, check_params, compute_loss,
                       describe, estimator_defaults, load_plugins, loss_names,
                       prepare_context, register, uses_batch_statistics, uses_eps)
from . import (bapo, cispo, decoupled, decoupled_rs, dppo, dppo_binary, dro, geo_mask, geo_mean, gmc_grpo,  # noqa: F401
               gmc_grpo_prox, grpo, gspo, icepop, ipo, is_none, luspo, m2po, m2po_mask, mis, mis_seq, naive, opsm,
               rollout_rs, rollout_rs_bypass, sapo, seq_mask_tis, tic_grpo, tic_is, tis, tis_seq, topr, vespo)

__all__ = ["AGGREGATIONS", "ADVANTAGE_MODES", "BatchContext", "CORRECTIONS", "LossInputs", "LossOutput", "POLICIES",
           "TRUST_REGIONS", "UNSPECIFIED", "aggregate", "check_params", "compute_loss", "describe", "estimator_defaults",
           "group_advantages", "loss_names", "prepare_context", "register",
           "uses_batch_statistics", "uses_eps"]
