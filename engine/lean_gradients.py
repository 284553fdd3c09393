# coding=utf-8
"""Hand-written backward passes that keep less memory than autodiff.

Each function computes exactly what the formula in modeling.py computes and
returns the same gradients (tests/test_modeling.py checks them against
autodiff), but keeps fewer or smaller tensors for the backward pass:

  * `tanh_gelu`: GELU keeps only its input.
  * `normalize`: LayerNorm keeps the normalized values and the inverse
    standard deviations.
  * `matmul_of_activation`: matmul(activation(x), kernel) keeps x, not the
    activation's output.
  * `attention_context`: attention keeps nothing of size [B, N, F, T] for
    long sequences, and only two such tensors inside a recomputed layer.
  * `feed_forward_in_row_groups`: a layer's two dense layers, keeping only
    their input, run over groups of rows inside a recomputation.
  * `recompute_grad`: gradient checkpointing of a whole layer.
  * `bias_add`: bfloat16 bias gradients summed in float32.
  * `softmax_cross_entropy`: the cross-entropy of logits over a large
    vocabulary keeps the logits (in their own dtype, bfloat16 under bf16)
    and one float32 number per row; each direction is one compiled pass.

`BackwardPolicy` says, per layer, which of these the backward pass uses.
docs/architecture.md explains the choices; docs/results.md measures them.
"""

import collections
import math

import tensorflow as tf

from engine import dropout_masks
from engine import graph_order
from engine import xla_kernels

LAYER_NORM_EPSILON = 1e-12

# Sequences up to this many tokens keep attention's probabilities and the
# GELU output for the backward pass (BackwardPolicy.keep_activations_up_to).
DEFAULT_KEEP_ACTIVATIONS_UP_TO = 384


