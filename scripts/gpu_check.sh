#!/usr/bin/env bash
# GPU check for a machine with one CUDA GPU (about 8 minutes): installs stalebench with the gpu extra
# (vLLM brings its matching CUDA torch) and runs scripts/gpu_check.py. Record the printed numbers in
# benchmarks/README.md ("GPU check").
set -euo pipefail
cd "$(dirname "$0")/.."
pip install -q -e '.[gpu]'
export RAY_AUTH_MODE=disabled VLLM_ENABLE_V1_MULTIPROCESSING=0
timeout 480 python scripts/gpu_check.py "${1:-8}"
