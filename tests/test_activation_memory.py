"""The memory savings of modeling.py must show in a training step's peak.

Equal gradients (tests/test_modeling.py) do not show that anything is saved:
`tf.recompute_grad` gives equal gradients on TF 2.21 while recomputing every
layer during the forward pass, and grappler may merge a backward
recomputation with the forward op it repeats, keeping the forward tensor
alive after all. These tests measure the peak bytes of TensorFlow's BFC
allocator (TF_CPU_ALLOCATOR_USE_BFC=true, which must be set before
TensorFlow starts, hence the subprocess) for one backward pass of an
8-layer model.
"""
import json
import os
import subprocess
import sys

import pytest

import conftest

pytestmark = pytest.mark.slow

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Batch 8, seq 128, hidden 128, 2 heads, intermediate 512; float32 [B,S,H]
# 0.5 MB, [B,S,I] 2 MB, [B,A,S,S] 1 MB. Autodiff of the original's formulas
# keeps per layer about 12 [B,S,H], 4 [B,S,I] (GELU's input, cube, tanh and
# output) and 2 [B,A,S,S] plus masks: about 17 MB, 135 MB for 8 layers.
# With keep_activations_up_to=0 (the long-sequence path, here at 128
# tokens) modeling.py keeps 8 [B,S,H] (the layer input, query, key, value,
# context, two normalized LayerNorm values and the intermediate matmul's
# input), one [B,S,I] (GELU's input: the output matmul computes GELU again
# in its backward pass) and the hidden dropout masks, no [B,A,S,S]
# (attention computes its probabilities again): about 6.5 MB per layer,
# 52 MB in all. Checkpointing keeps, per recomputed layer, its input and the
# input of its last LayerNorm (2 x 0.5 MB), the whole last layer, and the
# activations of the layer being recomputed.
#
# Each lean piece of engine/lean_gradients.py is also measured against autodiff of
# the plain formula inside the same 8-layer encoder (`encoder_peak`), built
# here from either.
_CHILD = r"""
import json, math, sys
import tensorflow as tf
from engine import dropout_masks
from engine import lean_gradients
import modeling

CONFIG = modeling.BertConfig(
    vocab_size=64, hidden_size=128, num_hidden_layers=8,
    num_attention_heads=2, intermediate_size=512,
    max_position_embeddings=128)
B, S, H, A, I = 8, 128, 128, 2, 512


def plain_gelu(x):
  return x * 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) *
                                  (x + 0.044715 * tf.pow(x, 3))))


def plain_attention_context(query, key, value, adder, draw_keep,
                            dropout_prob, policy):
  del policy
  scores = tf.matmul(query, key, transpose_b=True) * (
      1.0 / math.sqrt(float(query.shape[-1]))) + adder
  probs = tf.nn.softmax(scores)
  dropped = tf.where(draw_keep(query), probs / (1.0 - dropout_prob),
                     tf.zeros_like(probs))
  return tf.matmul(dropped, value)


def plain_normalize(x, gamma, beta):
  mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
  return tf.nn.batch_normalization(x, mean, variance, beta, gamma, 1e-12)


# The allocator's peak while `sess` runs `fetch` a second time, above what
# it held before.
def measured_peak(sess, fetch):
  sess.run(fetch)
  tf.config.experimental.reset_memory_stats("CPU:0")
  before = tf.config.experimental.get_memory_info("CPU:0")["current"]
  sess.run(fetch)
  return tf.config.experimental.get_memory_info("CPU:0")["peak"] - before


# With inter_op_threads=1 (in the session's own pool: the process-wide
# pool keeps the first session's size) two graphs that differ in one piece
# run on nearly the same schedule, and their peaks differ by what that piece
# keeps; on TensorFlow's shared pool the same graph's peak moves by several
# MB from run to run.
def session_config(inter_op_threads):
  return tf.compat.v1.ConfigProto(
      inter_op_parallelism_threads=inter_op_threads,
      use_per_session_threads=inter_op_threads > 0)


def gradient_peak(loss_fn, inter_op_threads=0):
  config = session_config(inter_op_threads)
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(1)
    dropout_masks.ensure_counters()
    loss = loss_fn()
    grads = tf.gradients(loss, tf.compat.v1.trainable_variables())
    # One scalar out, so the gradients die as soon as they are summed.
    total = tf.add_n([tf.reduce_sum(g) for g in grads if g is not None])
    with tf.compat.v1.Session(config=config) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return measured_peak(sess, total)


def model_loss(**kwargs):
  ids = tf.random.uniform([B, S], maxval=64, dtype=tf.int32, seed=1)
  model = modeling.BertModel(CONFIG, is_training=True, input_ids=ids,
                             **kwargs)
  return tf.reduce_mean(tf.square(model.get_sequence_output()))


def dense(x, width, name, weight_variance=0.02):
  kernel = tf.compat.v1.get_variable(
      name, [x.shape[-1], width],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  return tf.matmul(x, kernel)


def encoder_loss(attention, gelu_output, gelu_and_layer_norm):
  lean = lambda choice: choice == "lean"
  context_fn = (lean_gradients.attention_context if lean(attention)
                else plain_attention_context)
  gelu = lean_gradients.tanh_gelu if lean(gelu_and_layer_norm) else plain_gelu
  normalize = (lean_gradients.normalize if lean(gelu_and_layer_norm)
               else plain_normalize)
  policy = lean_gradients.BackwardPolicy(keep_activations_up_to=0)

  def layer_norm(x, name):
    return normalize(x, tf.compat.v1.get_variable(name + "g", [H]),
                     tf.compat.v1.get_variable(name + "b", [H]))

  def heads(x):
    return tf.transpose(tf.reshape(x, [B, S, A, H // A]), [0, 2, 1, 3])

  rows = tf.random.uniform([B * S, H], seed=2)
  adder = tf.zeros([B, 1, S, S])
  for layer in range(8):
    with tf.compat.v1.variable_scope("layer_%d" % layer):
      draw = dropout_masks.keep_mask_drawer([B, A, S, S], 0.1, "probs")
      context = context_fn(
          heads(dense(rows, H, "q")), heads(dense(rows, H, "k")),
          heads(dense(rows, H, "v")), adder, draw, 0.1, policy)
      context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [B * S, H])
      hidden = layer_norm(modeling.dropout(dense(context, H, "o"), 0.1) +
                          rows, "ln1")
      intermediate = dense(hidden, I, "i")
      kernel = tf.compat.v1.get_variable("out", [I, H])
      if lean(gelu_output):
        output = lean_gradients.matmul_of_activation(intermediate, kernel,
                                                     gelu)
      else:
        output = tf.matmul(gelu(intermediate), kernel)
      rows = layer_norm(modeling.dropout(output, 0.1) + hidden, "ln2")
  return tf.reduce_mean(tf.square(rows))


def encoder_peak(**choices):
  return gradient_peak(lambda: encoder_loss(**choices), inter_op_threads=1)


# Forward and backward pass of one attention as a checkpointed layer's
# recomputation builds it: [B,A,S,S] 4 MiB, [B,A,S,H] 0.5 MiB.
def recomputed_attention_peak_bytes(
    context_fn, policy=lean_gradients.BackwardPolicy(in_recomputation=True)):
  def loss():
    query, key, value = [tf.random.uniform([8, 8, 128, 16], seed=seed)
                         for seed in range(3)]
    tf.compat.v1.get_variable("unused", [1])  # gradient_peak needs one.
    draw_keep = dropout_masks.keep_mask_drawer([8, 8, 128, 128], 0.1)
    context = context_fn(query, key, value, tf.zeros([8, 1, 128, 128]),
                         draw_keep, 0.1, policy)
    grads = tf.gradients(tf.reduce_sum(tf.square(context)),
                         [query, key, value])
    return tf.add_n([tf.reduce_sum(g) for g in grads])
  with tf.Graph().as_default():
    dropout_masks.ensure_counters()
    total = loss()
    with tf.compat.v1.Session(config=session_config(1)) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      return measured_peak(sess, total)


# Forward and backward pass of a layer's feed-forward over [B*S, H] rows:
# [B*S, I] float32 2 MiB, in groups of rows (lean_gradients) or as autodiff
# of the plain formula.
def feed_forward_peak_bytes(groups):
  def loss():
    x = tf.random.uniform([B * S, H], seed=4)
    weights = [tf.compat.v1.get_variable(name, shape) for name, shape in (
        ("k1", [H, I]), ("b1", [I]), ("k2", [I, H]), ("b2", [H]))]
    if groups:
      output = lean_gradients.feed_forward_in_row_groups(
          x, *weights, lean_gradients.tanh_gelu, groups)
    else:
      k1, b1, k2, b2 = weights
      output = tf.matmul(plain_gelu(tf.matmul(x, k1) + b1), k2) + b2
    return tf.reduce_sum(tf.square(output))
  return gradient_peak(loss, inter_op_threads=1)


all_lean = dict(attention="lean", gelu_output="lean",
                gelu_and_layer_norm="lean")
peaks = {
    "kept": gradient_peak(model_loss),
    "off": gradient_peak(lambda: model_loss(keep_activations_up_to=0)),
    "on": gradient_peak(lambda: model_loss(keep_activations_up_to=0,
                                           gradient_checkpointing=True)),
    "on_one_thread": gradient_peak(
        lambda: model_loss(keep_activations_up_to=0,
                           gradient_checkpointing=True), inter_op_threads=1),
    "lean_encoder": encoder_peak(**all_lean),
    "autodiff_attention": encoder_peak(**dict(all_lean, attention="plain")),
    "autodiff_gelu_output": encoder_peak(**dict(all_lean,
                                                gelu_output="plain")),
    "autodiff": encoder_peak(attention="plain", gelu_output="plain",
                             gelu_and_layer_norm="plain"),
    "recomputed_attention": recomputed_attention_peak_bytes(
        lean_gradients.attention_context),
    "recomputed_autodiff_attention": recomputed_attention_peak_bytes(
        plain_attention_context),
    "recomputed_attention_in_head_groups": recomputed_attention_peak_bytes(
        lean_gradients.attention_context,
        lean_gradients.BackwardPolicy(keep_activations_up_to=0,
                                      in_recomputation=True,
                                      recomputed_head_groups=4,
                                      min_rows_per_head_group=1)),
    "feed_forward_autodiff": feed_forward_peak_bytes(0),
    "feed_forward_in_row_groups": feed_forward_peak_bytes(4),
}
print(json.dumps(peaks))
"""


