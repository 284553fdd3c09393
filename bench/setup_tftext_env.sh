#!/usr/bin/env bash
# Creates bench/out/tftext_venv, the environment of the peer that
# bench/vocab_learning.py compares create_vocab.py with: TensorFlow Text's
# WordPiece vocabulary learner (tensorflow_text.tools.wordpiece_vocab), with
# the TensorFlow release the project pins. It is never a dependency of the
# project: only the benchmark runs it, in a process of its own.
#
# Idempotent: a stamp file holds a hash of this script; when it matches, the
# script does nothing. Usage: bash bench/setup_tftext_env.sh [PYTHON]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${BENCH_DIR}/out/tftext_venv"
PYTHON="${1:-${PYTHON:-python3}}"
STAMP="${VENV}/.installed"
WANT="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"

if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${WANT}" ]]; then
  echo "bench/out/tftext_venv is up to date."
  exit 0
fi

mkdir -p "${BENCH_DIR}/out"
if [[ ! -x "${VENV}/bin/python" ]]; then
  "${PYTHON}" -m venv "${VENV}"
fi
"${VENV}/bin/python" -m pip install --quiet \
  tensorflow==2.21.0 \
  tensorflow-text==2.21.1

"${VENV}/bin/python" - <<'EOF'
import tensorflow as tf
import tensorflow_text
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset  # noqa: F401
print("tftext env: tf", tf.__version__, "tensorflow-text", tensorflow_text.__version__)
EOF

echo "${WANT}" > "${STAMP}"
