# coding=utf-8
"""Axis permutations of float tensors through TensorFlow's own kernel.

With oneDNN on (TensorFlow's default on CPUs with AVX-512), the graph
rewrite turns every float Transpose into oneDNN's reorder, which is slower
than TensorFlow's own kernel on attention's head shapes: 1.3x at 32 rows
of 128 tokens and up to 3x for one row (docs/results.md, "Attention's head
transposes"). Integer transposes are left to TensorFlow's kernel, so a
float tensor is permuted as integers of its width. A permutation only moves
bits, so the result is the one tf.transpose gives, bit for bit, on every
device.
"""

import numpy as np
import tensorflow as tf

# Each float dtype's integer of the same width.
_SAME_WIDTH_INTEGERS = {tf.float16: tf.int16, tf.bfloat16: tf.int16,
                        tf.float32: tf.int32, tf.float64: tf.int64}


def transpose(x, perm):
  """tf.transpose(x, perm) with the kernel chosen as the module says.

  Args:
    x: Tensor of any dtype; float dtypes take the integer path.
    perm: list of int, a permutation of range(rank of x).

  Returns:
    Tensor: x with its axes permuted; its gradient is the incoming gradient
    permuted back the same way.
  """
  integer = _SAME_WIDTH_INTEGERS.get(x.dtype.base_dtype)
  if integer is None:
    return tf.transpose(a=x, perm=perm)
  inverse = [int(axis) for axis in np.argsort(perm)]

  @tf.custom_gradient
  def permuted(x):
    def grad_fn(output_grad):
      return _permute_bits(output_grad, inverse, integer)
    return _permute_bits(x, perm, integer), grad_fn

  return permuted(x)


def _permute_bits(x, perm, integer):
  return tf.bitcast(tf.transpose(a=tf.bitcast(x, integer), perm=perm),
                    x.dtype)
