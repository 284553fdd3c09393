"""bench/google_shims.py's replacements of TF1 pieces, against NumPy.

Google's code itself (bert-tensorflow) is not installed in the project's
environment and is not needed here: the shims are checked on their own,
importing the module changes nothing, and nothing is timed.
"""

import sys

import numpy as np
import tensorflow as tf

from bench import google_shims


def _run(build):
  """Builds `build()` in a fresh graph, initializes, returns its value and
  the names of the variables it made."""
  graph = tf.Graph()
  with graph.as_default():
    output = build()
    init = tf.compat.v1.global_variables_initializer()
    names = [v.op.name for v in tf.compat.v1.global_variables()]
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(init)
    return session.run(output), names


def test_importing_the_shims_installs_nothing():
  assert "tensorflow.contrib" not in sys.modules
  assert tf.TensorShape([3])[0] == 3  # still TF2 shapes (ints)


def test_layer_norm_matches_numpy_with_contribs_variables():
  x = np.random.RandomState(0).standard_normal((4, 6)).astype(np.float32)
  got, names = _run(lambda: google_shims.contrib_module().layers.layer_norm(
      tf.constant(x), begin_norm_axis=-1, begin_params_axis=-1,
      scope="LayerNorm"))
  mean = x.mean(axis=-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
  np.testing.assert_allclose(got, (x - mean) / np.sqrt(variance + 1e-12),
                             rtol=1e-5, atol=1e-5)
  assert sorted(names) == ["LayerNorm/beta", "LayerNorm/gamma"]


def test_dense_matches_numpy_with_tf1_layer_variables():
  x = np.random.RandomState(1).standard_normal((3, 5)).astype(np.float32)

  def build():
    with tf.compat.v1.variable_scope("pooler"):
      out = google_shims.dense(
          tf.constant(x), 4, activation=tf.tanh,
          kernel_initializer=tf.compat.v1.constant_initializer(0.1))
    return out
  got, names = _run(build)
  np.testing.assert_allclose(got, np.tanh(x @ np.full((5, 4), 0.1)),
                             rtol=1e-5, atol=1e-6)
  # tf.layers.dense without a name made "dense/kernel" and "dense/bias".
  assert sorted(names) == ["pooler/dense/bias", "pooler/dense/kernel"]


def test_dense_refuses_what_modeling_never_gives_it():
  graph = tf.Graph()
  with graph.as_default():
    try:
      google_shims.dense(tf.zeros([2, 3, 4]), 5, name="query")
    except ValueError as error:
      assert "2-D" in str(error)
    else:
      raise AssertionError("a 3-D input was accepted")
