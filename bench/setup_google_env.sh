#!/usr/bin/env bash
# Creates bench/.venv-google, the environment of the "google" peer of
# bench/throughput.py: Google's own BERT code as Google published it on
# PyPI (bert-tensorflow, the `bert` package: modeling.py, optimization.py,
# run_classifier.py ...), on the TensorFlow release the project pins. That
# code was written for TensorFlow 1; bench/google_shims.py supplies the few
# pieces TensorFlow 2.21 no longer has. Never a dependency of the project.
#
# Idempotent: a stamp file holds a hash of this script; when it matches, the
# script does nothing. Usage: bash bench/setup_google_env.sh [PYTHON]
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${BENCH_DIR}/.venv-google"
PYTHON="${1:-${PYTHON:-python3}}"
STAMP="${VENV}/.installed"
WANT="$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"

if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${WANT}" ]]; then
  echo "bench/.venv-google is up to date."
  exit 0
fi

if [[ ! -x "${VENV}/bin/python" ]]; then
  "${PYTHON}" -m venv "${VENV}"
fi
"${VENV}/bin/python" -m pip install --quiet \
  tensorflow==2.21.0 \
  bert-tensorflow==1.0.4 \
  six==1.17.0 \
  numpy==2.4.6 \
  absl-py==2.5.1

# Run from the project's root so that `bench` is importable: the check is
# that Google's modules import through the shims.
(cd "${BENCH_DIR}/.." && "${VENV}/bin/python" - <<'PY'
import tensorflow as tf
from bench import google_shims
modeling, optimization, run_classifier = google_shims.import_google_bert()
print("google env: tf", tf.__version__, "bert-tensorflow modules",
      modeling.__name__, optimization.__name__, run_classifier.__name__)
PY
)

echo "${WANT}" > "${STAMP}"
