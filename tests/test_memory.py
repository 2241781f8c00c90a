"""The GPU memory projection (harness/suite/memory.py), by hand, and its refusal in `check` and `--dry-run`."""
from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.config.run import build_run_config
from harness.suite.memory import GIB, KNOWN, Architecture, architecture, project

# vocab 1,000, C 8, 2 layers, 2 query heads and 1 kv head of 4, MLP 16, tied head
ARCH = Architecture(vocab=1000, hidden=8, layers=2, heads=2, kv_heads=1, head_dim=4, intermediate=16, tied=True)


def cfg(**model):
    """bf16, micro-batches of 2 responses × 10 new tokens; projected with 6 prompt tokens: 2 × 16 = 32 tokens."""
    return build_run_config({"model": {"kind": "path", "path": "/nowhere", "dtype": "bfloat16", **model},
                             "train": {"micro_batch_size": 2, "max_new_tokens": 10, "prompts_per_step": 4}})


def bytes_of(p) -> dict[str, float]:
    return {name: gib * GIB for name, gib in p.items}


def test_architecture_by_hand():
    # a layer: q 8·8 + k, v 2·8·4 + o 8·8 + MLP 3·8·16 + norms 2·8 + q/k-norm 2·4 = 64+64+64+384+16+8 = 600;
    # 2 layers + the tied embedding 1,000·8 + the final norm 8 = 1,200 + 8,000 + 8 = 9,208
    assert ARCH.params == 9208
    # kept per token and layer: 4C 32 + 2(q + 2kv) = 2·16 = 32 + q 8 + 4I 64 = 136
    assert ARCH.act_per_layer == 136


def test_deepspeed_zero2_bf16_chunked_by_hand():
    p = bytes_of(project(cfg(backend="deepspeed", zero_stage=2, logp_chunk_tokens=4), ARCH, 1.0, prompt_tokens=6))
    assert p["weights"] == 2 * 9208 == p["gradients"]               # b = 2 bytes; one worker: nothing partitioned
    assert p["optimizer"] == 12 * 9208                              # float32 master copy + two moments
    assert p["activations"] == 32 * 2 * 2 * 136                     # tokens × b × layers × kept = 17,408
    assert p["log-probs (chunks of 4)"] == 4 * 1000 * (2 + 12)      # 56,000
    assert p["reference"] == 0 and p["vLLM"] == 0 and p["CUDA context"] == GIB


def test_checkpointing_full_logits_workers_and_reference_by_hand():
    c = build_run_config({"model": {"kind": "path", "path": "/nowhere", "dtype": "bfloat16", "backend": "deepspeed",
                                    "zero_stage": 2, "gradient_checkpointing": True, "logp_chunk_tokens": -1},
                          "train": {"micro_batch_size": 2, "max_new_tokens": 10, "prompts_per_step": 4, "workers": 2,
                                    "kl_beta": 0.1}})
    p = bytes_of(project(c, ARCH, 2.0, prompt_tokens=6))
    assert p["weights"] == 2 * 9208                                          # ZeRO-2 keeps every weight
    assert p["gradients"] == 2 * 9208 / 2 and p["optimizer"] == 12 * 9208 / 2   # ... and splits these over 2 workers
    assert p["reference"] == 2 * 9208                                        # kl_beta > 0: a full frozen copy
    assert p["activations (checkpointed)"] == 32 * 2 * (2 * 8 + 136)         # each layer's input + one layer: 9,728
    assert p["log-probs (full logits)"] == 2 * 10 * 1000 * (2 + 16)          # bf16 logits + four float32 copies


def test_zero3_offload_and_vllm_by_hand():
    p = bytes_of(project(cfg(backend="deepspeed", zero_stage=3, zero_offload=True, engine="vllm",
                             gpu_memory_utilization=0.25), ARCH, 2.0, prompt_tokens=6))
    assert p["weights"] == 2 * 9208 == p["gradients"]                       # one worker: ZeRO-3 has nothing to split
    assert p["optimizer"] == 0                                               # offloaded to the CPU
    assert p["vLLM"] == 0.25 * 2 * GIB


def test_torch_backend_float32_by_hand():
    p = bytes_of(project(cfg(dtype="float32"), ARCH, 1.0, prompt_tokens=6))
    assert p["weights"] == 4 * 9208 and p["optimizer"] == 2 * 4 * 9208      # AdamW's two moments in float32
    assert p["log-probs (full logits)"] == 2 * 10 * 1000 * (4 + 12)          # vocabulary 1,000 < 32,768: full


def test_the_one_gpu_measurement_is_within_the_projection_s_reach():
    """scripts/gpu_trainer_check.py on an H200 (benchmarks/README.md, "GPU check"): the Qwen3-0.6B shape, bf16,
    torch AdamW, micro-batches of 64 × (8 prompt + 128 new) tokens, full logits: 40.4 GiB peak measured."""
    c = build_run_config({"model": {"kind": "path", "path": "/nowhere", "dtype": "bfloat16", "logp_chunk_tokens": -1},
                          "group_size": 8, "train": {"prompts_per_step": 32, "micro_batch_size": 64,
                                                      "max_new_tokens": 128}})
    total = project(c, KNOWN["Qwen3-0.6B"], 139.0, prompt_tokens=8).total
    assert 0.9 * 40.4 < total < 40.4


def test_architecture_from_config_json_or_a_known_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 1000, "hidden_size": 8, "num_hidden_layers": 2,
                                                      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
                                                      "intermediate_size": 16, "tie_word_embeddings": True}))
    assert architecture(str(tmp_path)) == (ARCH, "config.json")
    assert architecture("/models/Qwen3-1.7B")[0] == KNOWN["Qwen3-1.7B"]
    assert architecture("/models/unknown")[0] is None


SUITE = """suite: mem
version: 1
base:
  model: {{kind: path, path: {path}, dtype: bfloat16, backend: deepspeed, zero_stage: 2}}
  train: {{micro_batch_size: 2, max_new_tokens: 10, prompts_per_step: 4}}
grid: {{algorithm: [grpo]}}
seeds: [0]
resources: {{cpu: 1, gpu: 1, gpu_memory_gib: {card}}}
"""


@pytest.mark.parametrize("command", [["check"], ["run", "--dry-run"]])
def test_a_suite_over_its_card_is_refused_in_one_line(tmp_path, capsys, command):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 1000, "hidden_size": 8, "num_hidden_layers": 2,
                                                   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
                                                   "intermediate_size": 16, "tie_word_embeddings": True}))
    fits, over = tmp_path / "fits.yaml", tmp_path / "over.yaml"
    fits.write_text(SUITE.format(path=model, card=2))
    over.write_text(SUITE.format(path=model, card=1))           # the CUDA context alone takes 1 GiB
    extra = ["--results", str(tmp_path / "r")] if command[0] == "run" else []
    assert main([*command, str(fits), *extra]) == 0
    assert "memory: 1.0 of 2 GiB per GPU" in capsys.readouterr().out
    assert main([*command, str(over), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("stalebench: resources.gpu_memory_gib: trial grpo-s0 projects to 1.0 of 1 GiB per GPU")
    assert "set model.gradient_checkpointing: true" in err


def test_the_gpu_memory_check_says_one_line_without_a_gpu(capsys):
    import importlib.util
    from pathlib import Path

    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: run scripts/gpu_memory_check.py itself")
    path = Path(__file__).resolve().parents[1] / "scripts" / "gpu_memory_check.py"
    spec = importlib.util.spec_from_file_location("gpu_memory_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main() == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("gpu_memory_check: no CUDA GPU on this machine")
