# coding=utf-8
"""Tests of extract_features.py's pooled vectors (--pooling) and of
prediction/sentence_embeddings.py.

The command runs as a child process on a dozen lines of real MRPC text with
the real MiniLM: once for Google's per-token JSON lines, once per pooling
into a .npz file. The pooled vectors are derived again with NumPy from the
JSON lines of the same inputs, layers and batches, and must agree to the
tolerance the JSON's 6-decimal rounding leaves.
"""

import csv
import json
import os

import numpy as np
import pytest

from prediction import sentence_embeddings

LAYERS = (-1, -2)
HIDDEN = 384
NUM_LINES = 12
# The JSON's values are rounded to 6 decimals: each is within this of the
# float32 the model computed.
JSON_ROUNDING = 5e-7


def _input_text(assets_dir):
  """12 lines of MRPC dev: 6 single sentences, then 6 pairs, some longer
  than --max_seq_length."""
  path = os.path.join(assets_dir, "glue", "MRPC", "dev.tsv")
  with open(path, encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:7]
  lines = [row[3] for row in rows]
  lines += ["%s ||| %s" % (row[3], row[4]) for row in rows]
  return "".join(line + "\n" for line in lines)


def _model_flags(minilm_dir):
  return ["--vocab_file=%s" % os.path.join(minilm_dir, "vocab.txt"),
          "--bert_config_file=%s" % os.path.join(minilm_dir,
                                                 "bert_config.json"),
          "--init_checkpoint=%s" % os.path.join(minilm_dir, "bert_model.ckpt"),
          "--max_seq_length=32", "--batch_size=5"]


