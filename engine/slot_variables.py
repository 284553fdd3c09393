# coding=utf-8
"""The float32 state a training step keeps beside each trained variable.

The optimizer's moments (`<variable>/adam_m`, `<variable>/lamb_v`, ...) and
the gradient accumulators (`<variable>/accum_grad`, ...) are variables named
after the one they belong to and start at zero; `zeros` makes them.
"""

import re

import tensorflow as tf


def variable_name(param):
  """The variable's name without the ":0" output suffix."""
  match = re.match("^(.*):\\d+$", param.name)
  return match.group(1) if match else param.name


def zeros_initializer(shape, dtype=tf.float32, partition_info=None):
  """Zeros of `shape` that the session's constant folding leaves alone.

  The classic graph optimizer (OptimizerOptions L1, the session default)
  folds `tf.zeros(shape)` into a Const node that holds the whole tensor for
  the session's life, and the variable gets a copy of it: every
  zero-initialized slot and accumulator would be resident twice. `Empty` is
  stateful, so it is never folded; `init=True` fills it with zeros.
  """
  del partition_info  # Unused; part of the initializer signature.
  return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)


def zeros(name, shape, **kwargs):
  """A new float32 variable `name` of `shape`, not trained, starting at 0.

  `kwargs` go to tf.compat.v1.get_variable (synchronization, aggregation).
  """
  return tf.compat.v1.get_variable(
      name=name, shape=shape, dtype=tf.float32, trainable=False,
      initializer=zeros_initializer, **kwargs)
