"""Is this machine's float32 square root correctly rounded, and what does it do to one AdamW step?

AMD and Intel CPUs on the pinned float path compute the same gradients and AdamW moments and part at the
updated parameters (scripts/first_update_digest.py, docs/reproducibility.md §5). AdamW's update calls torch's
float32 `sqrt`, which on the CPU is MKL's (VML), an approximation. This prints, on the pinned path:

- the share of a million inputs whose `torch.sqrt` differs from the float64 root rounded to float32 (which
  is the correctly rounded float32 root);
- for one AdamW step on a (512, 128) parameter: whether torch's fused CPU AdamW (`fused=True`, ATen's
  IEEE-exact vectorized sqrt) has the per-tensor AdamW's moments, and the share of updated elements in
  which it differs from the per-tensor AdamW, with MKL's root and with the correctly rounded one.

    python scripts/adamw_root_check.py
"""
from __future__ import annotations

import numpy as np

from harness.trial import numerics
numerics.pin()

import torch  # noqa: E402  (after pin())


def rounded_root(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.sqrt(x.detach().numpy().astype(np.float64)).astype(np.float32))


def adamw_step(p0: torch.Tensor, grad: torch.Tensor, **kwargs) -> tuple[torch.Tensor, dict]:
    p = torch.nn.Parameter(p0.clone())
    opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, **kwargs)
    p.grad = grad.clone()
    opt.step()
    return p.detach(), opt.state[p]


def main() -> None:
    n = numerics.record()
    print(f"# {n['float_path']}, {n['cpu_vendor']}, torch {n['torch']}")
    gen = torch.Generator().manual_seed(0)
    inputs = {"uniform [0, 1)": torch.rand(1_000_000, generator=gen),
              "uniform [0, 1e-10)": torch.rand(1_000_000, generator=gen) * 1e-10,
              "log-normal (sigma 10)": torch.exp(torch.randn(1_000_000, generator=gen) * 10)}
    for name, x in inputs.items():
        print(f"torch.sqrt not correctly rounded, {name}: {(torch.sqrt(x) != rounded_root(x)).float().mean():.2%}")
    p0, grad = torch.randn(512, 128, generator=gen), torch.randn(512, 128, generator=gen) * 1e-3
    per_tensor, state = adamw_step(p0, grad)
    fused, fused_state = adamw_step(p0, grad, fused=True)
    sqrt = torch.Tensor.sqrt
    torch.Tensor.sqrt = rounded_root            # AdamW's per-tensor update calls exp_avg_sq.sqrt()
    try:
        per_tensor_rounded, _ = adamw_step(p0, grad)
    finally:
        torch.Tensor.sqrt = sqrt
    same = all(torch.equal(state[k], fused_state[k]) for k in ("exp_avg", "exp_avg_sq"))
    print(f"one AdamW step, (512, 128): moments per-tensor == fused: {same}")
    print(f"  updated elements differing, per-tensor (MKL root) vs fused: {(per_tensor != fused).float().mean():.4%}")
    print(f"  updated elements differing, per-tensor (rounded root) vs fused: "
          f"{(per_tensor_rounded != fused).float().mean():.4%}")


if __name__ == "__main__":
    main()
