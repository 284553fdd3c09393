# coding=utf-8
"""The encoder's layers run one after another, with gradient checkpointing.

Each layer is a function up to its residual sum, followed by the LayerNorm
that gives its output. With gradient checkpointing, the unit a backward pass
computes again (lean_gradients.recompute_grad) runs from the previous
layer's residual sum, through that layer's LayerNorm, to its own residual
sum: the forward pass keeps one [rows, hidden] tensor between layers, not
two, and the recomputation never runs the output matmul, whose result no
gradient reads. The last layer is not recomputed: its backward pass comes
first, right after the head's, so recomputing it would save nothing.

The stack also keeps the last layer's input and dropout sites, so that a
pass of that layer over the first positions alone (the pooler's input)
draws exactly its dropout masks.
"""

import functools

import tensorflow as tf

from engine import dropout_masks
from engine import lean_gradients


class LayerStack(object):
  """Builds layers one at a time, each in its own variable scope."""

  def __init__(self, layer, norm, norm_scope, gradient_checkpointing,
               has_dropout):
    """The stack of `layer`s.

    Args:
      layer: callable(rows, recomputing=False, first_token_only=False) ->
        the layer's residual sum, built in the current variable scope.
      norm: callable(residual_sum) -> the layer's output (its LayerNorm),
        built in variable scope `norm_scope` within the layer's.
      norm_scope: str, the name of that variable scope.
      gradient_checkpointing: recompute the layers that `residual_sum` is
        asked to in the backward pass.
      has_dropout: whether the layers draw dropout masks.
    """
    self._layer = layer
    self._norm = norm
    self._norm_scope_name = norm_scope
    self._checkpointing = gradient_checkpointing
    # Recomputation enters each layer's variable scope again.
    self.reuse = tf.compat.v1.AUTO_REUSE if gradient_checkpointing else None
    if gradient_checkpointing and has_dropout:
      # Recomputed layers read the step counters inside a custom gradient,
      # where they must not be created.
      dropout_masks.ensure_counters()
    self._previous_sum = self._previous_norm_scope = None
    self._last_input = self._last_sites = None

  def residual_sum(self, layer_input, recompute):
    """The next layer's residual sum (call in the layer's variable scope);
    with gradient checkpointing and `recompute`, computed again in the
    backward pass."""
    self._last_input = layer_input
    with dropout_masks.recording_sites() as self._last_sites:
      if not (self._checkpointing and recompute):
        return self._layer(layer_input)
      if self._previous_norm_scope is None:
        unit_input = layer_input
      else:
        unit_input = self._previous_sum
      return lean_gradients.recompute_grad(functools.partial(
          self._normalized_layer, self._previous_norm_scope))(unit_input)

  def output(self, residual_sum):
    """The layer's output: `norm(residual_sum)` in its norm scope."""
    with tf.compat.v1.variable_scope(self._norm_scope_name) as norm_scope:
      self._previous_sum, self._previous_norm_scope = residual_sum, norm_scope
      return self._norm(residual_sum)

  def first_token_output(self):
    """The last layer's output at each example's first position alone,
    with that layer's dropout masks (call in its variable scope, reused)."""
    with dropout_masks.replaying_sites(self._last_sites):
      residual_sum = self._layer(self._last_input, first_token_only=True)
      with tf.compat.v1.variable_scope(self._norm_scope_name):
        return self._norm(residual_sum)

  def _normalized_layer(self, norm_scope, rows, recomputing):
    """layer(norm(rows) in `norm_scope`, recomputing); no norm when
    `norm_scope` is None (the first layer's input is normalized already)."""
    if norm_scope is not None:
      with tf.compat.v1.variable_scope(norm_scope, reuse=True):
        rows = self._norm(rows)
    return self._layer(rows, recomputing)
