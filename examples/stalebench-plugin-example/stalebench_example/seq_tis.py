"""seq_tis — sequence-level truncated importance sampling (an example plugin estimator).

Objective: ℓ_{i,t} = −sg(min(r_i, C)) · A_i · logp_{i,t}, with r_i = exp(Λ_i) the trajectory ratio
π_θ(o_i)/π_b(o_i) and C = `cap`. Unlike tic_grpo's cap 1+ε, C is a fixed constant, so ε is unused.
"""
import math

import torch

from algorithms import register
from algorithms.common import BatchContext, LossInputs, traj_log_ratio


@register("seq_tis", uses_eps=False)
def seq_tis(inp: LossInputs, ctx: BatchContext, *, eps: float, cap: float = 2.0):
    log_r = traj_log_ratio(inp)                                      # (B,) Λ_i, detached
    weight = torch.exp(log_r.clamp(max=math.log(cap)))               # sg(min(r_i, C))
    loss = -(weight * inp.advantages).unsqueeze(1) * inp.logp        # (B, T); the mask is applied by the registry
    return loss, {"seq_tis/truncated_frac": (log_r > math.log(cap)).double().mean(),
                  "seq_tis/weight_mean": weight.mean()}
