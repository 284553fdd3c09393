# coding=utf-8
"""Graph-collection names shared by the modules, and the training counters.

Two int64 counters drive a training graph: `global_step` (optimizer updates,
TensorFlow's own) and `micro_step` (runs of the train op, i.e.
micro-batches, several per update with gradient accumulation). Dropout masks
are a function of both (engine/dropout_masks.py), gradient accumulation
reads and advances `micro_step` (engine/accumulation.py), and the runner
skips `micro_step` batches when it resumes (runner/estimator.py). Both are
created here, at the graph's root whatever variable scope the caller is in,
so their checkpoint names are always "global_step" and "micro_step".
"""

import tensorflow as tf

# The micro_step variable.
MICRO_STEP = "micro_step"
# Ops that advance micro_step as part of a train op (engine/accumulation.py);
# when the graph has none, the runner advances it after each run itself.
MICRO_STEP_ADVANCES = "micro_step_advances"
# The learning-rate tensor and the loss-scale variable, for progress lines
# and TensorBoard.
LEARNING_RATE = "learning_rate"
LOSS_SCALE = "loss_scale"
# The op that only accumulates a micro-batch when the train op cannot choose
# between accumulating and applying (multi-worker; engine/accumulation.py).
ACCUMULATE_ONLY = "accumulate_only_train_op"
# The graph's registry of dropout sites (engine/dropout_masks.py).
DROPOUT_SITES = "dropout_sites"


def _root_counter(name, collections, aggregation):
  """A new int64 scalar variable at the graph's root name scope."""
  graph = tf.compat.v1.get_default_graph()
  with graph.name_scope(None):
    return tf.compat.v1.Variable(
        0, dtype=tf.int64, name=name, trainable=False, use_resource=True,
        collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES] + collections,
        aggregation=aggregation)


def get_or_create_global_step():
  """The graph's global step (TensorFlow's), created at the root if absent.

  `tf.compat.v1.train.get_or_create_global_step` would prefix the current
  variable scope to the name when it creates the variable.
  """
  step = tf.compat.v1.train.get_global_step()
  if step is None:
    step = _root_counter("global_step", [tf.compat.v1.GraphKeys.GLOBAL_STEP],
                         tf.VariableAggregation.ONLY_FIRST_REPLICA)
  return step


def get_micro_step():
  """The graph's micro_step variable, or None."""
  steps = tf.compat.v1.get_collection(MICRO_STEP)
  return steps[0] if steps else None


def get_or_create_micro_step():
  """The graph's micro_step variable, created at the root if absent."""
  step = get_micro_step()
  if step is None:
    # Each replica advances its own copy (engine/accumulation.py), so the
    # copies stay equal without an aggregation.
    step = _root_counter("micro_step", [MICRO_STEP],
                         tf.VariableAggregation.NONE)
  return step
