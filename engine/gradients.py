# coding=utf-8
"""The gradients a training step applies, and the global-norm clip's factor.

A gradient is a float32 tensor, or a tf.IndexedSlices for a table looked up
with tf.gather (the word embeddings): one row per looked-up id, as in
Google's code, so that the dense [vocab, width] gradient never exists during
the backward pass. The clip counts such a gradient's rows each once,
duplicate ids unsummed, as tf.clip_by_global_norm does when it reads an
IndexedSlices' values.
"""

import tensorflow as tf

from engine import graph_order


def of_loss(loss, tvars, scaler=None):
  """float32 gradients of `loss` for the variables it depends on.

  Args:
    loss: float scalar.
    tvars: the variables to differentiate for.
    scaler: (optional) a loss_scaling.DynamicLossScale: the scaled loss is
      differentiated and the gradients are unscaled.

  Returns:
    (grads, vars): equal-length lists; variables without a gradient dropped.
    No variable may change before every gradient and `loss` exist (a
    recomputed layer reads its weights again in the backward pass): the
    gradients wait for all of them.

  Raises:
    ValueError: the loss depends on none of `tvars`.
  """
  target = loss if scaler is None else scaler.scale_loss(loss)
  pairs = [(g, v) for g, v in zip(tf.gradients(target, tvars), tvars)
           if g is not None]
  if not pairs:
    raise ValueError("The loss depends on none of the %d variables to train; "
                     "check the model_fn's loss." % len(tvars))
  grads = [map_values(lambda numbers: tf.cast(numbers, tf.float32), g)
           for g, _ in pairs]
  if scaler is not None:
    grads = scaler.unscale(grads)
  grads = graph_order.after(grads + [loss], grads)
  return grads, [v for _, v in pairs]


def values(grad):
  """The tensor holding `grad`'s numbers: an IndexedSlices' rows, else grad."""
  return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def map_values(fn, grad):
  """`fn` applied to `grad`'s numbers, keeping an IndexedSlices' indices."""
  if isinstance(grad, tf.IndexedSlices):
    return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
  return fn(grad)


def half_squared_norm(grad):
  """float32 scalar ||grad||^2 / 2 as tf.clip_by_global_norm counts it (an
  IndexedSlices counts each of its rows, not the sum of duplicate rows)."""
  return tf.nn.l2_loss(values(grad))


def clip_scale(half_squared_norms, clip_norm):
  """float32 scalar: tf.clip_by_global_norm's factor for the gradients.

  clip_norm / max(global_norm, clip_norm) with global_norm =
  sqrt(2 * sum(half_squared_norms)), computed as that function does (NaN if
  the norm is not finite), so that `g * scale` is its clipped g; the
  optimizer applies it within its update instead of in a pass of its own.
  """
  norm = tf.sqrt(2.0 * tf.reduce_sum(tf.stack(half_squared_norms)))
  scale = clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0) / clip_norm)
  return scale + (norm - norm)