def _measure(folder):
  env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true",
             TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get(
                 "PYTHONPATH", ""))
  out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=600,
                       check=True).stdout
  with open(os.path.join(folder, "peaks.json"), "w") as f:
    f.write(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def peaks(shared_dir):
  folder = conftest.build_once(shared_dir, "activation_peaks", _measure)
  with open(os.path.join(folder, "peaks.json")) as f:
    return json.load(f)


def test_checkpointing_lowers_the_allocator_peak(peaks):
  assert peaks["off"] > 45e6, peaks  # The model of the comment holds.
  assert peaks["on"] < 0.5 * peaks["off"], peaks


def test_checkpointing_saves_on_one_executor_thread(peaks):
  # On one inter-op thread TensorFlow's executor ran the recomputed layers'
  # weight gradients after the whole backward pass, keeping every layer's
  # recomputed inputs to them alive (64-67 MB); recompute_grad now passes
  # the input's gradient down only once its layer's weight gradients exist.
  assert peaks["on_one_thread"] < 0.6 * peaks["off"], peaks


def test_lean_gelu_attention_and_layer_norm_lower_the_allocator_peak(peaks):
  assert peaks["autodiff"] > 100e6, peaks
  # About 80 MB of the 8 layers' activations are not kept.
  assert peaks["autodiff"] - peaks["lean_encoder"] > 50e6, peaks
  # The model keeps what the lean encoder keeps (plus embeddings).
  assert abs(peaks["off"] - peaks["lean_encoder"]) < 0.25 * peaks["off"], (
      peaks)


def test_attention_keeps_no_probabilities_for_its_backward_pass(peaks):
  # Autodiff keeps two float32 [B,A,S,S] (1 MB each) and the bool mask
  # (0.25 MB) per layer; ours computes them again: 18 MB over 8 layers.
  assert peaks["autodiff_attention"] - peaks["lean_encoder"] > 13e6, peaks


def test_recomputed_attention_holds_two_probability_sized_tensors(peaks):
  # Inside a layer's recomputation ours holds two float32 [B,A,S,S] (4 MiB
  # each here: the probabilities and their gradient) at once, beside 5.5
  # MiB of smaller tensors (query, key, value, their gradients, the adder,
  # the bool mask, the context and its gradient): 13.5 MiB; a third would
  # make 17.5. Autodiff can hold four (the probabilities, the dropped
  # probabilities, their gradient and the softmax's); how many it holds at
  # once depends on the executor's order (measured on one thread: ours
  # 13.6 MiB, autodiff 17.0 to 24.0).
  assert peaks["recomputed_attention"] < 15.5 * 2**20, peaks
  assert (peaks["recomputed_autodiff_attention"] -
          peaks["recomputed_attention"] > 2 * 2**20), peaks


def test_recomputed_attention_in_head_groups_holds_a_group_at_a_time(peaks):
  # In four groups of two heads the largest tensors are [B,2,S,S] (1 MiB
  # each) and the mask drawn again for the backward pass (bool [B,A,S,S],
  # 1 MiB), beside the smaller ones: 7.0 MiB measured on one thread, against
  # 13.6 with all heads at once. One whole [B,A,S,S] float32 tensor (4 MiB)
  # alive with them would pass 9.5.
  assert peaks["recomputed_attention_in_head_groups"] < 9.5 * 2**20, peaks
  assert (peaks["recomputed_attention"] -
          peaks["recomputed_attention_in_head_groups"] > 3 * 2**20), peaks


def test_feed_forward_in_row_groups_holds_a_group_at_a_time(peaks):
  # Autodiff of the formula holds [B*S, I] tensors (2 MiB each: the
  # pre-activation and GELU's intermediates, then their gradients) beside
  # the weight gradients (0.5 MiB each); in four groups those are [B*S/4, I]
  # (0.5 MiB). Measured on one thread: 3.7 against 11.7 MiB. One whole
  # [B*S, I] tensor alive with a group's would pass 5.5 MiB.
  assert peaks["feed_forward_in_row_groups"] < 5.5 * 2**20, peaks
  assert (peaks["feed_forward_autodiff"] -
          peaks["feed_forward_in_row_groups"] > 5 * 2**20), peaks


def test_short_sequences_keep_probabilities_and_gelu_output(peaks):
  # At 128 tokens (the default path) attention's probabilities, dropped
  # probabilities and mask and GELU's output are kept: about 4 MB per layer,
  # 34 MB in all.
  assert peaks["kept"] - peaks["off"] > 20e6, peaks
  assert peaks["kept"] < peaks["autodiff"], peaks


def test_gelu_output_is_not_kept_for_the_output_matmul(peaks):
  # Autodiff of matmul(gelu(x), kernel) keeps gelu(x), one float32 [B,S,I]
  # (2 MB) per layer; ours computes it again: 16 MB over 8 layers.
  assert peaks["autodiff_gelu_output"] - peaks["lean_encoder"] > 11e6, peaks
