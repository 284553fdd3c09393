# coding=utf-8
"""Dynamic loss scaling, which keeps float16 gradients from underflowing.

The loss is multiplied by a scale before differentiation and the gradients
are divided by it afterwards. An update whose gradients are not all finite
is skipped and halves the scale (never below 1); a run of
`growth_interval` consecutive applied updates doubles it. Each replica
writes its own copy of the two variables (replicas.local); all replicas see
the same all-reduced gradients, so the copies stay equal.
"""

import tensorflow as tf

from engine import gradients
from engine import graph_keys
from engine import graph_order
from engine import replicas

INITIAL_LOSS_SCALE = 2.0**15


class DynamicLossScale(object):
  """The scale and its bookkeeping, as variables saved in checkpoints:
  float32 `loss_scale` (also in the graph collection graph_keys.LOSS_SCALE)
  and int64 `loss_scale_good_steps` (consecutive applied updates)."""

  def __init__(self, growth_interval):
    self._growth_interval = growth_interval
    self.scale = tf.compat.v1.get_variable(
        "loss_scale", shape=[], dtype=tf.float32, trainable=False,
        initializer=tf.compat.v1.constant_initializer(INITIAL_LOSS_SCALE))
    self.good_steps = tf.compat.v1.get_variable(
        "loss_scale_good_steps", shape=[], dtype=tf.int64, trainable=False,
        initializer=tf.compat.v1.zeros_initializer())
    tf.compat.v1.add_to_collection(graph_keys.LOSS_SCALE, self.scale)
    # One read per run, used to scale and unscale: both see the same value.
    self._value = self.scale.read_value()

  def scale_loss(self, loss):
    """float32 scalar: loss * scale."""
    return tf.cast(loss, tf.float32) * self._value

  def unscale(self, grads):
    """Gradients of the scaled loss divided by the scale (float32)."""
    return [gradients.map_values(lambda numbers: numbers / self._value, g)
            for g in grads]

  def apply_if_finite(self, grads, apply_fn):
    """Runs `apply_fn` and maybe grows the scale if every gradient is finite,
    else changes nothing but halves the scale and resets the good steps.

    Returns:
      bool scalar tensor, True if the update was applied.
    """
    finite = tf.reduce_all(
        tf.stack([tf.reduce_all(tf.math.is_finite(gradients.values(g)))
                  for g in grads]))
    return tf.cond(finite, lambda: self._applied(apply_fn), self._skipped)

  def _applied(self, apply_fn):
    done = apply_fn()
    with tf.control_dependencies([done]):
      good = self.good_steps.read_value() + 1
    grow = good >= self._growth_interval
    changes = [
        replicas.local(self.scale).assign(
            tf.where(grow, 2.0 * self._value, self._value), read_value=False),
        replicas.local(self.good_steps).assign(
            tf.where(grow, tf.zeros_like(good), good), read_value=False)]
    return graph_order.after(changes, True)

  def _skipped(self):
    changes = [
        replicas.local(self.scale).assign(
            tf.maximum(self._value / 2.0, 1.0), read_value=False),
        replicas.local(self.good_steps).assign(
            tf.constant(0, tf.int64), read_value=False)]
    return graph_order.after(changes, False)
