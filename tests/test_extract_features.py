# coding=utf-8
"""Tests of extract_features.py with the real MiniLM checkpoint.

The script runs once (module fixture) on three lines of real MRPC text;
the test recomputes the layers with modeling.BertModel on unpadded inputs
and compares.
"""

import csv
import json
import os

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from userio import cli
import extract_features
import modeling
from tasks import text_pair
import tokenization

SEQ_LENGTH = 16


@pytest.fixture(scope="module")
def mrpc_rows(assets_dir):
  path = os.path.join(assets_dir, "glue", "MRPC", "dev.tsv")
  with open(path, encoding="utf-8") as f:
    return list(csv.reader(f, delimiter="\t", quotechar=None))[1:]


def _flags(minilm_dir, input_file, output_file, *extra):
  """Parsed script flags in a private FlagValues."""
  fv = flags.FlagValues()
  extract_features.define_flags(fv)
  fv([
      "extract_features.py",
      "--input_file=%s" % input_file,
      "--output_file=%s" % output_file,
      "--vocab_file=%s" % os.path.join(minilm_dir, "vocab.txt"),
      "--bert_config_file=%s" % os.path.join(minilm_dir, "bert_config.json"),
      "--init_checkpoint=%s" % os.path.join(minilm_dir, "bert_model.ckpt"),
      "--max_seq_length=%d" % SEQ_LENGTH,
  ] + list(extra))
  return fv


