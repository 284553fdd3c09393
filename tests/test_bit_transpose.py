"""engine/bit_transpose.py: float tensors permuted through the integer
kernel equal NumPy's transpose bit for bit (NaN payloads, signed zeros and
infinities included), their gradient is the upstream gradient permuted
back, and no float Transpose op (oneDNN's rewrite target) is left in the
graph or run."""
import numpy as np
import pytest
import tensorflow as tf

from engine import bit_transpose

PERMS = ([0, 2, 1, 3], [3, 1, 0, 2], [1, 0])


def _values(shape, dtype):
  rng = np.random.RandomState(len(shape))
  values = rng.randn(*shape).astype(np.float64) * 1e3
  flat = values.reshape(-1)
  flat[:4] = [np.nan, -0.0, np.inf, -np.inf]
  return tf.constant(values, tf.float64), tf.as_dtype(dtype)


def _bits(array):
  array = np.ascontiguousarray(array)
  return array.view(np.dtype("u%d" % array.dtype.itemsize))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16",
                                   "float64"])
@pytest.mark.parametrize("perm", PERMS)
def test_values_and_gradient_are_numpys_transposes(dtype, perm):
  shape = [2, 5, 3, 4][:len(perm)]
  with tf.Graph().as_default() as graph:
    source, tf_dtype = _values(shape, dtype)
    x = tf.cast(source, tf_dtype)
    y = bit_transpose.transpose(x, perm)
    upstream = tf.cast(tf.reshape(tf.range(np.prod(shape), dtype=tf.float64),
                                  [shape[p] for p in perm]), tf_dtype)
    grad, = tf.gradients(y, x, grad_ys=upstream)
    with tf.compat.v1.Session() as sess:
      x_value, y_value, up_value, grad_value = sess.run(
          [x, y, upstream, grad])
    float_transposes = [op for op in graph.get_operations()
                        if op.type == "Transpose"
                        and op.get_attr("T").is_floating]
  assert y_value.dtype == x_value.dtype and y_value.shape == tuple(
      shape[p] for p in perm)
  np.testing.assert_array_equal(_bits(y_value),
                                _bits(np.transpose(x_value, perm)))
  np.testing.assert_array_equal(
      _bits(grad_value), _bits(np.transpose(up_value, np.argsort(perm))))
  assert not float_transposes


def test_no_onednn_transpose_runs():
  with tf.Graph().as_default():
    # Fed, so that constant folding leaves the transpose to run.
    x = tf.compat.v1.placeholder(tf.float32, [2, 7, 3, 5])
    y = bit_transpose.transpose(x, [0, 2, 1, 3])
    with tf.compat.v1.Session() as sess:
      metadata = tf.compat.v1.RunMetadata()
      sess.run(y, {x: np.random.RandomState(0).randn(2, 7, 3, 5)}, options=tf.compat.v1.RunOptions(
          trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
               run_metadata=metadata)
  kernels = {node.timeline_label.split(" = ")[-1].split("(")[0]
             for device in metadata.step_stats.dev_stats
             for node in device.node_stats if " = " in node.timeline_label}
  assert "Transpose" in kernels and "_MklTranspose" not in kernels


def test_other_dtypes_take_tensorflows_transpose():
  with tf.Graph().as_default():
    x = tf.reshape(tf.range(24), [2, 3, 4])
    y = bit_transpose.transpose(x, [2, 0, 1])
    assert y.op.type == "Transpose"
    with tf.compat.v1.Session() as sess:
      np.testing.assert_array_equal(
          sess.run(y), np.transpose(np.arange(24).reshape(2, 3, 4), [2, 0, 1]))
