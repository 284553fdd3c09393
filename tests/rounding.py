"""Tolerances for results computed in a reduced-precision dtype.

Rounding a real number x to a dtype moves it by at most u * |x|, where u is
the dtype's unit roundoff (half the gap between 1.0 and the next number:
2^-8 for bfloat16, 2^-11 for float16, 2^-24 for float32). A sum rounded once
is off by at most u times the sum of the magnitudes of its terms, not u times
the result: with cancellation the result can be far smaller than what was
added up. So every tolerance here is

    roundings * u * magnitude

with `magnitude` the float64 evaluation of the same formula on absolute
values (|a| @ |b| + |bias|, ...), computed by the test from its inputs, and
`roundings` the number of times a value on the longest path from the inputs
to the result is rounded to the dtype, counted by the test (each first-order
error is at most u times a magnitude that the absolute-value evaluation
bounds at the result). The count assumes that TensorFlow's CPU kernels add
up bfloat16 and float16 products in float32 and round each op's output once;
`check_float32_accumulation` asserts that on the machine at hand, so a CPU
path that accumulated in the narrow dtype would fail there, by name, rather
than as a tolerance somewhere else.
"""
import os

import numpy as np
import tensorflow as tf

UNIT_ROUNDOFF = {tf.bfloat16: 2.0 ** -8, tf.float16: 2.0 ** -11,
                 tf.float32: 2.0 ** -24, tf.float64: 2.0 ** -53}


def unit_roundoff(dtype):
  """u of `dtype` (a tf.DType or its name)."""
  return UNIT_ROUNDOFF[tf.as_dtype(dtype)]


def cpu_path():
  """Which of TensorFlow's CPU kernel families runs here, for messages:
  oneDNN's (TensorFlow's default on CPUs with AVX-512) or Eigen's."""
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  if _pywrap_util_port.IsMklEnabled():
    return "oneDNN kernels"
  return "Eigen kernels (oneDNN off)"


def check_float32_accumulation(dtype):
  """Asserts that a matmul and a sum of 4,096 ones in `dtype` give 4,096.

  In bfloat16, 256 + 1 rounds back to 256: a kernel that accumulated in
  bfloat16 would stop at 256 (float16 at 2,048).
  """
  with tf.Graph().as_default():
    row = tf.ones([1, 4096], dtype)
    column = tf.ones([4096, 1], dtype)
    sums = [tf.matmul(row, column)[0, 0], tf.reduce_sum(row)]
    with tf.compat.v1.Session() as sess:
      got = [float(v) for v in sess.run([tf.cast(s, tf.float32)
                                         for s in sums])]
  assert got == [4096.0, 4096.0], (
      "%s: %s sums of 4096 ones give %s; the tolerances of tests/rounding.py "
      "assume float32 accumulation" % (cpu_path(), tf.as_dtype(dtype).name,
                                       got))


def assert_within_rounding(got, want, magnitude, dtype, roundings, what=""):
  """|got - want| <= roundings * u(dtype) * magnitude, element by element.

  Args:
    got: the result computed in (or through) `dtype`.
    want: the exact result (float64 re-derivation).
    magnitude: the absolute-value evaluation of the formula, broadcastable
      to `want`'s shape.
    dtype: the reduced-precision dtype of the computation.
    roundings: int, roundings on the longest path (see the module docstring).
    what: names the value in the failure message.
  """
  assert_within_bound(got, want, roundings * unit_roundoff(dtype) * np.asarray(
      magnitude, np.float64), "%s (%d roundings of %s)" % (
          what, roundings, tf.as_dtype(dtype).name))


def assert_within_bound(got, want, bound, what=""):
  """|got - want| <= bound element by element; the message names the worst
  element and the CPU kernels that ran."""
  got = np.asarray(got, np.float64)
  want = np.asarray(want, np.float64)
  bound = np.broadcast_to(np.asarray(bound, np.float64), want.shape)
  error = np.abs(got - want)
  if os.environ.get("ROUNDING_REPORT"):
    print("%s: largest error / bound %.3f" % (
        what, (error / np.maximum(bound, 1e-300)).max()))
  worst = np.unravel_index(np.argmax(error - bound), error.shape)
  assert error[worst] <= bound[worst], (
      "%s: |got - want| = %.3g at %s exceeds its bound %.3g (%s)" % (
          what, error[worst], worst, bound[worst], cpu_path()))


def rounded(values, dtype):
  """float64 `values` rounded to `dtype` (what a cast to it keeps)."""
  return tf.cast(tf.cast(np.asarray(values, np.float64), dtype),
                 tf.float64).numpy()


def dense_magnitude(input_magnitude, kernel, bias=None):
  """|x| @ |kernel| + |bias| for an input bounded by `input_magnitude`."""
  out = np.asarray(input_magnitude, np.float64) @ np.abs(kernel)
  return out if bias is None else out + np.abs(bias)


def layer_norm_bound(x, input_error, gamma):
  """How far LayerNorm's output [..., n] can move for input errors.

  To first order, an error e in the input x moves the row's mean by mean(e)
  and its spread s by mean(z e), so the normalized value z_i = (x_i - mean)
  / s moves by at most (|e_i| + mean|e| + |z_i| mean(|z| |e|)) / s:
  LayerNorm turns the input's absolute error into one relative to the
  row's spread. The output z * gamma + beta moves by |gamma| times that.
  """
  x = np.asarray(x, np.float64)
  error = np.broadcast_to(np.asarray(input_error, np.float64), x.shape)
  mean = x.mean(-1, keepdims=True)
  spread = np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-12)
  z = np.abs(x - mean) / spread
  return np.abs(gamma) * (
      error + error.mean(-1, keepdims=True) +
      z * (z * error).mean(-1, keepdims=True)) / spread
