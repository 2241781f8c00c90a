"""The trainer on one CUDA GPU without vLLM: transformers rollouts, torch and DeepSpeed ZeRO-2 backends.

    python scripts/gpu_trainer_check.py [steps]

A Qwen3-0.6B-shaped random model (bf16, 151,936-token vocabulary, character tokenizer padded to it), so
rewards are ~0: this checks the machinery and measures step time, rollout tokens/s and peak GPU memory,
not learning. Prints one JSON object per backend. (scripts/gpu_check.sh runs the vLLM path.)
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from harness.config.run import build_run_config
from harness.bases.models import char_tokenizer
from harness.config.expand import Trial
from harness.tasks.synthetic import ADDREV_VOCAB
from harness.trial.lifecycle import run_trial
from harness.store.trialdir import read_jsonl


def qwen3_shaped(root: Path) -> Path:
    vocab = 151936
    tok = char_tokenizer(ADDREV_VOCAB + [f"<x{i}>" for i in range(vocab - len(ADDREV_VOCAB) - 2)])
    config = Qwen3Config(vocab_size=vocab, hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                         num_key_value_heads=8, head_dim=128, intermediate_size=3072, max_position_embeddings=4096,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(root / "qwen3-0.6b-shape")
    tok.save_pretrained(root / "qwen3-0.6b-shape")
    return root / "qwen3-0.6b-shape"


def step_means(rows: list[dict]) -> dict:
    """Mean step time, rollout time and rollout tokens/s over metrics rows."""
    mean = lambda key: sum(r[key] for r in rows) / len(rows)
    return {"step_s": round(mean("perf/step_s"), 3), "rollout_s": round(mean("perf/rollout_s"), 3),
            "rollout_tokens_per_s": round(mean("perf/tokens_per_s"))}


def gpu_run_config(model_dir: Path, steps: int, max_new_tokens: int, **model):
    """The GPU checks' trial: gmc_grpo at delay 2 on the Qwen3-shaped model in bfloat16, 32 prompts × 8."""
    return build_run_config({
        "algorithm": "gmc_grpo", "delay": 2, "group_size": 8,
        "model": {"kind": "path", "path": str(model_dir), "dtype": "bfloat16", **model},
        "task": {"name": "addrev", "eval_size": 64},
        "train": {"steps": steps, "prompts_per_step": 32, "lr": 1e-6, "max_new_tokens": max_new_tokens,
                  "micro_batch_size": 64, "checkpoint_every": 0, "threads": 8},
        "eval": {"every_steps": steps},
    })


def check(model_dir: Path, root: Path, backend: str, steps: int) -> dict:
    cfg = gpu_run_config(model_dir, steps, 128, backend=backend, zero_stage=2 if backend == "deepspeed" else 0)
    torch.cuda.reset_peak_memory_stats()
    start = time.time()
    status = run_trial(Trial(f"gpu-{backend}", {"check": backend}, cfg), root)
    rows = read_jsonl(root / f"gpu-{backend}" / "metrics.jsonl")[1:]     # the first step includes warm-up
    return {"backend": backend, "status": status["status"], "steps": len(rows) + 1, "wall_s": round(time.time() - start, 1),
            **step_means(rows),
            "grad_norm_finite": all(r["opt/grad_norm"] == r["opt/grad_norm"] for r in rows),
            "peak_gpu_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}


def main(steps: int = 6) -> None:
    if not torch.cuda.is_available():
        print("gpu_trainer_check: no CUDA GPU on this machine; nothing checked (run it where one is)")
        return
    root = Path(tempfile.mkdtemp(prefix="stalebench-gpu-"))
    model_dir = qwen3_shaped(root)
    for backend in ("torch", "deepspeed"):
        print(json.dumps(check(model_dir, root, backend, steps)), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
