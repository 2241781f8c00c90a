"""gspo — Group Sequence Policy Optimization: PPO clip on a length-normalized sequence ratio.

Reference: GSPO (arXiv 2507.18071). Policies read: π_θ (`logp`) and π_b (`logp_behavior`).
    s_i = exp(Λ_i / |o_i|)  (with grad),   ℓ_i = max(−A_i s_i, −A_i clip(s_i, 1 − ε_low, 1 + ε_high))
The sequence loss is broadcast over the response's tokens and reduced by the suite's aggregation;
"seq-mean-token-mean" gives the paper's exact form.
Deviation: GSPO's own clip range (ε_low = 3e-4, ε_high = 4e-4, paper defaults) is used regardless of
the grid's `eps`, which is accepted and unused; set `eps_low`/`eps_high` to change it.
"""
from __future__ import annotations

from .common import BatchContext, LossInputs, MAX_TOKEN_LOG_RATIO, masked_mean, ppo_clip_token_loss, token_log_ratio
from .registry import register

import torch


@register("gspo", uses_eps=False, trust_region="sequence-clip", correction="sequence-is", reads=("theta", "behavior"),
          source="paper 2507.18071")
def gspo(inp: LossInputs, ctx: BatchContext, *, eps: float, eps_low: float = 3e-4, eps_high: float = 4e-4):
    lengths = inp.mask.sum(dim=1).clamp_min(1)                  # (B,)
    log_s = token_log_ratio(inp).sum(dim=1) / lengths
    seq_ratio = torch.exp(log_s.clamp(-MAX_TOKEN_LOG_RATIO, MAX_TOKEN_LOG_RATIO))
    low, high = 1.0 - eps_low, 1.0 + eps_high
    loss = ppo_clip_token_loss(seq_ratio.unsqueeze(1), inp.advantages, low, high).expand_as(inp.logp)
    s = seq_ratio.detach()
    clipped = ((inp.advantages < 0) & (s < low)) | ((inp.advantages > 0) & (s > high))
    present = inp.mask.any(dim=1)
    return loss, {"gspo/clip_frac": masked_mean(clipped.float(), present),
                  "gspo/seq_ratio_mean": masked_mean(s, present)}
