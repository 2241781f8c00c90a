"""tis — truncated token importance sampling on the REINFORCE surrogate.

ℓ_{i,t} = −sg(min(ρ_{i,t}, C)) · A_i · logp_{i,t}, C = `cap` (default 2). `eps` is accepted and unused
(the truncation level C plays its role). sg = stop-gradient.
"""
from __future__ import annotations

import torch

from .common import BatchContext, LossInputs, masked_mean, token_ratio
from .registry import register


@register("tis", uses_eps=False)
def tis(inp: LossInputs, ctx: BatchContext, *, eps: float, cap: float = 2.0):
    ratio = token_ratio(inp).detach()                            # (B, T)
    weight = torch.clamp(ratio, max=cap)
    loss = -weight * inp.advantages.unsqueeze(1) * inp.logp
    return loss, {"tis/truncated_frac": masked_mean((ratio > cap).float(), inp.mask)}
