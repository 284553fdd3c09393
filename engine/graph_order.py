# coding=utf-8
"""Ordering ops that have no data edge between them.

A graph runs an op as soon as its inputs exist. Two places need more order
than the data gives: a backward pass that computes a forward value again
must not start before the gradient that needs it (else grappler merges it
with the forward op and the forward tensor stays alive, and the executor
runs it early), and an optimizer must not change a variable before the whole
backward pass has read it. Both pass the value through an identity that
waits; this module makes those identities.
"""

import tensorflow as tf


def after(dependencies, values):
  """Identities of `values` that exist only once `dependencies` do.

  Args:
    dependencies: a tensor, op or tf.IndexedSlices, or a nested structure
      of them.
    values: a tensor, tf.IndexedSlices or Python scalar, or a nested
      structure of them.

  Returns:
    `values`' structure of tensors (IndexedSlices stay IndexedSlices).

  Many values waiting on many dependencies wait on one NoOp that waits on
  them all: an edge from each dependency to each identity would make the
  graph quadratic (BERT-Large's ~400 gradients waiting on each other:
  ~400 * 400 edges, copied into every graph the session derives).
  """
  waits_on = tf.nest.flatten(dependencies, expand_composites=True)
  if (len(waits_on) > 1 and
      len(tf.nest.flatten(values, expand_composites=True)) > 1):
    with tf.control_dependencies(waits_on):
      waits_on = [tf.no_op()]
  with tf.control_dependencies(waits_on):
    return tf.nest.map_structure(tf.identity, values, expand_composites=True)
