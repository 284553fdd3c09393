"""engine/lean_gradients.py's backward passes against autodiff of the plain formulas.

Everything runs in float64, so the hand-written gradients must match autodiff
to rounding (1e-10), whatever the machine's load or thread count.
"""
import math

import numpy as np
import pytest
import tensorflow as tf

from engine import dropout_masks
from engine import lean_gradients
import modeling
import rounding

TOLERANCE = dict(rtol=1e-10, atol=1e-12)


def _values_and_gradients(build, inputs):
  """Runs `build(tensors) -> scalar loss` in a fresh graph.

  Returns:
    (loss, [d loss / d input]) as numpy float64.
  """
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(3)
    tensors = [tf.constant(a) for a in inputs]
    loss = build(tensors)
    grads = tf.gradients(loss, tensors)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return sess.run([loss, grads])


def _weights(shape, seed):
  return np.random.RandomState(seed).standard_normal(shape)


def test_tanh_gelu_equals_autodiff_of_the_formula():
  x = np.linspace(-6.0, 6.0, 97).reshape(1, 97)
  w = _weights(x.shape, 1)

  def formula(x):
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) *
                                    (x + 0.044715 * x * x * x)))

  lean = _values_and_gradients(
      lambda t: tf.reduce_sum(lean_gradients.tanh_gelu(t[0]) * w), [x])
  plain = _values_and_gradients(lambda t: tf.reduce_sum(formula(t[0]) * w),
                                [x])
  np.testing.assert_allclose(lean[0], plain[0], **TOLERANCE)
  np.testing.assert_allclose(lean[1][0], plain[1][0], **TOLERANCE)


def test_normalize_equals_autodiff_of_batch_normalization():
  rng = np.random.RandomState(2)
  inputs = [rng.standard_normal((3, 4, 7)) * 3.0 + 1.0,
            1.0 + 0.3 * rng.standard_normal(7), rng.standard_normal(7)]
  w = _weights((3, 4, 7), 3)

  def plain(t):
    mean, variance = tf.nn.moments(t[0], axes=[-1], keepdims=True)
    return tf.reduce_sum(w * tf.nn.batch_normalization(
        t[0], mean, variance, offset=t[2], scale=t[1],
        variance_epsilon=1e-12))

  lean = _values_and_gradients(
      lambda t: tf.reduce_sum(lean_gradients.normalize(*t) * w), inputs)
  reference = _values_and_gradients(plain, inputs)
  np.testing.assert_allclose(lean[0], reference[0], **TOLERANCE)
  for got, want in zip(lean[1], reference[1]):
    np.testing.assert_allclose(got, want, **TOLERANCE)


def test_matmul_of_activation_equals_autodiff():
  inputs = [_weights((5, 6), 4), _weights((6, 3), 5)]
  w = _weights((5, 3), 6)
  lean = _values_and_gradients(
      lambda t: tf.reduce_sum(w * lean_gradients.matmul_of_activation(
          t[0], t[1], modeling.gelu)), inputs)
  plain = _values_and_gradients(
      lambda t: tf.reduce_sum(w * tf.matmul(modeling.gelu(t[0]), t[1])),
      inputs)
  np.testing.assert_allclose(lean[0], plain[0], **TOLERANCE)
  for got, want in zip(lean[1], plain[1]):
    np.testing.assert_allclose(got, want, **TOLERANCE)


def _attention_loss(policy, use_lean, dropout_prob=0.2):
  """A loss of attention over fixed [2, 3, F=5, H=4] queries and [2, 3, 6, 4]
  keys and values, 2 keys of the second example masked, dropout on."""
  allowed = np.ones((2, 1, 5, 6))
  allowed[1, :, :, 4:] = 0.0
  adder = (1.0 - allowed) * -10000.0
  w = _weights((2, 3, 5, 4), 7)

  def build(t):
    draw_keep = dropout_masks.keep_mask_drawer([2, 3, 5, 6], dropout_prob,
                                               "attention_probs")
    if use_lean:
      context = lean_gradients.attention_context(
          t[0], t[1], t[2], tf.constant(adder), draw_keep, dropout_prob,
          policy)
    else:
      scores = tf.matmul(t[0], t[1], transpose_b=True) / 2.0 + adder
      probs = tf.nn.softmax(scores)
      dropped = tf.where(draw_keep(t[0]), probs / (1.0 - dropout_prob),
                         tf.zeros_like(probs))
      context = tf.matmul(dropped, t[2])
    return tf.reduce_sum(context * w)

  inputs = [_weights((2, 3, 5, 4), 8), _weights((2, 3, 6, 4), 9),
            _weights((2, 3, 6, 4), 10)]
  return _values_and_gradients(build, inputs)


