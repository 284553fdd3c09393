# coding=utf-8
"""Raw texts to BERT's input ids in the graph, as the scripts' feature
conversion (tasks/classification_features.convert_single_example) makes them:
[CLS] A [SEP] (B [SEP]), the pair cut by Google's _truncate_seq_pair
(a token off the longer text, the second on a tie, until it fits), or in
--long_text=windows' windows. Zero padding goes to the batch's longest
example rather than to max_seq_length: attention ignores padding, so the
outputs are the same, for less work."""

import tensorflow as tf

from serving import text_windows


def truncated_lengths(length_a, length_b, room):
  """The lengths _truncate_seq_pair leaves, computed at once.

  Args:
    length_a, length_b: int64 [batch], the texts' token counts.
    room: int, the tokens the two may hold together.

  Returns:
    (kept_a, kept_b) int64 [batch]. Cutting from the longer text first
    means: when the difference covers the excess, only the longer one
    loses it; else both end at half the room, the first text keeping the
    odd token (the tie cuts the second).
  """
  excess = length_a + length_b - room
  a_covers = length_a - length_b >= excess
  b_covers = length_b - length_a >= excess
  half_up, half_down = (room + 1) // 2, room // 2
  fits = excess <= 0
  kept_a = tf.where(fits | b_covers, length_a,
                    tf.where(a_covers, length_a - excess, half_up))
  kept_b = tf.where(fits | a_covers, length_b,
                    tf.where(b_covers, length_b - excess, half_down))
  return (tf.cast(kept_a, tf.int64), tf.cast(kept_b, tf.int64))


def _first(ids, counts):
  """Each row of ragged `ids` cut to its first `counts` values."""
  positions = tf.ragged.range(ids.row_lengths())
  return tf.ragged.boolean_mask(ids, positions < counts[:, None])


def _tokenized(tokenizer, texts_a, texts_b):
  """(ids of texts_a, ids of texts_b or rows of none), ragged int64."""
  ids_a = tokenizer.tokenize(texts_a)
  if texts_b is None:
    return ids_a, tf.RaggedTensor.from_row_lengths(
        tf.zeros([0], tf.int64), tf.zeros([ids_a.nrows()], tf.int64))
  return ids_a, tokenizer.tokenize(texts_b)


def _laid_out(tokenizer, ids_a, ids_b):
  """[CLS] a [SEP] (b [SEP]) of each row, padded to the longest: the
  model's int32 "input_ids", "input_mask" and "segment_ids". A row whose
  b has no ids is a single text."""
  rows = ids_a.nrows()
  pair = tf.cast(ids_b.row_lengths() > 0, tf.int64)

  def column(value, lengths=None):
    lengths = tf.ones([rows], tf.int64) if lengths is None else lengths
    return tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(lengths)], tf.constant(value, tf.int64)),
        lengths)

  cls, sep = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  ids = tf.concat([column(cls), ids_a, column(sep), ids_b,
                   column(sep, pair)], axis=1)
  segments = tf.concat([column(0), tf.zeros_like(ids_a), column(0),
                        tf.ones_like(ids_b), column(1, pair)], axis=1)
  return {
      "input_ids": tf.cast(ids.to_tensor(0), tf.int32),
      "input_mask": tf.cast(tf.ones_like(ids).to_tensor(0), tf.int32),
      "segment_ids": tf.cast(segments.to_tensor(0), tf.int32),
  }


def model_inputs(tokenizer, seq_length, texts_a, texts_b=None):
  """BERT's inputs of each text, or text pair.

  Args:
    tokenizer: a graph_tokenizer tokenizer (for_model).
    seq_length: int, the --max_seq_length the model was trained with.
    texts_a: tf.string [batch].
    texts_b: tf.string [batch], the second texts of pairs, or None. A pair
      whose second text has no tokens is laid out as one text, as
      text_pair.layout does.

  Returns:
    dict "input_ids", "input_mask", "segment_ids": int32 [batch, length],
    length the longest example's, at most seq_length.
  """
  ids_a, ids_b = _tokenized(tokenizer, texts_a, texts_b)
  pair = tf.cast(ids_b.row_lengths() > 0, tf.int64)
  kept_a, kept_b = truncated_lengths(ids_a.row_lengths(), ids_b.row_lengths(),
                                     seq_length - 2 - pair)
  return _laid_out(tokenizer, _first(ids_a, kept_a), _first(ids_b, kept_b))


def window_inputs(tokenizer, seq_length, texts_a, texts_b=None,
                  doc_stride=None):
  """BERT's inputs of each example in windows, as
  tasks/classification_features.example_windows lays them out
  (--long_text=windows): an example that fits is one window; in a longer
  one the second text is cut to half the room and the first read in
  windows of the rest, started every `doc_stride` tokens (None: half of
  that rest).

  Args:
    tokenizer, seq_length, texts_a, texts_b: as model_inputs.
    doc_stride: int or None.

  Returns:
    (inputs, example): inputs as model_inputs gives them, one row per
    window, the examples' windows in order; example: int64 [windows], the
    example of each.
  """
  ids_a, ids_b = _tokenized(tokenizer, texts_a, texts_b)
  length_a, length_b = ids_a.row_lengths(), ids_b.row_lengths()
  room = seq_length - 2 - tf.cast(length_b > 0, tf.int64)
  fits = length_a + length_b <= room
  ids_b = _first(ids_b, tf.where(fits, length_b,
                                 tf.minimum(length_b, room // 2)))
  room_a = room - ids_b.row_lengths()
  stride = (tf.maximum(room_a // 2, 1) if doc_stride is None
            else doc_stride)
  starts, lengths = text_windows.doc_spans(length_a, room_a, stride,
                                           keep_empty=True)
  example = starts.value_rowids()
  first = tf.gather(ids_a.row_starts(), example) + starts.flat_values
  windows_a = tf.gather(ids_a.flat_values,
                        tf.ragged.range(first, first + lengths.flat_values))
  return (_laid_out(tokenizer, windows_a, tf.gather(ids_b, example)),
          example)