@pytest.fixture(scope="module")
def extracted(tmp_path_factory, minilm_dir, mrpc_rows):
  """Runs the script on 3 lines; returns (output path, parsed records)."""
  folder = tmp_path_factory.mktemp("extract")
  input_file = folder / "input.txt"
  input_file.write_text("Hello, World!\n%s ||| %s\n%s\n" % (
      mrpc_rows[1][3], mrpc_rows[1][4], mrpc_rows[0][3]), encoding="utf-8")
  output_file = folder / "output.jsonl"
  fv = _flags(minilm_dir, input_file, output_file,
              "--layers=-1,-2", "--batch_size=2")
  extract_features.run(fv)
  with open(output_file, encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  return output_file, records


def _tokens(record):
  return [feature["token"] for feature in record["features"]]


def _layer(record, index):
  """[num_tokens, hidden] values of layer `index` in one output record."""
  return np.array([
      next(l["values"] for l in feature["layers"] if l["index"] == index)
      for feature in record["features"]])


def test_json_structure(extracted):
  output_file, records = extracted
  assert not os.path.exists(str(output_file) + ".tmp")
  assert [r["linex_index"] for r in records] == [0, 1, 2]
  for record in records:
    assert list(record) == ["linex_index", "features"]
    for feature in record["features"]:
      assert list(feature) == ["token", "layers"]
      assert [layer["index"] for layer in feature["layers"]] == [-1, -2]
      for layer in feature["layers"]:
        assert len(layer["values"]) == 384
        # Rounded to 6 decimals.
        assert all(round(v, 6) == v for v in layer["values"][:20])


def test_tokens_and_truncation(extracted):
  _, records = extracted
  assert _tokens(records[0]) == [
      "[CLS]", "hello", ",", "world", "!", "[SEP]"]
  # A pair of 24 + 25 tokens cut to 16 - 3 = 13: the longer loses its last
  # token (text_b on a tie), leaving 7 of text_a and 6 of text_b.
  assert _tokens(records[1]) == [
      "[CLS]", "magna", "##relli", "said", "ra", "##cic", "##ot", "hated",
      "[SEP]", "his", "wife", "said", "he", "was", "\"", "[SEP]"]
  # A single text of 23 tokens keeps its first 16 - 2 = 14.
  assert _tokens(records[2]) == [
      "[CLS]", "he", "said", "the", "foods", "##er", "##vic", "##e", "pie",
      "business", "doesn", "'", "t", "fit", "the", "[SEP]"]


def _reference_layers(minilm_dir, input_ids, token_type_ids,
                      hidden_act=None):
  """All encoder layers of BertModel for one unpadded example.

  Returns:
    float32 array [num_layers, len(input_ids), hidden].
  """
  config = modeling.BertConfig.from_json_file(
      os.path.join(minilm_dir, "bert_config.json"))
  config.hidden_act = hidden_act or config.hidden_act
  checkpoint = os.path.join(minilm_dir, "bert_model.ckpt")
  with tf.Graph().as_default():
    model = modeling.BertModel(
        config, is_training=False,
        input_ids=tf.constant([input_ids], tf.int32),
        token_type_ids=tf.constant([token_type_ids], tf.int32))
    names = {v.name.split(":")[0]
             for v in tf.compat.v1.trainable_variables()}
    tf.compat.v1.train.init_from_checkpoint(
        checkpoint, {name: name for name in names})
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      layers = session.run(model.get_all_encoder_layers())
  return np.stack([layer[0] for layer in layers])


def test_values_match_bert_model(extracted, minilm_dir):
  _, records = extracted
  # Published ids of "[CLS] hello , world ! [SEP]" in the uncased vocab.
  hello_ids = [101, 7592, 1010, 2088, 999, 102]
  tokenizer = tokenization.FullTokenizer(
      os.path.join(minilm_dir, "vocab.txt"))
  pair_ids = tokenizer.convert_tokens_to_ids(_tokens(records[1]))
  pair_types = [0] * 9 + [1] * 7
  for record, ids, types in ((records[0], hello_ids, [0] * 6),
                             (records[1], pair_ids, pair_types)):
    reference = _reference_layers(minilm_dir, ids, types)
    np.testing.assert_allclose(_layer(record, -1), reference[-1], atol=1e-5)
    np.testing.assert_allclose(_layer(record, -2), reference[-2], atol=1e-5)
  assert np.abs(_layer(records[0], -1) - _layer(records[0], -2)).max() > 0.1


def test_hugging_face_folder_as_init_checkpoint(tmp_path, assets_dir,
                                                 minilm_dir):
  """The Hugging Face copy of MiniLM needs no --vocab_file or
  --bert_config_file, and runs with the exact GELU it was trained with."""
  input_file = tmp_path / "input.txt"
  input_file.write_text("Hello, World!\n", encoding="utf-8")
  output_file = tmp_path / "output.jsonl"
  fv = flags.FlagValues()
  extract_features.define_flags(fv)
  fv(["extract_features.py", "--input_file=%s" % input_file,
      "--output_file=%s" % output_file, "--layers=-1",
      "--init_checkpoint=%s" % os.path.join(
          assets_dir, "models", "all-minilm-l6-v2-hf"),
      "--max_seq_length=%d" % SEQ_LENGTH])
  extract_features.run(fv)
  with open(output_file, encoding="utf-8") as f:
    record = json.loads(f.readline())
  assert _tokens(record) == ["[CLS]", "hello", ",", "world", "!", "[SEP]"]
  hello_ids = [101, 7592, 1010, 2088, 999, 102]
  exact = _reference_layers(minilm_dir, hello_ids, [0] * 6, "gelu_exact")
  np.testing.assert_allclose(_layer(record, -1), exact[-1], atol=1e-5)
  tanh = _reference_layers(minilm_dir, hello_ids, [0] * 6)
  assert np.abs(_layer(record, -1) - tanh[-1]).max() > 1e-4


def test_missing_input_file(tmp_path, minilm_dir):
  missing = tmp_path / "nope.txt"
  fv = _flags(minilm_dir, missing, tmp_path / "out.jsonl")
  with pytest.raises(cli.UserError) as info:
    extract_features.run(fv)
  assert str(missing) in str(info.value)
  assert "--input_file" in str(info.value)
  assert not os.path.exists(tmp_path / "out.jsonl")


def test_layer_out_of_range(tmp_path, minilm_dir):
  input_file = tmp_path / "in.txt"
  input_file.write_text("hello\n")
  fv = _flags(minilm_dir, input_file, tmp_path / "out.jsonl",
              "--layers=-1,-7")
  with pytest.raises(ValueError, match=r"--layers=-1,-7.*-6 to 5"):
    extract_features.run(fv)


def test_parse_layers():
  assert extract_features.parse_layers("-1,-2,-3,-4", 12) == [-1, -2, -3, -4]
  assert extract_features.parse_layers("0,5,-6", 6) == [0, 5, -6]
  with pytest.raises(ValueError, match="layer 6 is out of range"):
    extract_features.parse_layers("6", 6)
  with pytest.raises(ValueError, match="comma-separated integers"):
    extract_features.parse_layers("-1;-2", 6)


def test_tpu_refused(tmp_path, minilm_dir):
  fv = _flags(minilm_dir, tmp_path / "in.txt", tmp_path / "out.jsonl",
              "--use_tpu")
  with pytest.raises(ValueError, match="--use_tpu"):
    extract_features.run(fv)


def test_read_examples(tmp_path):
  path = tmp_path / "in.txt"
  path.write_text("a b ||| c d\n\n  single line  \nx|||y\n", encoding="utf-8")
  examples = extract_features.read_examples(str(path))
  assert [(e.unique_id, e.text_a, e.text_b) for e in examples] == [
      (0, "a b", "c d"), (1, "", None), (2, "single line", None),
      (3, "x|||y", None)]


def test_truncate_seq_pair():
  a, b = list("abcde"), list("xy")
  text_pair.truncate_seq_pair(a, b, 5)
  assert (a, b) == (list("abc"), list("xy"))
  a, b = list("abc"), list("xyz")
  text_pair.truncate_seq_pair(a, b, 4)
  assert (a, b) == (list("ab"), list("xy"))


def test_text_pair_layout():
  # A pair in 8 positions: 3 special tokens leave 5, the longer text (a)
  # loses its tail; segment 1 starts after the first [SEP].
  tokens, segments = text_pair.layout(list("abcde"), list("xy"), 8)
  assert tokens == ["[CLS]", "a", "b", "c", "[SEP]", "x", "y", "[SEP]"]
  assert segments == [0, 0, 0, 0, 0, 1, 1, 1]
  # One text in 5 positions: [CLS] and [SEP] leave 3.
  tokens, segments = text_pair.layout(list("abcdef"), None, 5)
  assert tokens == ["[CLS]", "a", "b", "c", "[SEP]"]
  assert segments == [0] * 5
  # An empty second text is a single text.
  assert text_pair.layout(list("ab"), [], 8)[0] == ["[CLS]", "a", "b",
                                                     "[SEP]"]