@pytest.mark.parametrize("policy", [
    None,
    lean_gradients.BackwardPolicy(keep_activations_up_to=0),
    lean_gradients.BackwardPolicy(in_recomputation=True),
    lean_gradients.BackwardPolicy(keep_activations_up_to=0,
                                  in_recomputation=True,
                                  recomputed_head_groups=2,
                                  min_rows_per_head_group=1)],
                         ids=["autodiff", "computes_again", "recomputation",
                              "recomputation_in_head_groups"])
def test_attention_context_equals_autodiff_of_the_formula(policy):
  lean = _attention_loss(policy, use_lean=True)
  plain = _attention_loss(None, use_lean=False)
  np.testing.assert_allclose(lean[0], plain[0], **TOLERANCE)
  for got, want in zip(lean[1], plain[1]):
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, **TOLERANCE)


def test_backward_policy_lengths():
  policy = lean_gradients.BackwardPolicy(keep_activations_up_to=384)
  assert not policy.computes_again(384)
  assert policy.computes_again(385)
  assert policy.computes_again(None)  # Unknown when the graph is built.
  assert not policy._replace(in_recomputation=True).computes_again(512)
  assert not lean_gradients.BackwardPolicy(None).computes_again(4096)
  # Groups of heads only where a recomputation would not keep.
  assert policy.head_groups(512) == 1
  recomputing = policy._replace(in_recomputation=True)
  assert recomputing.head_groups(384) == 1
  assert recomputing.head_groups(385) == 4
  assert recomputing._replace(recomputed_head_groups=1).head_groups(512) == 1
  assert (policy.row_groups(512), recomputing.row_groups(384),
          recomputing.row_groups(385)) == (1, 1, 4)
  # Groups of at least min_rows_per_row_group (1024) rows where the row
  # count is known.
  assert [recomputing.row_groups(512, rows) for rows in
          (4096, 2048, 1024, 100)] == [4, 2, 1, 1]
  # Groups of heads likewise, one per min_rows_per_head_group (1024) query
  # rows, at most recomputed_head_groups.
  assert [recomputing.head_groups(512, rows) for rows in
          (8192, 4096, 2048, 1024, 100)] == [4, 4, 2, 1, 1]
  assert recomputing._replace(min_rows_per_head_group=1).head_groups(
      512, 100) == 4
  # The row count is known only when both sizes are.
  assert lean_gradients.rows_if_known(2, 512) == 1024
  assert lean_gradients.rows_if_known(None, 512) is None
  assert lean_gradients.rows_if_known(2, None) is None


def test_recompute_grad_gives_the_gradients_of_the_plain_layer():
  """A layer with a variable and dropout, recomputed in the backward pass:
  same output and gradients (the replayed dropout site draws the same mask),
  and the recomputation is told it is one."""
  x = _weights((4, 6), 11)
  seen = []

  def layer(layer_input, recomputing):
    seen.append(recomputing)
    kernel = tf.compat.v1.get_variable(
        "kernel", [6, 6], tf.float64,
        tf.compat.v1.constant_initializer(_weights((6, 6), 12)))
    hidden = modeling.dropout(tf.tanh(tf.matmul(layer_input, kernel)), 0.3)
    return tf.matmul(hidden, kernel)

  def run(recompute):
    with tf.Graph().as_default():
      tf.compat.v1.set_random_seed(1)
      dropout_masks.ensure_counters()
      tensor = tf.constant(x)
      with tf.compat.v1.variable_scope("layer",
                                       reuse=tf.compat.v1.AUTO_REUSE):
        fn = (lean_gradients.recompute_grad(layer) if recompute
              else lambda t: layer(t, False))
        output = fn(tensor)
      kernel = tf.compat.v1.trainable_variables()[0]
      loss = tf.reduce_sum(output * _weights((4, 6), 13))
      grads = tf.gradients(loss, [tensor, kernel])
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        return sess.run([output, grads])

  plain = run(False)
  recomputed = run(True)
  assert seen == [False, False, True]
  np.testing.assert_allclose(recomputed[0], plain[0], **TOLERANCE)
  for got, want in zip(recomputed[1], plain[1]):
    np.testing.assert_allclose(got, want, **TOLERANCE)


