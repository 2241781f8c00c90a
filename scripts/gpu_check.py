"""A short real run on one GPU: Qwen3-0.6B-shaped random model, vLLM rollouts, training steps.

Prints rollout tokens/s (vLLM, from the run's metrics, and the transformers engine on a batch of the same
shape afterwards), step time, peak GPU memory (PyTorch's allocator: the trainer, the optimizer and vLLM's
weights and KV cache, all in this process) and the engine log-prob gap in bfloat16. No downloads: the model
is randomly initialized from a Qwen3-0.6B-shaped config with a character tokenizer, so rewards are ~0 —
this checks the machinery and its speed, not learning. Run through scripts/gpu_check.sh, which first runs
scripts/vllm_cpu_check.py (sampling, the float32 gap after a weight sync, training and the asynchronous
producer through vLLM) on the GPU.
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from gpu_trainer_check import gpu_run_config, qwen3_shaped, step_means           # scripts/ is on sys.path when run as a script

from harness.config.expand import Trial
from harness.trial.lifecycle import run_trial
from harness.store.trialdir import read_jsonl


def main(steps: int = 8) -> None:
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU on this machine; nothing checked (run it where one is)")
        return
    root = Path(tempfile.mkdtemp(prefix="stalebench-gpu-"))
    model_dir = qwen3_shaped(root)
    cfg = gpu_run_config(model_dir, steps, 256, engine="vllm", gpu_memory_utilization=0.35)
    torch.cuda.reset_peak_memory_stats()
    start = time.time()
    status = run_trial(Trial("gpu-vllm", {"check": "gpu"}, cfg), root)["status"]
    rows = read_jsonl(root / "gpu-vllm" / "metrics.jsonl")[1:]          # skip the first (compile/warm-up) step
    peak = torch.cuda.max_memory_allocated() / 2**30
    free, total = torch.cuda.mem_get_info()
    hf_tokens_per_s = transformers_engine_tokens_per_s(model_dir, cfg)
    summary = {
        "status": status, "steps": len(rows) + 1, "wall_s": round(time.time() - start, 1),
        **step_means(rows),
        "hf_engine_tokens_per_s": hf_tokens_per_s,
        "peak_gpu_mem_gib": peak, "gpu_mem_in_use_gib_at_end": (total - free) / 2**30,
        "engine_gap_max": max(r.get("is/engine_gap_max", float("nan")) for r in rows),
        "engine_head_gap_max": max(r.get("is/engine_head_gap", float("nan")) for r in rows),   # the output layer
        "gpu": torch.cuda.get_device_name(0),
    }
    print(json.dumps(summary, indent=1))


def transformers_engine_tokens_per_s(model_dir: Path, cfg) -> float:
    """The transformers engine on a batch of the run's shape (prompts_per_step × G, max_new_tokens): warm, median of 2."""
    from harness.bases.models import load_model
    from harness.rollout.hf import HFEngine
    from harness.tasks import task_from_config

    model, tok = load_model(model_dir, cfg.model.dtype)
    engine = HFEngine(model.cuda(), tok)
    prompts = [p.prompt for p in task_from_config("addrev", 64, None).problems("train", cfg.train.prompts_per_step, 0)]
    runs = [engine.generate(prompts, cfg.group_size, temperature=1.0, max_new_tokens=cfg.train.max_new_tokens, seed=i)
            for i in range(3)][1:]
    return statistics.median(r.num_tokens / r.seconds for r in runs)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
