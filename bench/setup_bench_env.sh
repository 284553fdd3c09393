#!/usr/bin/env bash
# Creates bench/.venv, the benchmark's own environment (never the project's
# requirements): TensorFlow as the project pins it, PyTorch (CPU) with Hugging
# Face transformers, tf-models-official for its BERT encoder, pytest for the
# checks against transformers (tests/interop, `make interop`), and TensorFlow
# Text, whose op the project's exports hold (requirements-text.txt).
#
# Idempotent: a stamp file holds a hash of this script; when it matches, the
# script does nothing. Usage: bash bench/setup_bench_env.sh [PYTHON]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${BENCH_DIR}/.venv"
PYTHON="${1:-${PYTHON:-python3}}"
STAMP="${VENV}/.installed"
WANT="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"

if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${WANT}" ]]; then
  echo "bench/.venv is up to date."
  exit 0
fi

if [[ ! -x "${VENV}/bin/python" ]]; then
  "${PYTHON}" -m venv "${VENV}"
fi
PIP=("${VENV}/bin/python" -m pip install --quiet)

# One resolver run for everything with dependencies, so that nothing can pull
# a different torch: 2.13.0 is a CPU-only wheel (no CUDA packages), and
# transformers 5.x accepts it (it needs torch >= 2.2).
"${PIP[@]}" \
  tensorflow==2.21.0 \
  tf-keras==2.21.0 \
  numpy==2.4.6 \
  absl-py==2.5.1 \
  sentencepiece==0.2.3 \
  torch==2.13.0 \
  transformers==5.23.0 \
  safetensors==0.8.0 \
  gin-config==0.5.0 \
  scipy==1.17.1 \
  pyyaml==6.0.3 \
  pytest==9.2.0 \
  pytest-timeout==2.4.0 \
  tensorflow-text==2.21.1

# tf-models-official pins tensorflow~=2.20 and pulls in dozens of packages
# (datasets, vision, TF Text) that its BERT encoder never imports; install it
# alone. The three packages above (gin-config, scipy, pyyaml) are what the
# import of official.nlp.modeling.networks needs.
"${PIP[@]}" --no-deps tf-models-official==2.20.0

"${VENV}/bin/python" - <<'EOF'
import torch
assert torch.__version__.startswith("2.13.0"), torch.__version__
from official.nlp.modeling import networks  # noqa: F401  (tf-models import path)
import transformers  # noqa: F401
import pytest  # noqa: F401
import tensorflow as tf
import tensorflow_text  # noqa: F401
print("bench env: tf", tf.__version__, "torch", torch.__version__,
      "transformers", transformers.__version__)
EOF

echo "${WANT}" > "${STAMP}"
