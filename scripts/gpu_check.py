"""A short real run on one GPU: Qwen3-0.6B-shaped random model, vLLM rollouts, training steps.

Prints rollout tokens/s, step time, peak GPU memory and the engine log-prob gap. No downloads: the
model is randomly initialized from a Qwen3-0.6B-shaped config with a character tokenizer, so rewards
are ~0 — this checks the machinery and its speed, not learning. Run through scripts/gpu_check.sh.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from harness.config import build_run_config
from harness.models import char_tokenizer
from harness.tasks.synthetic import ADDREV_VOCAB
from harness.tracking import RunLog
from harness.trialdir import read_jsonl
from harness.trainer import train


def main(steps: int = 8) -> None:
    assert torch.cuda.is_available(), "gpu_check needs a CUDA GPU"
    root = Path(tempfile.mkdtemp(prefix="stalebench-gpu-"))
    model_dir = root / "qwen3-0.6b-shape"
    vocab = 151936
    # Filler entries give the tokenizer the model's vocabulary size, so every sampled id decodes.
    tok = char_tokenizer(ADDREV_VOCAB + [f"<x{i}>" for i in range(vocab - len(ADDREV_VOCAB) - 2)])
    config = Qwen3Config(vocab_size=vocab, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                         num_key_value_heads=8, head_dim=128, intermediate_size=3072, max_position_embeddings=4096,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=1, torch_dtype="bfloat16")
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    cfg = build_run_config({
        "algorithm": "gmc_grpo", "delay": 2, "group_size": 8,
        "model": {"kind": "path", "path": str(model_dir), "engine": "vllm", "dtype": "bfloat16",
                  "gpu_memory_utilization": 0.35},
        "task": {"name": "addrev", "eval_size": 64},
        "train": {"steps": steps, "prompts_per_step": 32, "lr": 1e-6, "max_new_tokens": 256, "micro_batch_size": 64,
                  "checkpoint_every": 0, "threads": 8},
        "eval": {"every_steps": steps},
    })
    torch.cuda.reset_peak_memory_stats()
    start = time.time()
    status = train(cfg, RunLog(root / "trial"), {"check": "gpu"})
    rows = read_jsonl(root / "trial" / "metrics.jsonl")[1:]          # skip the first (compile/warm-up) step
    summary = {
        "status": status, "steps": len(rows) + 1, "wall_s": round(time.time() - start, 1),
        "rollout_tokens_per_s": sum(r["perf/tokens_per_s"] for r in rows) / len(rows),
        "step_s": sum(r["perf/step_s"] for r in rows) / len(rows),
        "rollout_s": sum(r["perf/rollout_s"] for r in rows) / len(rows),
        "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
        "engine_gap_max": max(r.get("is/engine_gap_max", float("nan")) for r in rows),
        "gpu": torch.cuda.get_device_name(0),
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
