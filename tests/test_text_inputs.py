"""serving/text_inputs.py against the scripts' feature conversion
(tasks/classification.convert_single_example) on real text pairs and single
texts, with lengths that force every truncation case, and
truncated_lengths against Google's pop-one-token loop on every small case."""
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


@pytest.mark.parametrize("seq_length,pairs", [(128, True), (24, True),
                                              (9, True), (16, False)])
def test_inputs_equal_convert_single_example(assets_dir, seq_length, pairs):
  vocab_file = os.path.join(assets_dir, "bert_vocab", "uncased", "vocab.txt")
  texts = _mrpc_pairs(assets_dir, 150) + [("Short.", "x " * 40),
                                          ("y " * 40, "Short."),
                                          ("A pair with an empty B.", ""),
                                          ("", "Only B."), ("", "")]
  if not pairs:
    texts = [(a, None) for a, _ in texts]
  reference = tokenization.FullTokenizer(vocab_file, True)
  want = [classification.convert_single_example(
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
