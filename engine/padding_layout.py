# coding=utf-8
"""Which positions of a batch the rows of an encoder layer hold.

An encoder layer works on 2-D activations [rows, width]. With
`AllPositions` the rows are every (example, position) of the batch in
row-major order, as in Google's model. With `RealTokens` they are the
positions whose input_mask is 1 (plus each example's first position): the
feed-forward layers, LayerNorms and dropout then skip the padding, and
attention scatters its query, key and value back to all positions
(`unpack`), where padding keys are masked as always. `FirstPositions` holds
each example's first position only, for the pooler's pass over the last
layer. All three draw dropout masks for the whole [batch * seq_length,
width] tensor and take their rows of it, so a row's mask never depends on
the layout.
"""

import tensorflow as tf

from engine import dropout_masks


def _width(rows):
  width = rows.shape[-1]
  if rows.shape.ndims != 2 or width is None:
    raise ValueError("Layer rows must be a [rows, width] Tensor with a known "
                     "width, got shape %s." % rows.shape)
  return int(width)


def of_mask(input_mask, batch_size, seq_length):
  """`RealTokens` of the int Tensor `input_mask` [batch_size, seq_length],
  or `AllPositions` when it is None."""
  if input_mask is None:
    return AllPositions(batch_size, seq_length)
  return RealTokens(input_mask, batch_size, seq_length)


class AllPositions(object):
  """Every position of a [batch_size, seq_length] batch, row-major."""

  def __init__(self, batch_size, seq_length):
    self.batch_size = batch_size
    self.seq_length = seq_length

  def pack(self, padded):
    """[batch_size * seq_length, width] -> this layout's rows."""
    return padded

  def unpack(self, rows):
    """This layout's rows -> [batch_size * seq_length, width]."""
    return rows

  def first_rows(self, rows):
    """[batch_size, width]: each example's first position (its [CLS])."""
    return tf.reshape(rows, [self.batch_size, self.seq_length,
                             _width(rows)])[:, 0]

  def _padded_mask(self, rows, dropout_prob, name):
    """The keep mask of all positions, [batch_size * seq_length, width]."""
    return dropout_masks.keep_mask(
        [self.batch_size * self.seq_length, _width(rows)], dropout_prob, name,
        after=rows)

  def _rows_of_mask(self, padded_mask):
    return padded_mask

  def dropout(self, rows, dropout_prob, name=None):
    """Dropout of `rows` with their part of the mask of all positions."""
    if not dropout_masks.check_prob(dropout_prob):
      return rows
    keep = self._rows_of_mask(self._padded_mask(rows, dropout_prob, name))
    return dropout_masks.apply_keep_mask(rows, keep, dropout_prob)


class RealTokens(AllPositions):
  """The positions where input_mask is 1, each example's first position,
  and every position of an example that is all padding (Google's model lets
  such an example's positions attend to all of them, so they are computed
  whole)."""

  def __init__(self, input_mask, batch_size, seq_length):
    super(RealTokens, self).__init__(batch_size, seq_length)
    is_real = tf.not_equal(input_mask, 0)
    first_position = tf.equal(tf.range(seq_length), 0)
    all_padding = tf.logical_not(
        tf.reduce_any(is_real, axis=1, keepdims=True))
    # [batch_size * seq_length] bool, True for the positions that are rows.
    is_row = tf.reshape(
        tf.logical_or(tf.logical_or(is_real, first_position), all_padding),
        [-1])
    # [real rows]: the position of each real row.
    self._real_positions = tf.where(is_row)[:, 0]
    num_real = tf.size(self._real_positions, out_type=tf.int64)
    # Never more rows than positions.
    num_rows = tf.minimum(bucketed_rows(num_real),
                          tf.cast(batch_size, tf.int64) *
                          tf.cast(seq_length, tf.int64))
    # [rows]: the position each row is taken from; the rows past the real
    # ones (a few, see `bucketed_rows`) copy position 0, and no position
    # and no gradient reads them.
    self._positions = tf.concat(
        [self._real_positions, tf.zeros([num_rows - num_real], tf.int64)], 0)
    self._num_extra_rows = num_rows - num_real
    # [batch_size * seq_length]: each position's row, or num_rows (the zero
    # row that `unpack` appends) for the positions without one.
    row_number = tf.cumsum(tf.cast(is_row, tf.int64)) - 1
    self._rows_of_positions = tf.where(is_row, row_number, num_rows)
    # [batch_size]: the row of each example's first position.
    self._first_rows = tf.gather(
        self._rows_of_positions,
        tf.range(tf.cast(batch_size, tf.int64)) *
        tf.cast(seq_length, tf.int64))

  # pack and unpack are each other's gradient and both are gathers: the
  # gradient autodiff gives a gather (ScatterNd) copies row by row on one
  # thread, several times slower. The extra rows take no part in either
  # gradient: unpack's gives them zeros, so nothing computed from them
  # reaches a weight's gradient.

  def pack(self, padded):
    @tf.custom_gradient
    def pack_fn(padded):
      return tf.gather(padded, self._positions), self.unpack

    return pack_fn(padded)

  def _pack_gradient(self, padded_grad):
    """pack's rows of `padded_grad`, zero in the extra rows."""
    return tf.pad(tf.gather(padded_grad, self._real_positions),
                  [[0, self._num_extra_rows], [0, 0]])

  def unpack(self, rows):
    """Rows -> [batch_size * seq_length, width], zero at padding."""
    @tf.custom_gradient
    def unpack_fn(rows):
      rows_and_zero = tf.concat(
          [rows, tf.zeros([1, _width(rows)], rows.dtype)], 0)
      return (tf.gather(rows_and_zero, self._rows_of_positions),
              self._pack_gradient)

    return unpack_fn(rows)

  def first_rows(self, rows):
    return tf.gather(rows, self._first_rows)

  def _rows_of_mask(self, padded_mask):
    return self.pack(padded_mask)


def bucketed_rows(num_rows):
  """int64 scalar Tensor `num_rows` rounded up to a multiple of 1/32 of its
  power of two (at least 16): at most about 3% more rows.

  The compiled kernels (engine/xla_kernels.py) are compiled again for every
  shape they meet, and a batch's count of real tokens is a new one on most
  of the first epoch's steps; rounded, a run meets 32 counts per doubling
  of the count instead of one per count (measured in docs/results.md).
  """
  powers = tf.constant([1 << k for k in range(62)], tf.int64)
  floor_log2 = tf.reduce_sum(tf.cast(powers <= num_rows, tf.int64)) - 1
  step = tf.bitwise.left_shift(tf.constant(1, tf.int64),
                               tf.maximum(floor_log2 - 5, 4))
  return (num_rows + step - 1) // step * step


class FirstPositions(AllPositions):
  """Each example's first position alone: rows [batch_size, width]."""

  def pack(self, padded):
    raise NotImplementedError("FirstPositions holds no padded layer.")

  unpack = pack

  def first_rows(self, rows):
    return rows

  def _rows_of_mask(self, padded_mask):
    return tf.reshape(padded_mask, [self.batch_size, self.seq_length,
                                    -1])[:, 0]
