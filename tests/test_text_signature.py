"""The raw-text signature of an exported classifier, loaded in a fresh
process where nothing of this project can be imported (tensorflow and
tensorflow_text only): its answers are the scripts' own, the probabilities
of run_classifier.py --do_predict's test_results.tsv and the labels of its
predictions.jsonl, for a text pair task (MRPC), a regression (STS-B) and a
multi-label task from a user's CSV."""
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import run_classifier
from tasks import glue
from test_own_data import multi_label_run  # pylint: disable=unused-import
from test_predictor import MRPC_SAMPLE
from test_predictor import mrpc_dir  # pylint: disable=unused-import
from test_predictor import stsb_dir  # pylint: disable=unused-import

pytestmark = pytest.mark.slow

# Run in a folder of its own with no PYTHONPATH: the project is not
# importable there, which the script checks before it loads the model.
SERVE = """
import importlib.util, json, sys
import tensorflow as tf
import tensorflow_text  # Registers the tokenizer's op.
for name in ("tokenization", "modeling", "serving", "tasks"):
  assert importlib.util.find_spec(name) is None, name
request = json.load(sys.stdin)
model = tf.saved_model.load(request.pop("export"))
outputs = model.signatures["text"](
    **{name: tf.constant(texts, tf.string) for name, texts in request.items()})
decode = lambda v: [decode(x) for x in v] if isinstance(v, list) else (
    v.decode() if isinstance(v, bytes) else v)
json.dump({name: decode(value.numpy().tolist())
           for name, value in outputs.items()}, sys.stdout)
"""


def _serve(tmp_path, export_dir, **texts):
  """The text signature's outputs on `texts` (name -> list of str)."""
  (version,) = os.listdir(export_dir)
  folder = tmp_path / "client"
  folder.mkdir(exist_ok=True)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  result = subprocess.run(
      [sys.executable, "-c", SERVE], cwd=str(folder), env=env, text=True,
      input=json.dumps(dict(texts, export=os.path.join(export_dir, version))),
      capture_output=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout)


def _test_results(path):
  with open(path, encoding="utf-8") as f:
    return np.array([line.rstrip("\n").split("\t") for line in f], float)


def test_pair_classifier_serves_the_scripts_answers(mrpc_dir, tmp_path):
  examples = run_classifier.MrpcProcessor().get_test_examples(MRPC_SAMPLE)
  want = _test_results(os.path.join(mrpc_dir, "out", "test_results.tsv"))
  got = _serve(tmp_path, os.path.join(mrpc_dir, "export"),
               text_a=[e.text_a for e in examples],
               text_b=[e.text_b for e in examples])
  np.testing.assert_allclose(got["probabilities"], want, atol=1e-5)
  assert got["label"] == ["01"[i] for i in want.argmax(axis=1)]
  assert got["label_names"] == [["0", "1"]] * len(examples)


def test_regression_serves_the_scripts_scores(stsb_dir, tmp_path):
  examples = glue.StsbProcessor().get_test_examples(
      os.path.join(stsb_dir, "data"))
  want = _test_results(os.path.join(stsb_dir, "out", "test_results.tsv"))
  got = _serve(tmp_path, os.path.join(stsb_dir, "export"),
               text_a=[e.text_a for e in examples],
               text_b=[e.text_b for e in examples])
  np.testing.assert_allclose(got["score"], want[:, 0], atol=1e-5)


def test_multi_label_serves_the_scripts_labels(multi_label_run, tmp_path):
  root = multi_label_run
  with open(os.path.join(root, "test.csv"), newline="") as f:
    texts = [row["text"] for row in csv.DictReader(f)]
  with open(os.path.join(root, "out", "predictions.jsonl")) as f:
    want = [json.loads(line) for line in f]
  got = _serve(tmp_path, os.path.join(root, "export"), text_a=texts)
  labels = ["food", "sport", "weather"]
  for prediction, probabilities, predicted, names in zip(
      want, got["probabilities"], got["predicted"], got["label_names"]):
    assert names == labels
    np.testing.assert_allclose(
        probabilities, [prediction["probabilities"][l] for l in labels],
        atol=1e-5)
    assert [l for l, p in zip(labels, predicted) if p] == prediction["labels"]
