#!/usr/bin/env bash
# Creates bench/.venv-kerashub, the environment of the KerasHub peer of
# bench/throughput.py ("khub"): KerasHub's BERT on Keras 3 with TensorFlow
# as its backend, at the TensorFlow release the project pins. It has an
# environment of its own because Keras 3 and the tf-keras (Keras 2) that
# tf-models needs in bench/.venv cannot share one; it is never a dependency
# of the project. The benchmark builds the model from a config with random
# weights, so nothing is downloaded when it runs.
#
# Idempotent: a stamp file holds a hash of this script; when it matches, the
# script does nothing. Usage: bash bench/setup_kerashub_env.sh [PYTHON]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${BENCH_DIR}/.venv-kerashub"
PYTHON="${1:-${PYTHON:-python3}}"
STAMP="${VENV}/.installed"
WANT="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"

if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${WANT}" ]]; then
  echo "bench/.venv-kerashub is up to date."
  exit 0
fi

if [[ ! -x "${VENV}/bin/python" ]]; then
  "${PYTHON}" -m venv "${VENV}"
fi
# One resolver run; keras-hub brings TensorFlow Text for its tokenizers
# (the benchmark feeds ids and never tokenizes).
"${VENV}/bin/python" -m pip install --quiet \
  tensorflow==2.21.0 \
  keras==3.15.1 \
  keras-hub==0.32.0 \
  tensorflow-text==2.21.1 \
  numpy==2.4.6 \
  absl-py==2.5.1

KERAS_BACKEND=tensorflow "${VENV}/bin/python" - <<'PY'
import keras
import keras_hub
import tensorflow as tf
assert keras.config.backend() == "tensorflow", keras.config.backend()
keras_hub.models.BertBackbone  # the class the benchmark builds
print("kerashub env: tf", tf.__version__, "keras", keras.__version__,
      "keras-hub", keras_hub.__version__)
PY

echo "${WANT}" > "${STAMP}"
