# coding=utf-8
"""Weights in the compute dtype, cast once where they cannot change.

A bf16 (or fp16) model keeps float32 variables and casts each weight to the
compute dtype where it is used. In training the cast must follow every
update; in a graph that only predicts (an export, --do_predict) it gives
the same tensor on every run, and on a one-row request it is a large part
of the work (every weight read and written again). Within `cast_once()`,
`in_dtype` instead keeps the cast weight in a variable of its own, filled
by `initializer()` once the float32 weights are final (after a restore;
an export runs it when it is loaded). These copies belong to no saved
collection: checkpoints and SavedModels keep the float32 weights only.
"""

import contextlib

import tensorflow as tf

# The graph collections of the copies, and of the flag that turns them on.
COPIES = "weight_copies"
_CASTING_ONCE = "weights_cast_once"


@contextlib.contextmanager
def cast_once():
  """Within it, `in_dtype` keeps cast weights in variables (an inference
  graph's model)."""
  graph = tf.compat.v1.get_default_graph()
  graph.add_to_collection(_CASTING_ONCE, True)
  try:
    yield
  finally:
    graph.clear_collection(_CASTING_ONCE)


def in_dtype(variable, dtype):
  """`variable` (float32) as a Tensor of `dtype`: cast here, or within
  `cast_once()` read from its copy in `dtype`."""
  graph = tf.compat.v1.get_default_graph()
  if (variable.dtype.base_dtype == dtype or
      not graph.get_collection(_CASTING_ONCE)):
    return tf.cast(variable, dtype)
  copy = tf.compat.v1.Variable(
      tf.cast(variable, dtype), trainable=False, use_resource=True,
      collections=[COPIES],
      name="%s_%s" % (variable.op.name.rsplit("/", 1)[-1], dtype.name))
  return copy.read_value()


def initializer(graph):
  """The op of `graph` that fills its copies from the float32 weights, or
  None when it has none."""
  copies = graph.get_collection(COPIES)
  if not copies:
    return None
  with graph.as_default():
    return tf.group(*[copy.initializer for copy in copies],
                    name="weight_copies_initializer")
