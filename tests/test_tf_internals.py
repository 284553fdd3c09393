"""The private TensorFlow internals of tf_internals.py, and their fallbacks."""
import numpy as np
import tensorflow as tf

import tf_internals


def test_this_tensorflow_has_every_internal_used():
  missing = tf_internals.check()
  assert not missing, (
      "TensorFlow %s lacks %s; tf_internals.py falls back to public APIs "
      "(slower first steps, or --device_memory_gb needed on GPUs): update "
      "tf_internals.py for this version." % (tf.__version__,
                                             ", ".join(missing)))


class _PublicSession(object):
  """A session offering only the public API (the fallback's view)."""

  def __init__(self, sess):
    self.make_callable = sess.make_callable


def _counter_graph():
  graph = tf.Graph()
  with graph.as_default():
    counter = tf.compat.v1.get_variable(
        "counter", [], tf.float32, tf.compat.v1.zeros_initializer())
    increment = counter.assign_add(2.0)
    with tf.control_dependencies([increment]):
      doubled = counter.read_value() * 2.0
  return graph, increment, doubled


def test_prepared_callable_and_its_fallback_run_the_step():
  graph, increment, doubled = _counter_graph()
  with tf.compat.v1.Session(graph=graph) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for session in (sess, _PublicSession(sess)):
      step = tf_internals.prepared_callable(session, increment, [doubled])
      values = [step()[0] for _ in range(2)]
      start = values[0] / 2.0 - 2.0  # The counter before this pair of runs.
      np.testing.assert_allclose(values, [2 * (start + 2), 2 * (start + 4)])


def test_no_gpu_means_no_gpu_memory():
  if not tf.config.list_physical_devices("GPU"):
    assert tf_internals.gpu_memory_limits() == {}
  else:
    limits = tf_internals.gpu_memory_limits()
    assert limits and all(value > 0 for value in limits.values())
