"""The update's memory on one CUDA GPU against its projection: chunked log-probs and gradient checkpointing.

    python scripts/gpu_memory_check.py [steps]          # ≤ 10 minutes on one H100 or H200; no vLLM, no downloads

A Qwen3-0.6B-shaped model with random weights, built here (bf16, 151,936-token vocabulary, character
tokenizer padded to it: scripts/gpu_trainer_check.py), trained for a few steps by the torch backend with the
transformers engine, gmc_grpo at delay 2, 4 prompts × 8 responses × 512 new tokens (a random model rarely
samples <eos>, so nearly every response is full length), micro-batches of 16, twice (few rows, so that the
rollout's KV cache, which the projection leaves out, stays below the update's memory):

    bounded   model.logp_chunk_tokens 0 (auto: chunks of 1,024 here) and model.gradient_checkpointing: true
    full      model.logp_chunk_tokens -1 (full logits) and no checkpointing (the arithmetic before issue 50)

For each: steps completed, s/step (after the first), peak CUDA memory (torch's allocator, the whole trial:
rollouts, evaluation and updates) and the projection of harness/suite/memory.py for the same config with
the addrev prompts' 8 tokens, less its 1 GiB of CUDA context (which the allocator does not see). One JSON
object per line; the expected output is in docs/cluster.md ("GPU memory check"). On a machine without a
CUDA GPU it prints one line and exits 0.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

SETTINGS = {"bounded": {"logp_chunk_tokens": 0, "gradient_checkpointing": True},
            "full": {"logp_chunk_tokens": -1, "gradient_checkpointing": False}}
PROMPT_TOKENS = 8            # the addrev prompts' length in the character tokenizer, at most


def check(model_dir: Path, root: Path, name: str, steps: int) -> dict:
    from gpu_trainer_check import step_means                  # scripts/ is on sys.path when run as a script

    from harness.config.expand import Trial
    from harness.config.run import build_run_config
    from harness.store.trialdir import read_jsonl
    from harness.suite.memory import architecture, project
    from harness.trial.lifecycle import run_trial

    cfg = build_run_config({
        "algorithm": "gmc_grpo", "delay": 2, "group_size": 8,
        "model": {"kind": "path", "path": str(model_dir), "dtype": "bfloat16", **SETTINGS[name]},
        "task": {"name": "addrev", "eval_size": 32},
        "train": {"steps": steps, "prompts_per_step": 4, "lr": 1e-6, "max_new_tokens": 512, "micro_batch_size": 16,
                  "checkpoint_every": 0, "threads": 8},
        "eval": {"every_steps": steps}})
    card = torch.cuda.get_device_properties(0).total_memory / 2**30
    projection = project(cfg, architecture(str(model_dir))[0], card, prompt_tokens=PROMPT_TOKENS)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = time.time()
    status = run_trial(Trial(f"gpu-{name}", {"check": name}, cfg), root)["status"]
    rows = read_jsonl(root / f"gpu-{name}" / "metrics.jsonl")
    peak = torch.cuda.max_memory_allocated() / 2**30
    projected = projection.total - dict(projection.items)["CUDA context"]
    return {"setting": name, "status": status, "steps": len(rows), "wall_s": round(time.time() - start, 1),
            **(step_means(rows[1:]) if len(rows) > 1 else {}), "peak_gib": round(peak, 2),
            "projected_gib": round(projected, 2), "peak_over_projection": round(peak / projected, 2),
            "projection": projection.line(), "gpu": torch.cuda.get_device_name(0)}


def main(steps: int = 4) -> int:
    if not torch.cuda.is_available():
        print("gpu_memory_check: no CUDA GPU on this machine; nothing checked (run it where one is)")
        return 0
    from gpu_trainer_check import qwen3_shaped

    root = Path(tempfile.mkdtemp(prefix="stalebench-gpu-memory-"))
    model_dir = qwen3_shaped(root)
    for name in SETTINGS:
        print(json.dumps(check(model_dir, root, name, steps)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4))
