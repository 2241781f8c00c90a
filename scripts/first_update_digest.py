"""Digests of a trial's first optimizer update, tensor by tensor, to find where two machines part.

An Intel Xeon and AMD EPYCs on the pinned float path agree on every metric of a trial's step 1 and part at
step 2 (docs/reproducibility.md §5). Run this on each machine and diff the outputs: the first line that
differs names the tensor, and whether it is a gradient (the backward pass) or AdamW's state or the updated
parameter (the optimizer step).

    python scripts/first_update_digest.py > $(hostname).txt        # default: v2 gmc_grpo, delay 32, seed 1
    python scripts/first_update_digest.py suites/reference.yaml 'algorithm=grpo,delay=0,seed=0'
    diff amd.txt intel.txt
    python scripts/first_update_digest.py | diff scripts/first_update_digest.GenuineIntel.txt -   # on an AMD CPU
    python scripts/first_update_digest.py suites/reference-v2.yaml 'algorithm=gmc_grpo,delay=32,seed=1' \
        --set model.forward=lean3 | diff scripts/first_update_digest.v3.AuthenticAMD.txt -       # engine 3

scripts/first_update_digest.GenuineIntel.txt is the default trial's output on an Intel Xeon (family 6 model
167), 2026-12-02, and scripts/first_update_digest.AuthenticAMD.txt on an AMD EPYC, 2026-12-03: they differ
first at the updated parameters (gradients and AdamW's moments are equal; docs/reproducibility.md §5). Each
line: what, the parameter's index and shape, and the first 16 hex digits of the SHA-256 of its bytes.
scripts/first_update_digest.v3.AuthenticAMD.txt is the default trial on engine version 3 (`--set
model.forward=lean3`: OpenBLAS's matmuls, fused AdamW) on an AMD EPYC, 2026-12-03; its Intel counterpart is
not made yet (unverified on Intel: docs/reproducibility.md §5). Arguments after the trial go to `stalebench
train` (e.g. `--set`). The
trial runs in a temporary results directory, which is removed; the process exits after the first update.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile

from harness.trial import numerics
numerics.pin()

import torch  # noqa: E402  (after pin(): MKL and ATen read the float-path variables once)

from harness.cli import main  # noqa: E402


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def report_first_update(results: str, step=torch.optim.AdamW.step):
    def first_step(self, *args, **kwargs):
        params = [p for group in self.param_groups for p in group["params"]]
        rows = [f"grad {i:03d} {tuple(p.shape)} {digest(p.grad)}" for i, p in enumerate(params) if p.grad is not None]
        step(self, *args, **kwargs)
        for i, p in enumerate(params):
            state = self.state.get(p, {})
            rows += [f"{key} {i:03d} {tuple(p.shape)} {digest(state[key])}" for key in ("exp_avg", "exp_avg_sq")
                     if key in state]
            rows.append(f"param {i:03d} {tuple(p.shape)} {digest(p)}")
        gemm = sys.modules["harness.rollout.gemm3"].path if "harness.rollout.lean3" in sys.modules else None
        n = numerics.record("cpu", gemm)                    # engine 3 ran: name its path
        print(f"# {n['float_path']}, {n['cpu_vendor']}, torch {n['torch']}, threads {n['threads']}", *rows, sep="\n",
              flush=True)
        shutil.rmtree(results, ignore_errors=True)
        os._exit(0)                                 # the rest of the trial is not needed
    return first_step


if __name__ == "__main__":
    suite, trial = (sys.argv[1:3] if len(sys.argv) >= 3
                    else ("suites/reference-v2.yaml", "algorithm=gmc_grpo,delay=32,seed=1"))
    extra = sys.argv[3:]                            # passed to `stalebench train`, e.g. --set model.forward=lean3
    results = tempfile.mkdtemp(prefix="first-update-")
    torch.optim.AdamW.step = report_first_update(results)
    code = main(["train", suite, "--trial", trial, "--results", results, *extra])
    shutil.rmtree(results, ignore_errors=True)
    sys.exit(f"first_update_digest: the trial ended without an optimizer update (exit {code})")