class BackwardPolicy(collections.namedtuple(
    "BackwardPolicy",
    ["keep_activations_up_to", "in_recomputation", "recomputed_head_groups",
     "recomputed_row_groups", "min_rows_per_row_group",
     "min_rows_per_head_group"],
    defaults=(DEFAULT_KEEP_ACTIVATIONS_UP_TO, False, 4, 4, 1024, 1024))):
  """What a layer's backward pass keeps.

  Fields:
    keep_activations_up_to: training graphs of sequences up to this many
      tokens keep attention's probabilities and dropout mask and the GELU
      output for the backward pass, as autodiff does (fastest); longer
      sequences compute them again there (least memory; at 512 tokens the
      [B, N, S, S] attention tensors are a layer's largest). None keeps
      them at every length, 0 never does. 384 covers SQuAD's length.
    in_recomputation: the layer is being recomputed for gradient
      checkpointing; its activations live only during its own backward
      pass, so it keeps what it computes, except attention at lengths
      beyond keep_activations_up_to (see recomputed_head_groups).
    recomputed_head_groups: at those lengths a recomputed layer's attention
      runs its forward and backward pass over up to this many groups of
      heads (see min_rows_per_head_group), one group after another, and
      its backward pass computes each group's probabilities again: the
      largest tensors it holds are then [B, N / groups, F, T] instead of
      [B, N, F, T]. With gradient checkpointing those are the largest part
      of the step's working set beside the gradients.
    recomputed_row_groups: at those lengths a recomputed layer's
      feed-forward (both dense layers) runs over up to this many groups of
      rows (see min_rows_per_row_group), one after another, and its
      backward pass computes each group's intermediate activation again
      (`feed_forward_in_row_groups`).
    min_rows_per_row_group: fewer groups where the layer's rows (or their
      upper bound, with padding skipped) would give groups of fewer rows.
      A group's weight gradients are matmuls that sum over its rows, and
      short sums run slower: BERT-Base at 512 tokens, batch 4 (2048 rows)
      trained about 10% slower in four groups of 512 rows than in one
      (docs/results.md, "Group sizes of a recomputed layer").
    min_rows_per_head_group: likewise fewer groups of heads where the
      attention's query rows (B * F, or their upper bound) would give
      fewer than this many rows a group. Each group adds a few hundred ops
      to every recomputed layer, and the session holds a kernel and
      buffers for each; below this the smaller [B, N / groups, F, T]
      tensors save less memory than those ops take (BERT-Large at 512
      tokens, batch 2: docs/results.md, "Group sizes of a recomputed layer").
  """

  def keeps_at(self, seq_length):
    """Whether sequences of `seq_length` (an int, or None if unknown) are
    short enough to keep attention's probabilities."""
    if self.keep_activations_up_to is None:
      return True
    return (isinstance(seq_length, int) and
            seq_length <= self.keep_activations_up_to)

  def computes_again(self, seq_length):
    """Whether the backward pass outside a recomputation computes
    attention's probabilities and mask and the GELU output again rather
    than keep them."""
    return not self.in_recomputation and not self.keeps_at(seq_length)

  def head_groups(self, seq_length, rows=None):
    """How many groups of heads attention runs over, one after another;
    `rows` is its query row count B * F (or its upper bound), an int, or
    None if unknown."""
    return self._groups(self.recomputed_head_groups, seq_length, rows,
                        self.min_rows_per_head_group)

  def row_groups(self, seq_length, rows=None):
    """How many groups of rows the feed-forward runs over, one after
    another; `rows` is the layer's row count (or its upper bound), an int,
    or None if unknown."""
    return self._groups(self.recomputed_row_groups, seq_length, rows,
                        self.min_rows_per_row_group)

  def _groups(self, most, seq_length, rows, min_rows):
    """`most` groups (at least 1) in a recomputation that does not keep,
    fewer where a known `rows` gives fewer than `min_rows` a group; else 1."""
    if not self.in_recomputation or self.keeps_at(seq_length):
      return 1
    groups = max(1, most)
    if isinstance(rows, int):
      groups = min(groups, max(1, rows // min_rows))
    return groups


@tf.custom_gradient
def tanh_gelu(x):
  """Google's tanh-approximated GELU; its gradient needs `x` alone.

  Both passes are compiled elementwise kernels (engine/xla_kernels.py).
  """
  def grad_fn(output_grad):
    return xla_kernels.gelu_backward(x, output_grad)

  return xla_kernels.gelu_forward(x), grad_fn


@tf.custom_gradient
def normalize(x, gamma, beta):
  """(x - mean) / sqrt(variance + 1e-12) * gamma + beta over the last axis.

  Autodiff of the formula keeps two [..., width] float32 tensors (the input
  and the scale broadcast to it); this gradient keeps the normalized values
  and the [..., 1] inverse standard deviations.

  Args:
    x: float32 Tensor [..., width].
    gamma, beta: float32 Tensors [width].

  Returns:
    float32 Tensor [..., width].
  """
  mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
  inverse_std = tf.math.rsqrt(variance + LAYER_NORM_EPSILON)
  normalized = (x - mean) * inverse_std
  output = normalized * gamma + beta

  def grad_fn(output_grad):
    outer_axes = list(range(output_grad.shape.ndims - 1))
    scaled_grad = output_grad * gamma
    # The gradient of the normalized values with respect to x: remove the
    # gradient's mean and its projection on the normalized values, then
    # divide by the standard deviation.
    x_grad = inverse_std * (
        scaled_grad
        - tf.reduce_mean(scaled_grad, axis=-1, keepdims=True)
        - normalized * tf.reduce_mean(scaled_grad * normalized, axis=-1,
                                      keepdims=True))
    gamma_grad = tf.reduce_sum(output_grad * normalized, axis=outer_axes)
    beta_grad = tf.reduce_sum(output_grad, axis=outer_axes)
    return x_grad, gamma_grad, beta_grad

  return output, grad_fn


def matmul_of_activation(x, kernel, activation):
  """matmul(activation(x), kernel), keeping only `x` for the backward pass.

  Autodiff keeps activation(x) for the kernel's gradient; here the backward
  pass computes it again (one elementwise pass). For a layer's
  [rows, intermediate_size] GELU output that is the largest tensor the
  layer would keep.

  Args:
    x: Tensor [rows, in_width] in the compute dtype.
    kernel: Tensor [in_width, units] in the compute dtype.
    activation: elementwise function.

  Returns:
    Tensor [rows, units].
  """
  @tf.custom_gradient
  def matmul_fn(x, kernel):
    def grad_fn(output_grad):
      x_again = graph_order.after(output_grad, x)
      activated = activation(x_again)
      kernel_grad = tf.matmul(activated, output_grad, transpose_a=True)
      activated_grad = tf.matmul(output_grad, kernel, transpose_b=True)
      x_grad = tf.gradients(activated, x_again, grad_ys=activated_grad)[0]
      return x_grad, kernel_grad

    return tf.matmul(activation(x), kernel), grad_fn

  return matmul_fn(x, kernel)


_BIAS_GRADIENT_BY_SUM = "BertBiasAddGradientBySum"


@tf.RegisterGradient(_BIAS_GRADIENT_BY_SUM)
def _bias_add_gradient_by_sum(op, output_grad):
  """Gradients of BiasAdd (value [..., units], bias [units]); `bias_add`."""
  del op  # The gradient needs no forward tensor.
  rows = tf.reshape(output_grad, [-1, tf.shape(output_grad)[-1]])
  return output_grad, tf.reduce_sum(rows, axis=0)


def bias_add(value, bias):
  """tf.nn.bias_add of `value` [rows, units] and `bias` [units].

  TensorFlow's BiasAddGrad sums bfloat16 gradients in bfloat16, losing
  several percent on a sum of a thousand rows; in bfloat16 graphs the bias
  gradient here is a `reduce_sum`, which accumulates in float32.
  """
  if value.dtype != tf.bfloat16 or tf.executing_eagerly():
    return tf.nn.bias_add(value, bias)
  with tf.compat.v1.get_default_graph().gradient_override_map(
      {"BiasAdd": _BIAS_GRADIENT_BY_SUM}):
    return tf.nn.bias_add(value, bias)


def softmax_cross_entropy(logits, bias, labels):
  """-log softmax(logits + bias)[label] of each row, float32 [rows].

  The same values as tf.nn.sparse_softmax_cross_entropy_with_logits of
  float32(logits) + bias, whose two kernels (forward, and the gradient's
  multiplication) are several passes over [rows, classes] float32 tensors
  TensorFlow keeps between them; these compiled ones read the logits once
  each way and keep only their logsumexp.

  Args:
    logits: float Tensor [rows, classes] (float32, bfloat16 or float16).
    bias: float32 Tensor [classes].
    labels: int32 Tensor [rows], each in [0, classes).
  """

  @tf.custom_gradient
  def loss_fn(logits, bias):
    loss, log_sum_exp = xla_kernels.softmax_cross_entropy_forward(
        logits, bias, labels)

    def grad_fn(loss_grad):
      return xla_kernels.softmax_cross_entropy_backward(
          logits, bias, labels, log_sum_exp, loss_grad)

    return loss, grad_fn

  return loss_fn(logits, tf.identity(bias))


def score_scale(query):
  """1 / sqrt(size_per_head) of a [B, N, F, H] query."""
  return 1.0 / math.sqrt(float(query.shape[-1]))


def attention_probs(query, key, adder):
  """softmax(query key^T / sqrt(H) + adder): [B, N, F, T], float32 (or
  float64 for float64 inputs).

  The scaling and the mask addition run in the compute dtype, where grappler
  fuses them into the matmul, and the softmax in float32. In reduced
  precision this changes no unmasked score beyond the matmul's own rounding
  (a power-of-two scale is exact), and a masked position still gets a
  probability of exactly 0.

  Args:
    query: Tensor [B, N, F, H] in the compute dtype.
    key: Tensor [B, N, T, H] in the compute dtype.
    adder: (optional) float32 Tensor [B, 1, F, T], 0 where attention is
      allowed and a large negative number where not.
  """
  dtype = query.dtype
  scores = tf.matmul(query, key, transpose_b=True)
  scores *= tf.constant(score_scale(query), dtype)
  if adder is not None:
    scores += tf.cast(adder, dtype)
  return tf.nn.softmax(xla_kernels.at_least_float32(scores))


def attention_context(query, key, value, adder, draw_keep, dropout_prob,
                      policy=None):
  """matmul(dropout(attention_probs(query, key, adder)), value).

  Four backward passes with the same gradients, by `policy`:
    * autodiff (no policy, or a sequence short enough to keep): keeps the
      float32 probabilities, the dropped probabilities and the mask.
    * `policy.computes_again(T)`: keeps only query, key and value (which the
      matmuls' gradients need anyway), and computes the probabilities and
      draws the mask again, as FlashAttention does.
    * in a recomputation (`policy.in_recomputation`) of a sequence short
      enough to keep: keeps the probabilities and the mask but never holds
      more than two [B, N, F, T] tensors at once: the dropped probabilities
      exist only for the value's gradient, and the softmax's row sums come
      from the context (sum(dO * O) over H).
    * in a recomputation of a longer one: as the previous, but both passes
      run over `policy.head_groups(T)` groups of heads one after another,
      and the backward pass computes each group's probabilities again.

  Args:
    query: Tensor [B, N, F, H] in the compute dtype.
    key, value: Tensors [B, N, T, H] in the compute dtype.
    adder: (optional) float32 Tensor [B, 1, F, T] (see `attention_probs`).
    draw_keep: (optional) `dropout_masks.keep_mask_drawer` of the attention
      dropout mask [B, N, F, T]; None for no dropout.
    dropout_prob: float, the attention dropout probability.
    policy: a BackwardPolicy, or None for autodiff.

  Returns:
    Tensor [B, N, F, H] in the compute dtype.
  """
  dtype = value.dtype
  # Dropout's 1 / (1 - p) scales the [B, N, F, H] context rather than the
  # [B, N, F, T] probabilities: the same product with fewer multiplications.
  keep_scale = (tf.constant(1.0 / (1.0 - dropout_prob), dtype) if draw_keep
                else None)

  def scaled(tensor):
    return tensor if keep_scale is None else tensor * keep_scale

  def dropped_probs(probs, keep):
    """The probabilities in the compute dtype, zero where dropped."""
    probs = tf.cast(probs, dtype)
    return probs if keep is None else dropout_masks.zero_dropped(probs, keep)

  def unscaled_context(query, key, value, keep):
    """(dropped probabilities times value, float32 probabilities)."""
    probs = attention_probs(query, key, adder)
    return tf.matmul(dropped_probs(probs, keep), value), probs

  seq_length = int_or_none(key, 2)
  if policy is None or not (policy.in_recomputation or
                            policy.computes_again(seq_length)):
    keep = draw_keep(after=query) if draw_keep else None
    return scaled(unscaled_context(query, key, value, keep)[0])
  keeps_probs = policy.in_recomputation and policy.keeps_at(seq_length)
  rows = rows_if_known(int_or_none(query, 0), int_or_none(query, 2))
  groups = _even_ranges(int(query.shape[1]),
                        policy.head_groups(seq_length, rows))

  @tf.custom_gradient
  def context_fn(query, key, value):
    keep = draw_keep(after=query) if draw_keep else None
    if keeps_probs:
      output, kept_probs = unscaled_context(query, key, value, keep)
      output = scaled(output)
    else:
      def group_context(heads, previous):
        group_query = heads(query)
        if previous is not None:
          group_query = graph_order.after(previous, group_query)
        return unscaled_context(group_query, heads(key), heads(value),
                                heads(keep))[0]

      output = scaled(_concat(_one_group_after_another(
          groups, group_context), axis=1))

    def grad_fn(context_grad):
      if keeps_probs:
        grad_keep = keep
      else:
        grad_keep = draw_keep(after=context_grad) if draw_keep else None
      scaled_grad = scaled(context_grad)

      def group_grads(heads, previous):
        """(query, key, value) gradients of the heads `heads` selects."""
        query_again = graph_order.after(
            context_grad if previous is None else previous, heads(query))
        if keeps_probs:
          probs = kept_probs
        else:
          probs = attention_probs(query_again, heads(key), adder)
        keep_part = heads(grad_keep)
        grad_part = heads(scaled_grad)
        # The probabilities' gradient waits for the value's, so the dropped
        # probabilities and that gradient are never alive at once.
        value_grad = tf.matmul(
            dropped_probs(graph_order.after(context_grad, probs),
                          keep_part),
            grad_part, transpose_a=True)
        probs_grad = tf.matmul(
            graph_order.after(value_grad, grad_part), heads(value),
            transpose_b=True)
        if keep_part is not None:
          probs_grad = dropout_masks.zero_dropped(probs_grad, keep_part)
        probs_grad = tf.cast(probs_grad, probs.dtype)
        # The softmax's Jacobian-vector product p * (g - sum(g * p)) in the
        # softmax's dtype. Inside a recomputation the context is at hand,
        # and sum(g * p) over the keys equals sum(dO * O) over the head's
        # width, a [B, N, F, H] product instead of a [B, N, F, T] one.
        if policy.in_recomputation:
          row_sums = tf.reduce_sum(
              tf.cast(heads(context_grad), probs.dtype) *
              tf.cast(heads(output), probs.dtype), axis=-1, keepdims=True)
        else:
          row_sums = tf.reduce_sum(probs_grad * probs, axis=-1,
                                   keepdims=True)
        scores_grad = tf.cast(probs * (probs_grad - row_sums), dtype)
        # The scale multiplies the [B, N, F, H] gradients: as a factor of
        # the [B, N, F, T] product, grappler would move it onto the
        # probabilities and compute a scaled copy of them in the forward
        # pass.
        scale = tf.constant(score_scale(query), dtype)
        return (tf.matmul(scores_grad, heads(key)) * scale,
                tf.matmul(scores_grad, query_again, transpose_a=True) * scale,
                value_grad)

      return [_concat(grads, axis=1) for grads in zip(
          *_one_group_after_another(groups, group_grads))]

    return output, grad_fn

  return context_fn(query, key, value)


def feed_forward_in_row_groups(x, kernel_1, bias_1, kernel_2, bias_2,
                               activation, groups):
  """matmul(activation(x @ kernel_1 + bias_1), kernel_2) + bias_2, by rows.

  Both passes run over `groups` runs of rows, one after another, keeping
  only `x`; the backward pass computes each run's intermediate activation
  again. The largest tensors alive are then [rows / groups, intermediate]
  instead of [rows, intermediate]. Inside a recomputation nothing reads the
  forward output, so the session prunes the forward pass and the first
  matmul still runs once. The weight and bias gradients are running sums
  over the runs, in float32 for 16-bit compute dtypes.

  Args:
    x: Tensor [rows, width] in the compute dtype (rows may be known only
      when the graph runs, as with padding skipped).
    kernel_1, bias_1: Tensors [width, intermediate] and [intermediate].
    kernel_2, bias_2: Tensors [intermediate, width] and [width]; all four in
      the compute dtype.
    activation: elementwise function.
    groups: int, how many runs of rows (of near-equal size, split when the
      graph runs if the row count is known only then).

  Returns:
    Tensor [rows, width].
  """
  rows = int_or_none(x, 0)
  bounds = _even_ranges(tf.shape(x)[0] if rows is None else rows, groups)

  @tf.custom_gradient
  def feed_forward(x, kernel_1, bias_1, kernel_2, bias_2):
    def intermediate(x_part):
      return tf.nn.bias_add(tf.matmul(x_part, kernel_1), bias_1)

    def group_output(part, previous):
      x_part = part(x)
      if previous is not None:
        x_part = graph_order.after(previous, x_part)
      return tf.nn.bias_add(
          tf.matmul(activation(intermediate(x_part)), kernel_2), bias_2)

    def grad_fn(output_grad):
      sum_dtype = x.dtype if x.dtype.size >= 4 else tf.float32

      def group_grads(part, previous):
        """(x's gradient over the group's rows, the running sums of the
        four weight and bias gradients)."""
        # The group starts once the previous group's sums exist: one
        # group's [rows / groups, intermediate] tensors are alive at a time.
        x_part = graph_order.after(
            output_grad if previous is None else previous[1], part(x))
        grad_part = part(output_grad)
        pre_activation = intermediate(x_part)
        activated = activation(pre_activation)
        pre_activation_grad = tf.gradients(
            activated, pre_activation,
            grad_ys=tf.matmul(grad_part, kernel_2, transpose_b=True))[0]
        partials = [
            tf.cast(tf.matmul(x_part, pre_activation_grad, transpose_a=True),
                    sum_dtype),
            tf.reduce_sum(tf.cast(pre_activation_grad, sum_dtype), axis=0),
            tf.cast(tf.matmul(activated, grad_part, transpose_a=True),
                    sum_dtype),
            tf.reduce_sum(tf.cast(grad_part, sum_dtype), axis=0)]
        if previous is not None:
          partials = [total + p for total, p in zip(previous[1], partials)]
        return (tf.matmul(pre_activation_grad, kernel_1, transpose_b=True),
                partials)

      results = _one_group_after_another(bounds, group_grads, axis=0)
      return ([_concat([x_grad for x_grad, _ in results], axis=0)] +
              [tf.cast(total, x.dtype) for total in results[-1][1]])

    return _concat(_one_group_after_another(bounds, group_output, axis=0),
                   axis=0), grad_fn

  return feed_forward(x, kernel_1, bias_1, kernel_2, bias_2)


def _even_ranges(count, groups):
  """[(begin, end)]: `groups` runs of near-equal size over range(count), in
  order. `count` is an int (then at most `count` runs) or an int Tensor
  (then the bounds are Tensors too)."""
  if isinstance(count, int):
    groups = min(groups, count)
  return [(count * index // groups, count * (index + 1) // groups)
          for index in range(groups)]


def _one_group_after_another(groups, group_fn, axis=1):
  """[group_fn(part, previous)] over the (begin, end) ranges `groups`.

  `part(tensor)` is the [begin:end] part of `tensor` along `axis` (heads
  for attention, rows for the feed-forward; None stays None; one group
  covering everything is no slice at all); `previous` is the last group's
  result, None for the first. A group that starts its work after
  `previous` exists keeps the groups' working sets from being alive at the
  same time.
  """
  results = []
  for begin, end in groups:
    def part(tensor, begin=begin, end=end):
      if tensor is None or len(groups) == 1:
        return tensor
      return tensor[(slice(None),) * axis + (slice(begin, end),)]
    results.append(group_fn(part, results[-1] if results else None))
  return results


def _concat(parts, axis):
  """The parts of one tensor along `axis`, concatenated."""
  parts = list(parts)
  return parts[0] if len(parts) == 1 else tf.concat(parts, axis=axis)


def rows_if_known(batch_size, length):
  """batch_size * length when both are ints, else None (the row count
  BackwardPolicy's group counts take)."""
  if isinstance(batch_size, int) and isinstance(length, int):
    return batch_size * length
  return None


def int_or_none(tensor, axis):
  """The static size of `tensor` along `axis`, or None if unknown."""
  size = tensor.shape[axis]
  return None if size is None else int(size)


def recompute_grad(layer_fn):
  """Gradient checkpointing of `layer_fn` in graph mode.

  The forward pass keeps only the input of `layer_fn(layer_input,
  recomputing)`; the gradient runs `layer_fn(input, True)` again, in the
  same variable scope and with the forward pass's dropout sites
  (dropout_masks.replaying_sites), and differentiates that copy. The whole
  recomputation waits on the incoming gradient through a control
  dependency, so it runs in the backward pass (tf.recompute_grad ties only
  its input to the gradient, through arithmetic that grappler simplifies
  away, and then recomputes during the forward pass). The input's gradient
  in turn waits for the layer's weight gradients, so one layer's
  recomputation is finished before the next one's starts.

  Args:
    layer_fn: callable (Tensor, bool) -> Tensor that reads its variables
      with `get_variable` in the current variable scope (resource variables,
      AUTO_REUSE or reuse=True).

  Returns:
    callable Tensor -> Tensor with the forward values of layer_fn(x, False).
  """

  @tf.custom_gradient
  def recomputed(layer_input):
    scope = tf.compat.v1.get_variable_scope()
    with dropout_masks.recording_sites() as sites:
      output = layer_fn(layer_input, False)

    def grad_fn(output_grad, variables=None):
      variables = list(variables or [])
      with tf.control_dependencies([output_grad]):
        input_again = tf.identity(layer_input)
        with tf.compat.v1.variable_scope(scope, reuse=True), \
            dropout_masks.replaying_sites(sites):
          output_again = layer_fn(input_again, True)
      grads = tf.gradients(
          output_again, [input_again] + variables, grad_ys=output_grad,
          unconnected_gradients=tf.UnconnectedGradients.ZERO)
      # The layer below starts its recomputation from this gradient; making
      # it wait for this layer's weight gradients keeps an executor short of
      # threads from deferring them (and the recomputed tensors they read)
      # to the end of the backward pass.
      with tf.control_dependencies(
          tf.nest.flatten(grads[1:], expand_composites=True)):
        input_grad = tf.identity(grads[0])
      return input_grad, grads[1:]

    return output, grad_fn

  return recomputed
