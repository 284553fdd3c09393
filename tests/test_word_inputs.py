"""serving/text_windows.py and serving/word_inputs.py against the Python
they stand for: tasks/windows.py's windows and max-context owners, and
run_ner.py's windows of a text (tasks/ner.text_windows) with the position
each word is read at."""
import os
import random

import pytest
import tensorflow as tf

import tokenization
from serving import graph_tokenizer
from serving import text_windows
from serving import word_inputs
from tasks import ner
from tasks import windows
from test_graph_tokenizer import _generated


def _run(fetches):
  with tf.compat.v1.Session() as session:
    return session.run(fetches)


def _windows_and_owners(num_tokens, max_tokens, stride):
  starts, lengths = text_windows.doc_spans(num_tokens, max_tokens, stride)
  owners = text_windows.max_context_owners(lengths, num_tokens, max_tokens,
                                           stride)
  return starts, lengths, owners


def test_windows_and_owners_equal_tasks_windows():
  rng = random.Random(0)
  rows = []
  for _ in range(200):
    max_tokens, stride = rng.randint(1, 12), rng.randint(1, 15)
    rows += [(rng.choice([0, rng.randint(1, 40)]), max_tokens, stride)
             for _ in range(rng.randint(1, 4))]
  counts = [count for count, _, _ in rows]
  # Each text's own sizes in one batch, and sizes shared by the batch (as an
  # export's flags give them).
  shared = [(5, 2), (12, 20), (1, 1)]
  with tf.Graph().as_default():
    num_tokens = tf.constant(counts, tf.int64)
    graphs = [_windows_and_owners(
        num_tokens, *(tf.constant(column, tf.int64)
                      for column in list(zip(*rows))[1:]))]
    graphs += [_windows_and_owners(num_tokens, max_tokens, stride)
               for max_tokens, stride in shared]
    results = _run(graphs)
  sizes = [[(m, s) for _, m, s in rows]] + [[size] * len(rows)
                                           for size in shared]
  for row_sizes, values in zip(sizes, results):
    starts, lengths, owners = (value.to_list() for value in values)
    for row, (count, (max_tokens, stride)) in enumerate(zip(counts,
                                                            row_sizes)):
      spans = windows.doc_spans(count, max_tokens, stride)
      assert ([(s.start, s.length) for s in spans] ==
              list(zip(starts[row], lengths[row]))), (count, max_tokens,
                                                      stride)
      assert windows.max_context_owners(spans, count) == list(
          owners[row]), (count, max_tokens, stride)


@pytest.mark.parametrize("seq_length,doc_stride", [(6, 1), (8, 3), (12, 20),
                                                   (24, 11)])
def test_word_windows_equal_run_ner_windows(assets_dir, seq_length,
                                            doc_stride):
  vocab_file = os.path.join(assets_dir, "bert_vocab", "cased", "vocab.txt")
  texts = _generated(150, seq_length) + [
      "", "Anna Smith-Jones visited Paris,\u00a0(France).",
      "\u200b x \u200b", "\u00c9t\u00e9 \u4e2d\u6587 d\u00e9j\u00e0-vu"]
  reference = tokenization.FullTokenizer(vocab_file, False)
  with tf.Graph().as_default():
    layout = word_inputs.word_windows(
        graph_tokenizer.GraphTokenizer(vocab_file, False),
        tf.constant(texts), seq_length, doc_stride)
    inputs, window, position = _run(
        [layout.model_inputs, layout.window, layout.position])
  row = word = 0
  for text in texts:
    words = [w for w, _, _ in tokenization.split_words_with_offsets(text)]
    for index, expected in enumerate(ner.text_windows(
        words, reference, seq_length, doc_stride)):
      length = len(expected.tokens)
      assert list(inputs["input_ids"][row + index][:length]) == (
          reference.convert_tokens_to_ids(expected.tokens)), repr(text)
      assert list(inputs["input_mask"][row + index]) == (
          [1] * length + [0] * (inputs["input_mask"].shape[1] - length))
      for at, word_index in expected.word_positions:
        assert (window[word + word_index], position[word + word_index]) == (
            row + index, at), repr(text)
    row += len(ner.text_windows(words, reference, seq_length, doc_stride))
    word += len(words)
  assert (row, word) == (len(inputs["input_ids"]), len(window))
  assert not inputs["segment_ids"].any()