def test_bfloat16_bias_gradient_is_summed_in_float32():
  """1,024 rows of bfloat16 gradient: the bias gradient is their float64 sum
  rounded once to bfloat16 (relative error below 2**-8)."""
  rows = np.random.RandomState(14).standard_normal((1024, 3)) + 0.5
  rounded = tf.cast(tf.cast(rows, tf.bfloat16), tf.float64).numpy()
  with tf.Graph().as_default():
    value = tf.zeros([1024, 3], tf.bfloat16)
    bias = tf.zeros([3], tf.bfloat16)
    output = lean_gradients.bias_add(value, bias)
    grad = tf.gradients(output, bias,
                        grad_ys=tf.cast(tf.constant(rounded), tf.bfloat16))[0]
    with tf.compat.v1.Session() as sess:
      got = sess.run(tf.cast(grad, tf.float64))
  want = rounded.sum(axis=0)
  np.testing.assert_allclose(got, want, rtol=2.0**-8)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_cross_entropy_matches_numpy(dtype):
  """Loss and both gradients against a float64 NumPy derivation: the loss
  is logsumexp(z) - z[label] for z = logits + bias, its gradient in z is
  (softmax(z) - onehot(label)) times the loss's incoming gradient."""
  rng = np.random.RandomState(7)
  logits = (3.0 * rng.randn(5, 300)).astype(np.float32)
  bias = rng.randn(300).astype(np.float32)
  labels = rng.randint(0, 300, size=5).astype(np.int32)
  loss_grad = rng.rand(5).astype(np.float32)
  with tf.Graph().as_default():
    logits_in = tf.cast(tf.constant(logits), dtype)
    bias_in = tf.constant(bias)
    loss = lean_gradients.softmax_cross_entropy(logits_in, bias_in,
                                                tf.constant(labels))
    grads = tf.gradients(loss, [logits_in, bias_in], grad_ys=loss_grad)
    with tf.compat.v1.Session() as sess:
      got_loss, got_logits_grad, got_bias_grad = sess.run(
          [loss, tf.cast(grads[0], tf.float32), grads[1]])
      rounded = sess.run(tf.cast(logits_in, tf.float64))
  assert got_loss.dtype == np.float32
  z = rounded + bias.astype(np.float64)
  shifted = z - z.max(axis=1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
  want_loss = -log_probs[np.arange(5), labels]
  want_z_grad = np.exp(log_probs)
  want_z_grad[np.arange(5), labels] -= 1.0
  want_z_grad *= loss_grad[:, None]
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got_bias_grad, want_z_grad.sum(axis=0),
                             rtol=1e-5, atol=1e-6)
  # The logits' gradient is rounded to their dtype (8 significant bits in
  # bfloat16, whose rounding moves a value by at most 2^-8 of it).
  step = 2.0 ** -8 if dtype == "bfloat16" else 1e-6
  np.testing.assert_allclose(got_logits_grad, want_z_grad, rtol=step,
                             atol=1e-7)


# The tanh-approximated GELU's largest slope |gelu'| and curvature |gelu''|
# (both at most these over the real line): an error d in its input moves
# gelu by at most 1.13 d and gelu' by at most 0.8 d.
GELU_SLOPE = 1.13
GELU_CURVATURE = 0.8


