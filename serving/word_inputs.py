# coding=utf-8
"""Raw texts to a tagger's windows in the graph, as run_ner.py reads a
document (tasks/ner.text_windows): the text cut into words
(tokenization.split_words_with_offsets), each word WordPiece tokenized (a
word with no piece is [UNK]), the pieces read in windows of [CLS] pieces
[SEP], and each word read at its first piece, in the window that gives that
piece the most context (serving/text_windows.py)."""

import collections

import tensorflow as tf

from serving import text_windows

WordWindows = collections.namedtuple(
    "WordWindows", ["model_inputs", "words", "starts", "ends", "window",
                    "position"])
WordWindows.__doc__ = """The windows of a batch of texts.

  model_inputs: dict "input_ids", "input_mask", "segment_ids": int32
    [windows, length], all texts' windows in text order, padded to the
    longest.
  words: tf.string ragged [batch, (words)]; starts, ends: int64 ragged
    [batch, (words)], each word's code point offsets in its text.
  window, position: int64 [all words]: the row of model_inputs each word
    is read from, and the position of its first piece there.
"""


def _with_unknown(pieces, unk_id):
  """`pieces` [words, (pieces)] with an empty row made [unk_id]."""
  empty = tf.cast(tf.equal(pieces.row_lengths(), 0), tf.int64)
  unknown = tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(empty)], tf.constant(unk_id, tf.int64)), empty)
  return tf.concat([pieces, unknown], axis=1)


def word_windows(tokenizer, texts, seq_length, doc_stride):
  """The windows of `texts` and where each word is read.

  Args:
    tokenizer: a serving.graph_tokenizer tokenizer (for_model).
    texts: tf.string [batch].
    seq_length: tokens per window, [CLS] and [SEP] included.
    doc_stride: tokens between window starts.

  Returns:
    a WordWindows.
  """
  words, starts, ends = tokenizer.words_with_offsets(texts)
  pieces = _with_unknown(tokenizer.tokenize(words.flat_values),
                         tokenizer.unk_id)
  word_rows = words.value_rowids()
  by_text = tf.RaggedTensor.from_value_rowids(
      pieces.flat_values, tf.gather(word_rows, pieces.value_rowids()),
      nrows=words.nrows())
  num_tokens = by_text.row_lengths()
  max_tokens = seq_length - 2
  window_starts, lengths = text_windows.doc_spans(num_tokens, max_tokens,
                                                  doc_stride)
  owners = text_windows.max_context_owners(lengths, num_tokens, max_tokens,
                                           doc_stride)
  text_start = tf.gather(by_text.row_starts(), window_starts.value_rowids())
  window_pieces = tf.gather(by_text.flat_values, tf.ragged.range(
      text_start + window_starts.flat_values,
      text_start + window_starts.flat_values + lengths.flat_values))
  count = window_pieces.nrows()
  ids = tf.concat([
      tf.fill([count, 1], tf.constant(tokenizer.vocab["[CLS]"], tf.int64)),
      window_pieces,
      tf.fill([count, 1], tf.constant(tokenizer.vocab["[SEP]"], tf.int64))],
                  axis=1)
  # The first piece of each word, counted within its text.
  first = (pieces.row_starts() -
           tf.gather(by_text.row_starts(), word_rows))
  owner = tf.gather(owners.flat_values,
                    tf.gather(owners.row_starts(), word_rows) + first)
  window = tf.gather(window_starts.row_starts(), word_rows) + owner
  position = first - tf.gather(window_starts.flat_values, window) + 1
  return WordWindows(
      model_inputs={
          "input_ids": tf.cast(ids.to_tensor(0), tf.int32),
          "input_mask": tf.cast(tf.ones_like(ids).to_tensor(0), tf.int32),
          "segment_ids": tf.zeros_like(tf.cast(ids.to_tensor(0), tf.int32)),
      },
      words=words, starts=starts, ends=ends, window=window, position=position)
