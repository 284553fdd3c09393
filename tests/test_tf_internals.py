"""The private TensorFlow internals of engine/tf_internals.py, and their fallbacks."""
import subprocess
import sys

import numpy as np
import tensorflow as tf

import conftest
from engine import tf_internals


def test_this_tensorflow_has_every_internal_used():
  missing = tf_internals.check()
  assert not missing, (
      "TensorFlow %s lacks %s; engine/tf_internals.py falls back to public APIs "
      "(slower first steps, --device_memory_gb needed on GPUs, or sessions "
      "that keep the whole graph): update engine/tf_internals.py for this "
      "version." % (tf.__version__, ", ".join(missing)))


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


_VIRTUAL_DEVICES_CHILD = """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
from runner import estimator
from engine import tf_internals
config = tf_internals.default_session_config()
assert config.device_count["CPU"] == 3, config
runner = estimator.Estimator(lambda *args: None, estimator.RunConfig("unused"))
with runner._session(tf.Graph()) as sess:
  cpus = [d.name for d in sess.list_devices() if d.device_type == "CPU"]
assert len(cpus) == 3, cpus
print("ok")
"""


def test_runner_sessions_keep_the_devices_tf_config_made():
  """The runner adds place_pruned_graph to TensorFlow's default session
  config; the virtual CPU devices tf.config set up must survive that."""
  done = subprocess.run([sys.executable, "-c", _VIRTUAL_DEVICES_CHILD],
                        cwd=conftest.REPO_ROOT, capture_output=True,
                        text=True, timeout=300, check=False)
  assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