def _feed_forward_magnitudes(x, kernel_1, bias_1, kernel_2, bias_2, w):
  """Absolute-value evaluations (tests/rounding.py) of the output of
  gelu(x @ kernel_1 + bias_1) @ kernel_2 + bias_2 and of the gradients of
  sum(w * output) for x, kernel_1, bias_1, kernel_2, bias_2."""
  a = np.abs
  pre = a(x) @ a(kernel_1) + a(bias_1)
  activation = GELU_SLOPE * pre
  output = activation @ a(kernel_2) + a(bias_2)
  activation_grad = a(w) @ a(kernel_2).T
  # The backward pass scales by gelu'(pre), itself computed from a rounded
  # pre-activation.
  pre_grad = activation_grad * (GELU_SLOPE + GELU_CURVATURE * pre)
  return output, [pre_grad @ a(kernel_1).T, a(x).T @ pre_grad,
                  pre_grad.sum(axis=0), activation.T @ a(w),
                  a(w).sum(axis=0)]


@pytest.mark.parametrize("groups,dtype,rows_known", [
    (1, tf.float64, True), (3, tf.float64, True), (3, tf.float64, False),
    (3, tf.bfloat16, True)])
def test_feed_forward_in_row_groups_equals_autodiff(groups, dtype,
                                                    rows_known):
  """Ten rows in one run or in runs of 3, 3 and 4 (also with the row count
  known only when the graph runs): the output and every gradient of
  sum(w * output) as autodiff of the plain two-matmul formula in float64; in
  bfloat16 (bias and weight sums in float32) within bfloat16's rounding of
  what each value sums up."""
  inputs = [_weights((10, 6), 7), _weights((6, 12), 8), _weights(12, 9),
            _weights((12, 6), 10), _weights(6, 11)]
  w = _weights((10, 6), 12)

  def plain(t):
    x, kernel_1, bias_1, kernel_2, bias_2 = t
    return tf.matmul(modeling.gelu(tf.matmul(x, kernel_1) + bias_1),
                     kernel_2) + bias_2

  def lean(t):
    x = t[0] if rows_known else tf.compat.v1.placeholder_with_default(
        t[0], [None, 6])
    return tf.cast(lean_gradients.feed_forward_in_row_groups(
        *[tf.cast(a, dtype) for a in [x] + t[1:]], modeling.gelu, groups),
                   tf.float64)

  def output_and_gradients(build):
    with tf.Graph().as_default():
      tensors = [tf.constant(a) for a in inputs]
      output = build(tensors)
      grads = tf.gradients(tf.reduce_sum(w * output), tensors)
      with tf.compat.v1.Session() as sess:
        return sess.run([output, grads])

  got = output_and_gradients(lean)
  want = output_and_gradients(plain)
  if dtype == tf.float64:
    for got_value, want_value in zip([got[0]] + got[1],
                                     [want[0]] + want[1]):
      np.testing.assert_allclose(got_value, want_value, **TOLERANCE)
    return
  rounding.check_float32_accumulation(dtype)
  output_magnitude, grad_magnitudes = _feed_forward_magnitudes(*inputs, w)
  # At most 8 roundings on a path. Forward: x and kernel_1 (the inputs'
  # casts), the first matmul, its bias, GELU (computed in float32, rounded
  # once), kernel_2, the second matmul and its bias. Backward: the output's
  # gradient, kernel_2, the activation's gradient, the pre-activation's
  # gradient (the pre-activation it reads counts in the curvature term),
  # kernel_1 or x, and the last matmul or sum.
  rounding.assert_within_rounding(got[0], want[0], output_magnitude, dtype, 8,
                                  "output")
  names = ["x", "kernel_1", "bias_1", "kernel_2", "bias_2"]
  for name, got_grad, want_grad, magnitude in zip(names, got[1], want[1],
                                                  grad_magnitudes):
    assert np.abs(want_grad).max() > 0
    rounding.assert_within_rounding(got_grad, want_grad, magnitude, dtype, 8,
                                    "d/d" + name)
