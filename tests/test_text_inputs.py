"""serving/text_inputs.py against the scripts' feature conversion
(tasks/classification_features.convert_single_example) on real text pairs
and single texts, with lengths that force every truncation case, and its
windows against classification_features.example_windows; truncated_lengths
against Google's pop-one-token loop on every small case."""
import csv
import itertools
import os

import numpy as np
import pytest
import tensorflow as tf

import tokenization
from serving import graph_tokenizer
from serving import text_inputs
from tasks import classification
from tasks import classification_features
from tasks import text_pair


def test_truncated_lengths_equal_the_loop():
  cases = list(itertools.product(range(12), range(12), range(1, 12)))
  a, b, room = (np.array(column, np.int64) for column in zip(*cases))
  kept_a, kept_b = text_inputs.truncated_lengths(a, b, room)
  for (length_a, length_b, r), got_a, got_b in zip(cases, kept_a.numpy(),
                                                   kept_b.numpy()):
    tokens_a, tokens_b = [0] * length_a, [0] * length_b
    text_pair.truncate_seq_pair(tokens_a, tokens_b, r)
    assert (got_a, got_b) == (len(tokens_a), len(tokens_b)), (length_a,
                                                              length_b, r)


def _mrpc_pairs(assets_dir, count):
  with open(os.path.join(assets_dir, "glue", "MRPC", "dev.tsv"),
            encoding="utf-8-sig") as f:
    rows = list(csv.reader(f, delimiter="\t", quotechar=None))[1:count + 1]
  return [(row[3], row[4]) for row in rows]


def _texts(assets_dir, count, pairs):
  """`count` MRPC pairs and pairs of every kind of length (long, short,
  empty); with `pairs` false, their first texts alone."""
  texts = _mrpc_pairs(assets_dir, count) + [
      ("Short.", "x " * 40), ("y " * 40, "Short."),
      ("A pair with an empty B.", ""), ("", "Only B."), ("", "")]
  return texts if pairs else [(a, None) for a, _ in texts]


@pytest.mark.parametrize("seq_length,pairs", [(128, True), (24, True),
                                              (9, True), (16, False)])
def test_inputs_equal_convert_single_example(assets_dir, seq_length, pairs):
  vocab_file = os.path.join(assets_dir, "bert_vocab", "uncased", "vocab.txt")
  texts = _texts(assets_dir, 150, pairs)
  reference = tokenization.FullTokenizer(vocab_file, True)
  want = [classification_features.convert_single_example(
      0, classification.InputExample("x", a, b, "0"), ["0"], seq_length,
      reference) for a, b in texts]
  graph = tf.Graph()
  with graph.as_default():
    tokenizer = graph_tokenizer.GraphTokenizer(vocab_file, True)
    inputs = text_inputs.model_inputs(
        tokenizer, seq_length, tf.constant([a for a, _ in texts]),
        tf.constant([b for _, b in texts]) if pairs else None)
    with tf.compat.v1.Session() as session:
      got = session.run(inputs)
  longest = max(sum(feature.input_mask) for feature in want)
  for name in ("input_ids", "input_mask", "segment_ids"):
    # Padded to the batch's longest example, the script's to seq_length.
    np.testing.assert_array_equal(
        got[name], [getattr(feature, name)[:longest] for feature in want],
        err_msg=name)
    assert not np.any([getattr(feature, name)[longest:] for feature in want])


@pytest.mark.parametrize("seq_length,pairs,doc_stride", [
    (24, True, None), (13, True, 3), (16, False, None), (9, False, 20)])
def test_windows_equal_example_windows(assets_dir, seq_length, pairs,
                                       doc_stride):
  """--long_text=windows: each example's windows, in order, as
  classification_features.example_windows lays them out (second text cut
  to half the room, the first in windows of the rest)."""
  vocab_file = os.path.join(assets_dir, "bert_vocab", "uncased", "vocab.txt")
  texts = _texts(assets_dir, 60, pairs)
  reference = tokenization.FullTokenizer(vocab_file, True)
  want, example_of = [], []
  for index, (a, b) in enumerate(texts):
    parts = classification_features.example_windows(
        classification.InputExample("x", a, b, "0"), seq_length, reference,
        doc_stride)
    want += [(reference.convert_tokens_to_ids(part.tokens), part.segment_ids)
             for part in parts]
    example_of += [index] * len(parts)
  with tf.Graph().as_default():
    inputs, example = text_inputs.window_inputs(
        graph_tokenizer.GraphTokenizer(vocab_file, True), seq_length,
        tf.constant([a for a, _ in texts]),
        tf.constant([b for _, b in texts]) if pairs else None, doc_stride)
    with tf.compat.v1.Session() as session:
      got, got_example = session.run([inputs, example])
  assert list(got_example) == example_of
  assert len(example_of) > len(texts)  # some examples have several windows
  for row, (ids, segments) in enumerate(want):
    length = len(ids)
    assert list(got["input_ids"][row][:length]) == ids, row
    assert list(got["segment_ids"][row][:length]) == segments, row
    assert list(got["input_mask"][row]) == [1] * length + [0] * (
        got["input_mask"].shape[1] - length), row
