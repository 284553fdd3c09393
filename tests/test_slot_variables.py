"""engine/slot_variables.py: the optimizer's slots and the accumulators
start at zero without a second, constant copy of their zeros."""
import numpy as np
import tensorflow as tf

from engine import slot_variables

SHAPE = [64, 32]


def _initialized(initializer):
  """(value, names of Const nodes of SHAPE the session ran) of a variable
  of SHAPE initialized by `initializer`."""
  with tf.Graph().as_default():
    variable = tf.compat.v1.get_variable(
        "w", SHAPE, dtype=tf.float32, initializer=initializer,
        trainable=False)
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer(),
               options=tf.compat.v1.RunOptions(output_partition_graphs=True),
               run_metadata=metadata)
      value = sess.run(variable)
  constants = [node.name for graph in metadata.partition_graphs
               for node in graph.node if node.op == "Const" and
               [d.size for d in node.attr["value"].tensor.tensor_shape.dim]
               == SHAPE]
  return value, constants


def test_zeros_initializer_is_not_folded_into_a_constant():
  value, constants = _initialized(slot_variables.zeros_initializer)
  assert value.dtype == np.float32
  np.testing.assert_array_equal(value, np.zeros(SHAPE, np.float32))
  assert not constants
  # TensorFlow's own zeros initializer becomes such a constant, which the
  # session would keep beside the variable.
  _, tf_constants = _initialized(tf.compat.v1.zeros_initializer())
  assert tf_constants


def test_variable_name_drops_the_output_suffix():
  with tf.Graph().as_default():
    with tf.compat.v1.variable_scope("layer_0"):
      variable = slot_variables.zeros("dense/kernel/adam_m", [2])
    assert variable.name == "layer_0/dense/kernel/adam_m:0"
    assert slot_variables.variable_name(variable) == (
        "layer_0/dense/kernel/adam_m")
    assert not variable.trainable and variable.dtype.base_dtype == tf.float32
