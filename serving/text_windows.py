# coding=utf-8
"""The windows of tasks/windows.py as graph ops, for many texts at once.

A text of n tokens is read in windows of at most `max_tokens` tokens,
started every `stride` tokens (never past the end of the window before:
the step is min(stride, max_tokens)) until one reaches the end. Each token
belongs to the window that gives it the most context, as
`windows.max_context_owners` decides (serving/context_score.py's score, the
first window on a tie).
"""

import tensorflow as tf

from serving import context_score


def _per_text(value, num_tokens):
  """`value` (an int, or int64 [batch]) as int64 [batch]."""
  return tf.broadcast_to(tf.cast(value, tf.int64), tf.shape(num_tokens))


def doc_spans(num_tokens, max_tokens, stride, keep_empty=False):
  """The windows over texts of `num_tokens` tokens.

  Args:
    num_tokens: int64 [batch].
    max_tokens, stride: ints, or int64 [batch] (each text's own), at
      least 1.
    keep_empty: whether an empty text has one empty window (else none).

  Returns:
    (starts, lengths): int64 ragged [batch, (windows)].
  """
  max_tokens = _per_text(max_tokens, num_tokens)
  step = tf.minimum(_per_text(stride, num_tokens), max_tokens)
  beyond = tf.maximum(num_tokens - max_tokens, 0)
  count = tf.where(num_tokens > 0, (beyond + step - 1) // step + 1,
                   tf.fill(tf.shape(num_tokens),
                           tf.constant(int(keep_empty), tf.int64)))
  index = tf.ragged.range(count)
  rows = index.value_rowids()
  starts = index.flat_values * tf.gather(step, rows)
  ends = tf.minimum(starts + tf.gather(max_tokens, rows),
                    tf.gather(num_tokens, rows))
  return index.with_flat_values(starts), index.with_flat_values(ends - starts)


def max_context_owners(lengths, num_tokens, max_tokens, stride):
  """The window of each token, as `windows.max_context_owners` picks it.

  Args:
    lengths: int64 ragged [batch, (windows)], doc_spans' lengths.
    num_tokens: int64 [batch], the texts' token counts.
    max_tokens, stride: as doc_spans was given them.

  Returns:
    int64 ragged [batch, (tokens)]: for each token, the index of its window
    among its text's windows.
  """
  max_tokens = _per_text(max_tokens, num_tokens)
  step = tf.minimum(_per_text(stride, num_tokens), max_tokens)
  positions = tf.ragged.range(num_tokens)
  rows = positions.value_rowids()
  tokens = positions.flat_values
  token_step = tf.gather(step, rows)
  # The windows holding a token: those started at most `tokens` and ending
  # after it (all but the last are max_tokens long; the last ends the text).
  last = tf.gather(lengths.row_lengths(), rows) - 1
  first = tf.maximum(
      (tokens - tf.gather(max_tokens, rows)) // token_step + 1, 0)
  candidates = tf.ragged.range(first,
                               tf.minimum(tokens // token_step, last) + 1)
  token_of = candidates.value_rowids()
  window = candidates.flat_values
  position = tf.gather(tokens, token_of)
  start = window * tf.gather(token_step, token_of)
  length = tf.gather(lengths.flat_values,
                     tf.gather(lengths.row_starts(),
                               tf.gather(rows, token_of)) + window)
  context = tf.minimum(position - start, start + length - 1 - position)
  score = (tf.cast(context, tf.float64) +
           context_score.LENGTH_WEIGHT * tf.cast(length, tf.float64))
  best = tf.math.segment_max(score, token_of)
  first_best = tf.math.segment_min(
      tf.where(tf.equal(score, tf.gather(best, token_of)), window,
               tf.reduce_max(window) + 1), token_of)
  return positions.with_flat_values(first_best)
