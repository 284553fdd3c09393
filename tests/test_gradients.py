"""engine/gradients.py against TensorFlow's own tf.clip_by_global_norm."""
import numpy as np
import pytest
import tensorflow as tf

from engine import gradients


@pytest.mark.parametrize("magnitude", [0.01, 100.0, np.inf])
def test_clip_scale_gives_clip_by_global_norms_result(magnitude):
  """g * clip_scale(...) is bit for bit what tf.clip_by_global_norm gives:
  unchanged below the clip norm, rescaled above it, NaN when the norm is
  not finite. A sparse gradient's rows count once each, duplicate ids
  unsummed."""
  rng = np.random.RandomState(0)
  dense = (rng.uniform(1.0, 2.0, size=[4, 3]) * magnitude).astype(np.float32)
  rows = (rng.uniform(1.0, 2.0, size=[3, 2]) * magnitude).astype(np.float32)
  with tf.Graph().as_default():
    grads = [tf.constant(dense),
             tf.IndexedSlices(tf.constant(rows), tf.constant([1, 1, 3]),
                              tf.constant([5, 2]))]
    scale = gradients.clip_scale(
        [gradients.half_squared_norm(g) for g in grads], 1.0)
    ours = [gradients.values(g) * scale for g in grads]
    theirs = [gradients.values(g)
              for g in tf.clip_by_global_norm(grads, 1.0)[0]]
    with tf.compat.v1.Session() as sess:
      ours, theirs = sess.run([ours, theirs])
  for got, want in zip(ours, theirs):
    np.testing.assert_array_equal(got, want)
  if magnitude == 0.01:
    np.testing.assert_array_equal(ours[1], rows)
  elif magnitude == 100.0:
    norm = np.sqrt(sum(np.sum(np.square(g, dtype=np.float64)) for g in ours))
    np.testing.assert_allclose(norm, 1.0, rtol=1e-6)
  else:
    assert np.isnan(ours[0]).all() and np.isnan(ours[1]).all()