def _extract(run_script, minilm_dir, input_file, output_file, *extra):
  """Runs extract_features.py, which must succeed."""
  result = run_script("extract_features.py", [
      "--input_file=%s" % input_file, "--output_file=%s" % output_file,
      "--layers=%s" % ",".join(map(str, LAYERS))] +
                      _model_flags(minilm_dir) + list(extra))
  assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, run_script, assets_dir, minilm_dir):
  """(folder, JSON records, {pooling: np.load of its .npz}) of the three
  runs on the same input."""
  folder = tmp_path_factory.mktemp("embeddings")
  input_file = folder / "input.txt"
  input_file.write_text(_input_text(assets_dir), encoding="utf-8")
  _extract(run_script, minilm_dir, input_file, folder / "tokens.jsonl")
  with open(folder / "tokens.jsonl", encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  pooled = {}
  for pooling in ("cls", "mean"):
    path = folder / ("%s.npz" % pooling)
    _extract(run_script, minilm_dir, input_file, path,
             "--pooling=%s" % pooling)
    with np.load(path, allow_pickle=False) as data:
      pooled[pooling] = {name: data[name] for name in data.files}
  return folder, records, pooled


def _token_values(record):
  """float64 [len(LAYERS), num_tokens, HIDDEN] of one JSON record, layers
  in LAYERS order."""
  return np.array([[next(layer["values"] for layer in token["layers"]
                         if layer["index"] == index)
                    for token in record["features"]]
                   for index in LAYERS], dtype=np.float64)


def _tolerance(expected):
  """How far a float32 pooled value may be from `expected`, its value
  derived from the JSON: the JSON's rounding, plus half a float32 step
  (the float64 mean is rounded once to float32)."""
  return JSON_ROUNDING + np.spacing(np.abs(expected).astype(np.float32)) / 2


def _assert_pooled(actual, expected):
  error = np.abs(actual.astype(np.float64) - expected)
  worst = np.unravel_index(np.argmax(error - _tolerance(expected)),
                           error.shape)
  assert np.all(error <= _tolerance(expected)), (
      "off by %g at %s" % (error[worst], worst))


def test_file_loads_with_numpy_alone(outputs):
  folder, records, pooled = outputs
  for pooling, arrays in pooled.items():
    assert sorted(arrays) == ["embeddings", "ids", "layers"], pooling
    assert arrays["embeddings"].dtype == np.float32
    assert arrays["embeddings"].shape == (NUM_LINES, len(LAYERS) * HIDDEN)
    assert arrays["ids"].dtype == np.int64
    assert arrays["ids"].tolist() == [r["linex_index"] for r in records]
    assert arrays["ids"].tolist() == list(range(NUM_LINES))
    assert arrays["layers"].tolist() == list(LAYERS)
  assert sorted(os.listdir(folder)) == [
      "cls.npz", "input.txt", "mean.npz", "tokens.jsonl"]


def test_cls_is_the_first_token(outputs):
  _, records, pooled = outputs
  expected = np.stack([_token_values(r)[:, 0].reshape(-1) for r in records])
  _assert_pooled(pooled["cls"]["embeddings"], expected)


def test_mean_is_over_the_real_tokens(outputs):
  _, records, pooled = outputs
  lengths = [len(r["features"]) for r in records]
  # Truncated pairs fill all 32 positions; short lines leave padding.
  assert max(lengths) == 32 and min(lengths) < 20
  expected = np.stack([_token_values(r).mean(axis=1).reshape(-1)
                       for r in records])
  actual = pooled["mean"]["embeddings"]
  _assert_pooled(actual, expected)
  # [CLS] and [SEP] count: leaving them out gives other vectors.
  without_special = np.stack([_token_values(r)[:, 1:-1].mean(axis=1)
                              .reshape(-1) for r in records])
  assert np.abs(actual - without_special).max() > 1e-2
  assert np.abs(actual - pooled["cls"]["embeddings"]).max() > 1e-1


def _refusal(run_script, minilm_dir, tmp_path, *args):
  """stderr of a run that must be refused in one line, before the model
  loads and with nothing written."""
  input_file = tmp_path / "input.txt"
  input_file.write_text("Hello, World!\n", encoding="utf-8")
  out = tmp_path / "out"
  out.mkdir()
  result = run_script("extract_features.py", [
      "--input_file=%s" % input_file] + _model_flags(minilm_dir) + [
          arg.format(out=out) for arg in args])
  assert result.returncode == 2, result.stderr[-3000:]
  assert result.stdout == ""
  lines = result.stderr.splitlines()
  assert len(lines) == 1, result.stderr[-3000:]
  assert lines[0].startswith("extract_features.py: error: ")
  assert os.listdir(out) == []
  return lines[0]


@pytest.mark.parametrize("args, expected", [
    (["--pooling=max", "--output_file={out}/e.npz"],
     ["--pooling=max", "none|cls|mean"]),
    (["--output_file={out}/e.npz"],
     ["--output_file=", "e.npz", "--pooling=cls", "--pooling=mean"]),
    (["--pooling=none", "--output_file={out}/e.npz"], ["--pooling=mean"]),
    (["--pooling=cls", "--output_file={out}/e.jsonl"],
     ["--pooling=cls", "--output_file", ".npz", "e.jsonl"]),
    (["--pooling=mean", "--output_file={out}/e.npz", "--layers=-1,-7"],
     ["--layers=-1,-7", "-6 to 5"]),
])
def test_bad_input_is_one_line(run_script, minilm_dir, tmp_path, args,
                               expected):
  line = _refusal(run_script, minilm_dir, tmp_path, *args)
  for part in expected:
    assert part in line, line


def test_pooling_checked_before_the_checkpoint(run_script, minilm_dir,
                                               tmp_path):
  """A missing checkpoint is not reached: the pooling's refusal comes
  first."""
  line = _refusal(run_script, minilm_dir, tmp_path, "--pooling=cls",
                  "--output_file={out}/e.jsonl",
                  "--init_checkpoint=%s" % (tmp_path / "missing.ckpt"))
  assert ".npz" in line and "missing.ckpt" not in line, line


def test_pool_one_example():
  first = np.array([[1, 2], [3, 4], [5, 9]], np.float32)
  second = np.array([[0, 1], [0, 0], [0, 2]], np.float32)
  np.testing.assert_array_equal(
      sentence_embeddings.pool([first, second], "cls"), [1, 2, 0, 1])
  mean = sentence_embeddings.pool([first, second], "mean")
  assert mean.dtype == np.float32
  np.testing.assert_array_equal(mean, [3, 5, 0, 1])
  with pytest.raises(ValueError, match="pooling"):
    sentence_embeddings.pool([first], "none")


def test_write_npz_repeatable_bytes(tmp_path):
  ids, embeddings = sentence_embeddings.pool_all(
      [(7, [np.ones((2, 3), np.float32)]), (9, [np.zeros((4, 3),
                                                         np.float32)])],
      "mean")
  paths = [str(tmp_path / name) for name in ("a.npz", "b.npz")]
  for path in paths:
    sentence_embeddings.write_npz(path, ids, embeddings, [-1])
  with open(paths[0], "rb") as a, open(paths[1], "rb") as b:
    assert a.read() == b.read()
  with np.load(paths[0], allow_pickle=False) as data:
    assert data["ids"].tolist() == [7, 9]
    np.testing.assert_array_equal(data["embeddings"], [[1, 1, 1], [0, 0, 0]])
    assert data["layers"].tolist() == [-1]
  assert sorted(os.listdir(tmp_path)) == ["a.npz", "b.npz"]


def test_check_output():
  sentence_embeddings.check_output("none", "x.jsonl")
  sentence_embeddings.check_output("mean", "gs://bucket/x.npz")
  with pytest.raises(ValueError, match="--pooling=sum: expected one of"):
    sentence_embeddings.check_output("sum", "x.npz")
