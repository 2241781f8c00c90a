#!/usr/bin/env bash
# The GPU check, one command for a machine with one CUDA GPU (about 12 minutes): installs stalebench with the
# gpu extra (the official `vllm` package, which brings its matching CUDA torch) unless vLLM is already
# importable, then
#   1. scripts/vllm_cpu_check.py on the GPU: the same checks as the CPU side environment (sampling with
#      behavior log-probs, the float32 engine/trainer gap after a weight sync, a short training run and the
#      asynchronous producer through vLLM, vLLM vs transformers tokens/s) on the CPU default tiny model;
#   2. scripts/gpu_check.py: a Qwen3-0.6B-shaped bfloat16 model, training steps through vLLM, rollout tokens/s
#      of both engines, step time, the bf16 gap and peak GPU memory.
# Record the printed numbers in benchmarks/README.md ("GPU check"). Usage: scripts/gpu_check.sh [STEPS] [TINY_MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import vllm" 2>/dev/null || pip install -q -e '.[gpu]'
python -c "import vllm, torch; print('vllm', vllm.__version__, '| torch', torch.__version__, '|', torch.cuda.get_device_name(0))"
export RAY_AUTH_MODE=disabled VLLM_ENABLE_V1_MULTIPROCESSING=0
status=0
timeout 420 python scripts/vllm_cpu_check.py ${2:+--model "$2"} || status=$?
timeout 480 python scripts/gpu_check.py "${1:-8}" || status=$?
exit $status
