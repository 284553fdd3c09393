"""Tests for modeling.py against an independent NumPy forward pass."""
import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from engine import dropout_masks
from engine import lean_gradients
from engine import padding_layout
import modeling
import rounding
import optimization
from engine import xla_kernels

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, type_vocab_size=2)

# Two examples, seq 10, two segments; the second example is padded after
# position 7.
IDS = np.array([[2, 15, 7, 88, 3, 41, 9, 60, 12, 3],
                [2, 33, 5, 3, 71, 18, 3, 0, 0, 0]], np.int32)
MASK = np.array([[1] * 10, [1] * 7 + [0] * 3], np.int32)
TYPES = np.array([[0] * 5 + [1] * 5, [0] * 4 + [1] * 3 + [0] * 3], np.int32)


def _tiny_config(**overrides):
  return modeling.BertConfig(**dict(TINY, **overrides))


def _google_variable_shapes(cfg):
  """Google's checkpoint names and shapes for `cfg`, written out by hand."""
  h, i = cfg.hidden_size, cfg.intermediate_size
  shapes = {
      "bert/embeddings/word_embeddings": [cfg.vocab_size, h],
      "bert/embeddings/token_type_embeddings": [cfg.type_vocab_size, h],
      "bert/embeddings/position_embeddings": [cfg.max_position_embeddings, h],
      "bert/embeddings/LayerNorm/beta": [h],
      "bert/embeddings/LayerNorm/gamma": [h],
      "bert/pooler/dense/kernel": [h, h],
      "bert/pooler/dense/bias": [h],
  }
  per_layer = {
      "attention/self/query/kernel": [h, h],
      "attention/self/query/bias": [h],
      "attention/self/key/kernel": [h, h],
      "attention/self/key/bias": [h],
      "attention/self/value/kernel": [h, h],
      "attention/self/value/bias": [h],
      "attention/output/dense/kernel": [h, h],
      "attention/output/dense/bias": [h],
      "attention/output/LayerNorm/beta": [h],
      "attention/output/LayerNorm/gamma": [h],
      "intermediate/dense/kernel": [h, i],
      "intermediate/dense/bias": [i],
      "output/dense/kernel": [i, h],
      "output/dense/bias": [h],
      "output/LayerNorm/beta": [h],
      "output/LayerNorm/gamma": [h],
  }
  for layer in range(cfg.num_hidden_layers):
    for suffix, shape in per_layer.items():
      shapes["bert/encoder/layer_%d/%s" % (layer, suffix)] = shape
  return shapes


def _random_weights(cfg, seed=0):
  """Random float32 arrays with Google's names; scales keep attention peaky
  and LayerNorm parameters away from their trivial initial values."""
  rng = np.random.RandomState(seed)
  arrays = {}
  for name, shape in _google_variable_shapes(cfg).items():
    if name.endswith("gamma"):
      value = 1.0 + 0.2 * rng.randn(*shape)
    elif name.endswith("beta") or name.endswith("bias"):
      value = 0.1 * rng.randn(*shape)
    elif "embeddings" in name:
      value = 0.5 * rng.randn(*shape)
    else:
      value = 0.2 * rng.randn(*shape)
    arrays[name] = value.astype(np.float32)
  return arrays


def _assign(sess, arrays):
  """Loads `arrays` (keyed by variable name) into the graph's variables."""
  ops, feed = [], {}
  for var in tf.compat.v1.global_variables():
    name = var.op.name
    if name in arrays:
      placeholder = tf.compat.v1.placeholder(var.dtype.base_dtype, var.shape)
      ops.append(var.assign(placeholder))
      feed[placeholder] = arrays[name]
  sess.run(ops, feed)


def _add_micro_step(value):
  """An int64 micro_step variable in the "micro_step" collection."""
  return tf.compat.v1.get_variable(
      "micro_step", shape=[], dtype=tf.int64,
      initializer=tf.compat.v1.constant_initializer(value), trainable=False,
      collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES, "micro_step"])


# ---------------------------------------------------------------------------
# NumPy re-derivation of BERT's forward pass (float64).


def _np_gelu(x):
  return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) *
                                  (x + 0.044715 * x ** 3)))


def _np_layer_norm(x, w, prefix):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return ((x - mean) / np.sqrt(var + 1e-12) * w[prefix + "/gamma"] +
          w[prefix + "/beta"])


def _np_dense(x, w, prefix):
  return x @ w[prefix + "/kernel"] + w[prefix + "/bias"]


def _np_attention(x, mask, w, prefix, heads):
  batch, seq, hidden = x.shape
  d = hidden // heads

  def split(t):  # [B, S, H] -> [B, heads, S, d]
    return t.reshape(batch, seq, heads, d).transpose(0, 2, 1, 3)

  q = split(_np_dense(x, w, prefix + "/query"))
  k = split(_np_dense(x, w, prefix + "/key"))
  v = split(_np_dense(x, w, prefix + "/value"))
  scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
  scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
  scores = scores - scores.max(-1, keepdims=True)
  probs = np.exp(scores)
  probs = probs / probs.sum(-1, keepdims=True)
  return (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)


def _np_bert(w, cfg, ids, mask, types):
  """Returns (list of per-layer [B, S, H] outputs, pooled [B, H])."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  mask = np.asarray(mask, np.float64)
  seq = ids.shape[1]
  emb = (w["bert/embeddings/word_embeddings"][ids] +
         w["bert/embeddings/token_type_embeddings"][types] +
         w["bert/embeddings/position_embeddings"][:seq][None])
  h = _np_layer_norm(emb, w, "bert/embeddings/LayerNorm")
  layers = []
  for layer in range(cfg.num_hidden_layers):
    p = "bert/encoder/layer_%d/" % layer
    att = _np_attention(h, mask, w, p + "attention/self",
                        cfg.num_attention_heads)
    att = _np_layer_norm(_np_dense(att, w, p + "attention/output/dense") + h,
                         w, p + "attention/output/LayerNorm")
    inter = _np_gelu(_np_dense(att, w, p + "intermediate/dense"))
    h = _np_layer_norm(_np_dense(inter, w, p + "output/dense") + att,
                       w, p + "output/LayerNorm")
    layers.append(h)
  pooled = np.tanh(_np_dense(h[:, 0], w, "bert/pooler/dense"))
  return layers, pooled


# ---------------------------------------------------------------------------


def _run_tiny(arrays, ids=IDS, mask=MASK, types=TYPES, cfg=None, **kwargs):
  """Builds an eval model in a fresh graph with `arrays` loaded and returns
  (all encoder layers, pooled) as numpy."""
  cfg = cfg or _tiny_config()
  with tf.Graph().as_default():
    model = modeling.BertModel(
        cfg, is_training=False, input_ids=tf.constant(ids),
        input_mask=tf.constant(mask), token_type_ids=tf.constant(types),
        **kwargs)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, arrays)
      return sess.run((model.get_all_encoder_layers(),
                       model.get_pooled_output()))


def test_forward_matches_numpy_rederivation():
  arrays = _random_weights(_tiny_config())
  layers, pooled = _run_tiny(arrays)
  ref_layers, ref_pooled = _np_bert(arrays, _tiny_config(), IDS, MASK, TYPES)
  assert len(layers) == 2
  for got, want in zip(layers, ref_layers):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
  np.testing.assert_allclose(pooled, ref_pooled, atol=1e-5, rtol=0)
  # The reference is sensitive to the mask: ignoring it changes example 1.
  unmasked, _ = _np_bert(arrays, _tiny_config(), IDS, np.ones_like(MASK),
                         TYPES)
  assert np.abs(unmasked[-1][1, :7] - ref_layers[-1][1, :7]).max() > 1e-2


def test_googles_building_blocks_match_numpy():
  """embedding_lookup, embedding_postprocessor (layer_norm_and_dropout),
  create_attention_mask_from_input_mask, transformer_model (attention_layer,
  layer_norm, reshape_from_matrix) called directly, as Google's users call
  them, against the NumPy re-derivation."""
  cfg = _tiny_config()
  arrays = _random_weights(cfg, seed=4)
  with tf.Graph().as_default():
    ids = tf.constant(IDS)
    with tf.compat.v1.variable_scope("bert"):
      with tf.compat.v1.variable_scope("embeddings"):
        words, table = modeling.embedding_lookup(
            ids, cfg.vocab_size, cfg.hidden_size)
        embedded = modeling.embedding_postprocessor(
            words, use_token_type=True, token_type_ids=tf.constant(TYPES),
            token_type_vocab_size=cfg.type_vocab_size,
            max_position_embeddings=cfg.max_position_embeddings,
            dropout_prob=0.0)
      with tf.compat.v1.variable_scope("encoder"):
        mask = modeling.create_attention_mask_from_input_mask(
            ids, tf.constant(MASK))
        layers = modeling.transformer_model(
            embedded, mask, cfg.hidden_size, cfg.num_hidden_layers,
            cfg.num_attention_heads, cfg.intermediate_size,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            do_return_all_layers=True)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, arrays)
      got_words, got_mask, got_layers = sess.run((words, mask, layers))
      assert table.shape.as_list() == [cfg.vocab_size, cfg.hidden_size]
  np.testing.assert_array_equal(
      got_words, arrays["bert/embeddings/word_embeddings"][IDS])
  np.testing.assert_array_equal(got_mask,
                                np.broadcast_to(MASK[:, None, :], (2, 10, 10)))
  ref_layers, _ = _np_bert(arrays, cfg, IDS, MASK, TYPES)
  for got, want in zip(got_layers, ref_layers):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_attention_layer_and_layer_norm_match_numpy():
  """attention_layer on 3-D inputs and on 2-D ones with the sizes given, and
  layer_norm, against NumPy; create_initializer's truncated normal."""
  rng = np.random.RandomState(8)
  x = rng.standard_normal((2, 10, 32)).astype(np.float32)
  weights = {"self/%s/%s" % (name, part): rng.standard_normal(shape).astype(
      np.float32) * 0.3 for name in ("query", "key", "value")
             for part, shape in (("kernel", (32, 32)), ("bias", (32,)))}
  weights.update({"norm/gamma": 1.0 + rng.standard_normal(32) * 0.2,
                  "norm/beta": rng.standard_normal(32) * 0.1})
  with tf.Graph().as_default():
    mask = modeling.create_attention_mask_from_input_mask(
        tf.constant(x), tf.constant(MASK))
    with tf.compat.v1.variable_scope("self"):
      three_d = modeling.attention_layer(tf.constant(x), tf.constant(x), mask,
                                         num_attention_heads=4,
                                         size_per_head=8)
    with tf.compat.v1.variable_scope("self", reuse=True):
      two_d = modeling.attention_layer(
          modeling.reshape_to_matrix(tf.constant(x)),
          modeling.reshape_to_matrix(tf.constant(x)), mask,
          num_attention_heads=4, size_per_head=8, do_return_2d_tensor=True,
          batch_size=2, from_seq_length=10, to_seq_length=10)
    with tf.compat.v1.variable_scope("self", reuse=True):
      biased = modeling.attention_layer(
          tf.constant(x), tf.constant(x), num_attention_heads=4,
          size_per_head=8,
          attention_bias=modeling.attention_bias_from_mask(mask))
    normalized = modeling.layer_norm(tf.constant(x), name="norm")
    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                     reuse=True):
      normalized_again = modeling.layer_norm_and_dropout(
          tf.constant(x), 0.0, name="norm")
    initial = tf.compat.v1.get_variable(
        "initial", [200, 200], initializer=modeling.create_initializer(0.05))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, weights)
      got = sess.run((three_d, two_d, normalized, normalized_again, initial,
                      biased))
  want = _np_attention(x.astype(np.float64), MASK.astype(np.float64),
                       weights, "self", 4)
  np.testing.assert_allclose(got[0], want, atol=1e-5, rtol=0)
  np.testing.assert_allclose(got[1], want.reshape(20, 32), atol=1e-5, rtol=0)
  np.testing.assert_allclose(got[5], want, atol=1e-5, rtol=0)
  want_norm = _np_layer_norm(x.astype(np.float64), weights, "norm")
  np.testing.assert_allclose(got[2], want_norm, atol=1e-5, rtol=0)
  np.testing.assert_allclose(got[3], want_norm, atol=1e-5, rtol=0)
  # Truncated at two standard deviations.
  assert np.abs(got[4]).max() <= 0.1 + 1e-7
  assert abs(got[4].std() - 0.05 * 0.88) < 0.002


def test_one_hot_embeddings_match_gather():
  arrays = _random_weights(_tiny_config())
  _, pooled = _run_tiny(arrays, use_one_hot_embeddings=True)
  _, ref_pooled = _np_bert(arrays, _tiny_config(), IDS, MASK, TYPES)
  np.testing.assert_allclose(pooled, ref_pooled, atol=1e-5, rtol=0)


def test_variable_names_and_shapes_are_googles():
  cfg = _tiny_config()
  with tf.Graph().as_default():
    model = modeling.BertModel(cfg, is_training=True,
                               input_ids=tf.constant(IDS))
    got = {v.op.name: v.shape.as_list()
           for v in tf.compat.v1.global_variables()}
    trainable = {v.op.name for v in tf.compat.v1.trainable_variables()}
    assert model.get_embedding_table().shape.as_list() == [99, 32]
  # Training-mode dropout reads the two step counters, made at the root.
  assert got.pop("global_step") == [] and got.pop("micro_step") == []
  assert got == _google_variable_shapes(cfg)
  assert trainable == set(got)
  assert len(got) == 5 + 16 * 2 + 2
  with tf.Graph().as_default():
    modeling.BertModel(cfg, is_training=False, input_ids=tf.constant(IDS))
    assert {v.op.name for v in tf.compat.v1.global_variables()} == set(got)


def test_checkpoint_with_google_names_loads(tmp_path):
  cfg = _tiny_config()
  arrays = _random_weights(cfg, seed=3)
  prefix = str(tmp_path / "bert_model.ckpt")
  with tf.Graph().as_default():
    for name, value in arrays.items():
      tf.compat.v1.get_variable(name, initializer=tf.constant(value))
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, prefix, write_meta_graph=False)

  with tf.Graph().as_default():
    model = modeling.BertModel(
        cfg, is_training=False, input_ids=tf.constant(IDS),
        input_mask=tf.constant(MASK), token_type_ids=tf.constant(TYPES))
    tvars = tf.compat.v1.trainable_variables()
    assignment_map, initialized = (
        modeling.get_assignment_map_from_checkpoint(tvars, prefix))
    tf.compat.v1.train.init_from_checkpoint(prefix, assignment_map)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      layers, pooled = sess.run((model.get_all_encoder_layers(),
                                 model.get_pooled_output()))

  assert set(assignment_map) == set(arrays)
  assert all(assignment_map[k] == k for k in assignment_map)
  assert set(initialized) == set(arrays) | {k + ":0" for k in arrays}
  ref_layers, ref_pooled = _np_bert(arrays, cfg, IDS, MASK, TYPES)
  for got, want in zip(layers, ref_layers):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
  np.testing.assert_allclose(pooled, ref_pooled, atol=1e-5, rtol=0)


def test_missing_checkpoint_error_names_flag(tmp_path):
  with tf.Graph().as_default():
    var = tf.compat.v1.get_variable("bert/x", [2])
    missing = str(tmp_path / "nope.ckpt")
    with pytest.raises(ValueError, match="--init_checkpoint") as info:
      modeling.get_assignment_map_from_checkpoint([var], missing)
  assert missing in str(info.value)


def test_padding_does_not_change_real_positions():
  arrays = _random_weights(_tiny_config(), seed=5)
  real = 6
  ids = np.array([[2, 15, 7, 3, 41, 3] + [0] * 6], np.int32)
  mask = np.array([[1] * real + [0] * 6], np.int32)
  types = np.array([[0, 0, 0, 0, 1, 1] + [0] * 6], np.int32)
  other_ids = ids.copy()
  other_ids[0, real:] = [5, 77, 13, 98, 1, 60]
  other_types = types.copy()
  other_types[0, real:] = 1

  layers_a, pooled_a = _run_tiny(arrays, ids, mask, types)
  layers_b, pooled_b = _run_tiny(arrays, other_ids, mask, other_types)
  layers_c, pooled_c = _run_tiny(arrays, ids[:, :real], mask[:, :real],
                                 types[:, :real])
  for a, b, c in zip(layers_a, layers_b, layers_c):
    np.testing.assert_allclose(a[:, :real], b[:, :real], atol=1e-6, rtol=0)
    np.testing.assert_allclose(a[:, :real], c, atol=1e-5, rtol=0)
  np.testing.assert_allclose(pooled_a, pooled_b, atol=1e-6, rtol=0)
  np.testing.assert_allclose(pooled_a, pooled_c, atol=1e-5, rtol=0)
  # Without the mask the pad tokens would change the real positions.
  layers_d, _ = _run_tiny(arrays, other_ids, np.ones_like(mask), other_types)
  assert np.abs(layers_d[-1][:, :real] - layers_a[-1][:, :real]).max() > 1e-2


def test_real_minilm_checkpoint_matches_numpy(minilm_dir):
  cfg = modeling.BertConfig.from_json_file(
      os.path.join(minilm_dir, "bert_config.json"))
  prefix = os.path.join(minilm_dir, "bert_model.ckpt")
  # "[CLS] hello, world! [SEP] how are you? [SEP]" in the uncased vocab;
  # the second example is the first segment alone, padded.
  ids = np.array([[101, 7592, 1010, 2088, 999, 102, 2129, 2024, 2017, 1029,
                   102],
                  [101, 7592, 1010, 2088, 999, 102, 0, 0, 0, 0, 0]], np.int32)
  mask = np.array([[1] * 11, [1] * 6 + [0] * 5], np.int32)
  types = np.array([[0] * 6 + [1] * 5, [0] * 11], np.int32)

  with tf.Graph().as_default():
    model = modeling.BertModel(
        cfg, is_training=False, input_ids=tf.constant(ids),
        input_mask=tf.constant(mask), token_type_ids=tf.constant(types))
    tvars = tf.compat.v1.trainable_variables()
    assignment_map, initialized = (
        modeling.get_assignment_map_from_checkpoint(tvars, prefix))
    tf.compat.v1.train.init_from_checkpoint(prefix, assignment_map)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      layers, pooled = sess.run((model.get_all_encoder_layers(),
                                 model.get_pooled_output()))
  assert all(v.name in initialized for v in tvars)

  reader = tf.train.load_checkpoint(prefix)
  arrays = {name: reader.get_tensor(name)
            for name in _google_variable_shapes(cfg)}
  ref_layers, ref_pooled = _np_bert(arrays, cfg, ids, mask, types)
  assert len(layers) == 6
  for got, want in zip(layers, ref_layers):
    np.testing.assert_allclose(got[0], want[0], atol=1e-4, rtol=0)
    np.testing.assert_allclose(got[1, :6], want[1, :6], atol=1e-4, rtol=0)
  np.testing.assert_allclose(pooled, ref_pooled, atol=1e-4, rtol=0)


def _executed_matmuls(run_metadata, prefix=""):
  """Names of the matmul kernels (any MatMul op, fused or batched) that ran,
  of nodes whose name starts with `prefix`."""
  # A node's timeline label reads "name = OpType(inputs)".
  return [node.node_name for device in run_metadata.step_stats.dev_stats
          for node in device.node_stats
          if node.node_name.startswith(prefix) and
          "MatMul" in node.timeline_label.split("(")[0].split(" = ")[-1]]


def _training_model(cfg, gradient_checkpointing, graph_seed, micro_step,
                    ids=IDS, mask=MASK, types=TYPES, **kwargs):
  """A training-mode (dropout on) BertModel of the fixed inputs, built in the
  default graph with stateless dropout keyed on `micro_step`; `kwargs` go
  to BertModel."""
  tf.compat.v1.set_random_seed(graph_seed)
  _add_micro_step(micro_step)
  return modeling.BertModel(
      cfg, is_training=True, input_ids=tf.constant(ids),
      input_mask=tf.constant(mask), token_type_ids=tf.constant(types),
      gradient_checkpointing=gradient_checkpointing, **kwargs)


def _mask_draws(graph):
  """[Operation]: the calls of the compiled dropout-mask kernel in `graph`."""
  return [op for op in graph.get_operations()
          if op.type in ("PartitionedCall", "StatefulPartitionedCall") and
          "keep_mask_16bit" in op.get_attr("f").name]


def _num_stateless_mask_draws(graph):
  return len(_mask_draws(graph))


def _ancestor_names(op):
  """Names of the ops that must run before `op` (data and control edges)."""
  names, pending = set(), [op]
  while pending:
    current = pending.pop()
    for parent in [t.op for t in current.inputs] + current.control_inputs:
      if parent.name not in names:
        names.add(parent.name)
        pending.append(parent)
  return names


def _gradients(arrays, gradient_checkpointing, keep_activations_up_to=384):
  """Training-mode (dropout 0.1) gradients of a fixed scalar loss.

  Returns:
    (variable names and shapes, gradients, dropout mask draws in the graph,
    matmul kernels run for the gradients).
  """
  cfg = _tiny_config()
  with tf.Graph().as_default() as graph:
    model = _training_model(cfg, gradient_checkpointing, 1234, 7,
                            keep_activations_up_to=keep_activations_up_to)
    rng = np.random.RandomState(0)
    loss = (tf.reduce_sum(model.get_sequence_output() *
                          rng.randn(2, 10, 32).astype(np.float32)) +
            tf.reduce_sum(model.get_pooled_output() *
                          rng.randn(2, 32).astype(np.float32)))
    tvars = tf.compat.v1.trainable_variables()
    grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, tvars)]
    num_masks = _num_stateless_mask_draws(graph)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, arrays)
      run_metadata = tf.compat.v1.RunMetadata()
      values = sess.run(grads, options=tf.compat.v1.RunOptions(
          trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                        run_metadata=run_metadata)
  names = [(v.op.name, v.shape.as_list()) for v in tvars]
  return names, values, num_masks, len(_executed_matmuls(run_metadata))


@pytest.mark.parametrize("long_sequence_path", [False, True])
def test_gradient_checkpointing_gives_identical_gradients(long_sequence_path):
  # On the long-sequence path attention and the output matmul compute again
  # in the backward pass what the short-sequence path keeps.
  keep = 0 if long_sequence_path else 384
  arrays = _random_weights(_tiny_config(), seed=11)
  names, plain, plain_masks, plain_matmuls = _gradients(arrays, False, keep)
  ckpt_names, recomputed, ckpt_masks, ckpt_matmuls = _gradients(arrays, True,
                                                                keep)
  assert ckpt_names == names
  # 1 embedding + 3 per layer dropout sites, and 3 for the last layer's
  # first-token pass (the pooler's). Recomputation draws the 3 masks of every
  # layer but the last (which is not recomputed) again. A layer's forward
  # pass has 8 matmuls: query, key, value, scores, context, attention
  # output, intermediate, output. The recomputation of the first layer runs
  # all but the output matmul, whose result no gradient needs: 7 more.
  if not long_sequence_path:
    assert plain_masks == 1 + 3 * 2 + 3
    assert ckpt_masks == plain_masks + 3 * 1
    assert ckpt_matmuls == plain_matmuls + 7, (plain_matmuls, ckpt_matmuls)
  else:
    # Each of the 3 attentions draws its mask again in its backward pass and
    # computes its scores again. The recomputed attention runs over its heads
    # in groups (lean_gradients.BackwardPolicy.head_groups; one group for
    # the 20 query rows here), one scores and one context matmul per group
    # in its forward pass and five matmuls per group in its backward pass,
    # where the plain one has five. Its feed-forward runs over groups of
    # rows (row_groups; one group here too): the forward pass needs none of
    # its matmuls, the backward pass five per group (the intermediate one
    # again, then four gradients), where the plain backward pass has four.
    # (tests/test_lean_gradients.py checks several groups of heads.)
    policy = lean_gradients.BackwardPolicy(0, True)
    groups = policy.head_groups(10, IDS.size)
    row_groups = policy.row_groups(10, IDS.size)
    assert plain_masks == 1 + 3 * 2 + 3 + 3
    assert ckpt_masks == plain_masks + 3 * 1
    assert ckpt_matmuls == plain_matmuls + (4 + 2 * groups) + 5 * (
        groups - 1) + (5 * row_groups - 4), (plain_matmuls, ckpt_matmuls)
  _assert_same_gradients(names, plain, recomputed)


def _assert_same_gradients(names, expected, got):
  """float32 gradients equal up to rounding. The absolute tolerance is
  scaled to the largest gradient: some (the key biases') are 0 in exact
  arithmetic and rounding noise here."""
  scale = max(np.abs(a).max() for a in expected)
  for (name, _), a, b in zip(names, expected, got):
    assert name.endswith("key/bias") or np.abs(a).max() > 1e-3 * scale, name
    np.testing.assert_allclose(b, a, atol=1e-5 * scale, rtol=1e-4,
                               err_msg=name)


@pytest.mark.slow
def test_short_sequences_keep_what_long_ones_compute_again():
  """Up to keep_activations_up_to tokens the backward pass draws no
  attention mask again and computes no scores again; one token more and it
  does both, for each of the 3 attentions; None keeps at any length."""
  arrays = _random_weights(_tiny_config(), seed=11)
  names, kept, kept_masks, kept_matmuls = _gradients(arrays, False, 10)
  _, again, again_masks, again_matmuls = _gradients(arrays, False, 9)
  _, always, always_masks, always_matmuls = _gradients(arrays, False, None)
  assert again_masks == kept_masks + 3
  assert again_matmuls == kept_matmuls + 3
  assert (always_masks, always_matmuls) == (kept_masks, kept_matmuls)
  _assert_same_gradients(names, kept, again)
  _assert_same_gradients(names, kept, always)


def _compiled_calls_of_training_graph(num_layers, device):
  """(compiled function calls, their distinct functions) in the gradients
  graph of a checkpointed training-mode model built on `device`, on the
  path that computes GELU and attention masks again in the backward pass."""
  with tf.Graph().as_default() as graph, tf.device(device):
    model = _training_model(_tiny_config(num_hidden_layers=num_layers), True,
                            1234, 7, keep_activations_up_to=0)
    tf.gradients(tf.reduce_sum(model.get_sequence_output()),
                 tf.compat.v1.trainable_variables())
  calls = [op for op in graph.get_operations()
           if op.type in ("PartitionedCall", "StatefulPartitionedCall")
           and op.get_attr("_XlaMustCompile")]
  return calls, {op.get_attr("f").name for op in calls}


def test_compiled_kernels_are_traced_once_for_all_layers():
  """GELU and dropout-mask kernels called in backward passes, which build
  each gradient colocated with its forward op, share one traced (so one
  XLA-compiled) function per shape, however deep the model, and stay on
  the forward op's device."""
  device = "/device:CPU:1"
  shallow_calls, shallow = _compiled_calls_of_training_graph(2, device)
  deep_calls, deep = _compiled_calls_of_training_graph(6, device)
  assert len(deep_calls) > len(shallow_calls)
  assert len(deep) == len(shallow), (sorted(shallow), sorted(deep))
  assert {op.device for op in deep_calls} == {device}


def _pooled_two_ways(arrays, num_layers, gradient_checkpointing=False):
  """Training-mode (dropout 0.1) pooled output and the gradients of a loss on
  it, computed (a) by the model and (b) by the pooler formula applied to the
  full last layer's first position. Returns numpy ((a), (b)) pairs."""
  cfg = _tiny_config(num_hidden_layers=num_layers)
  with tf.Graph().as_default():
    model = _training_model(cfg, gradient_checkpointing, 99, 3)
    pooler = {v.op.name: v for v in tf.compat.v1.global_variables()
              if "pooler" in v.op.name}
    from_sequence = tf.tanh(
        tf.matmul(model.get_sequence_output()[:, 0],
                  pooler["bert/pooler/dense/kernel"]) +
        pooler["bert/pooler/dense/bias"])
    weights = np.random.RandomState(5).randn(2, 32).astype(np.float32)
    tvars = tf.compat.v1.trainable_variables()
    outputs = []
    for pooled in (model.get_pooled_output(), from_sequence):
      grads = tf.gradients(tf.reduce_sum(pooled * weights), tvars)
      outputs.append([pooled] + [tf.convert_to_tensor(g) for g in grads])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, arrays)
      return sess.run(outputs), [v.op.name for v in tvars]


@pytest.mark.parametrize("num_layers,checkpointing",
                         [(2, False), (1, False), (3, True)])
def test_pooled_output_is_the_full_last_layers_first_position(
    num_layers, checkpointing):
  """The pooler's first-token pass through the last layer gives the full
  layer's values and gradients, dropout 0.1 on (same masks)."""
  cfg = _tiny_config(num_hidden_layers=num_layers)
  (model_way, full_way), names = _pooled_two_ways(
      _random_weights(cfg, seed=21), num_layers, checkpointing)
  np.testing.assert_allclose(model_way[0], full_way[0], atol=1e-6, rtol=0)
  for name, a, b in zip(names, full_way[1:], model_way[1:]):
    np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5, err_msg=name)
  # Dropout was on: the eval-mode pooled output differs.
  eval_pooled = _run_tiny(_random_weights(cfg, seed=21), cfg=cfg)[1]
  assert np.abs(eval_pooled - model_way[0]).max() > 1e-3


def test_pooled_output_alone_skips_the_full_last_layer():
  """Fetching only the pooled output runs the last layer's feed-forward for
  the first position alone: the full layer's ops are pruned."""
  cfg = _tiny_config()
  with tf.Graph().as_default():
    model = modeling.BertModel(
        cfg, is_training=False, input_ids=tf.constant(IDS),
        input_mask=tf.constant(MASK), token_type_ids=tf.constant(TYPES))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      metadata = tf.compat.v1.RunMetadata()
      sess.run(model.get_pooled_output(),
               options=tf.compat.v1.RunOptions(
                   trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
               run_metadata=metadata)
  assert len(_executed_matmuls(metadata, "bert/encoder/layer_0/")) == 8
  # The first-token pass: its own key and value matmuls over all positions,
  # the rest for one position.
  assert len(_executed_matmuls(metadata, "bert/encoder/layer_1_1/")) == 8
  assert not _executed_matmuls(metadata, "bert/encoder/layer_1/")


@pytest.mark.parametrize("compute_dtype", ["bfloat16", "float32"])
def test_attention_probs_scale_and_mask_in_compute_dtype(compute_dtype):
  """Scores scaled and masked in the compute dtype (fused into the matmul by
  grappler) give the softmax of the matmul's rounded scores / 8 plus the
  mask, computed in float64: masked positions exactly 0."""
  rng = np.random.RandomState(5)
  query, key = (rng.standard_normal((2, 3, 16, 64)).astype(np.float32)
                for _ in range(2))
  allowed = np.ones((2, 1, 16, 16), np.float32)
  allowed[0, :, :, 11:] = 0.0
  allowed[1, :, :, 5:] = 0.0
  dtype = tf.as_dtype(compute_dtype)
  with tf.Graph().as_default():
    q, k = (tf.cast(tf.constant(a), dtype) for a in (query, key))
    raw = tf.matmul(q, k, transpose_b=True)
    probs = lean_gradients.attention_probs(
        q, k, tf.constant((1.0 - allowed) * -10000.0))
    with tf.compat.v1.Session() as sess:
      got, rounded = sess.run([probs, tf.cast(raw, tf.float64)])
  scores = rounded / 8.0 + (1.0 - allowed) * -10000.0
  scores -= scores.max(-1, keepdims=True)
  want = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
  assert got.dtype == np.float32
  assert np.all(got[np.broadcast_to(allowed, got.shape) == 0] == 0.0)
  # The reference starts from the plain matmul's rounded scores; oneDNN's
  # fused matmul accumulates them in the same order.
  np.testing.assert_allclose(got, want, atol=1e-6)


def test_gelu_gradient_matches_finite_differences():
  x = np.linspace(-5, 5, 41)
  with tf.GradientTape() as tape:
    tx = tf.constant(x)
    tape.watch(tx)
    y = modeling.gelu(tx)
  got = tape.gradient(y, tx).numpy()
  eps = 1e-6
  expected = (_np_gelu(x + eps) - _np_gelu(x - eps)) / (2 * eps)
  np.testing.assert_allclose(got, expected, atol=1e-8)


def test_gelu_in_bfloat16_rounds_once():
  """bfloat16 GELU and its gradient are the float64 values rounded to
  bfloat16 once (within one bfloat16 step, plus float32's own error where
  1 + tanh cancels), not after every op."""
  x = np.linspace(-5, 5, 201)
  x16 = tf.cast(tf.constant(x, tf.float32), tf.bfloat16)
  exact_x = tf.cast(x16, tf.float64).numpy()
  with tf.GradientTape() as tape:
    tape.watch(x16)
    y16 = modeling.gelu(x16)
  grad16 = tape.gradient(y16, x16)
  eps = 1e-6
  for got, want in (
      (y16, _np_gelu(exact_x)),
      (grad16, (_np_gelu(exact_x + eps) - _np_gelu(exact_x - eps)) /
       (2 * eps))):
    assert got.dtype == tf.bfloat16
    step = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(want), 1e-30))) - 7)
    error = np.abs(tf.cast(got, tf.float64).numpy() - want)
    assert np.all(error <= step + 1e-5), np.max(error - step)


def test_layer_norm_gradient_matches_finite_differences():
  rng = np.random.RandomState(3)
  x, gamma, beta = (rng.standard_normal(shape) for shape in
                    ((2, 3, 5), (5,), (5,)))
  weights = rng.standard_normal((2, 3, 5))

  def np_loss(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(variance + 1e-12) * gamma + beta
    return np.sum(y * weights)

  tensors = [tf.constant(a) for a in (x, gamma, beta)]
  with tf.GradientTape() as tape:
    tape.watch(tensors)
    loss = tf.reduce_sum(lean_gradients.normalize(*tensors) * weights)
  got = tape.gradient(loss, tensors)
  np.testing.assert_allclose(loss.numpy(), np_loss(x, gamma, beta),
                             rtol=1e-12)
  eps = 1e-6
  arrays = [x, gamma, beta]
  for which, grad in enumerate(got):
    expected = np.zeros_like(arrays[which])
    for index in np.ndindex(expected.shape):
      plus = [a.copy() for a in arrays]
      minus = [a.copy() for a in arrays]
      plus[which][index] += eps
      minus[which][index] -= eps
      expected[index] = (np_loss(*plus) - np_loss(*minus)) / (2 * eps)
    np.testing.assert_allclose(grad.numpy(), expected, atol=1e-7)


def _dropout_graph(p=0.1):
  """x = ones [128, 256]; returns (step variable, three dropout outputs)."""
  x = tf.ones([128, 256])
  step = _add_micro_step(0)
  with tf.compat.v1.variable_scope("site"):
    first = modeling.dropout(x, p)
    again = modeling.dropout(x, p)
    named = modeling.dropout(x, p, name="other")
  return step, first, again, named


def test_dropout_mask_is_function_of_site_and_step():
  """Each call draws its own mask (a second call at the same site too); a
  call draws the same mask on every run until micro_step or global_step
  changes; the drop rate and scale are p and 1 / (1 - p)."""
  p = 0.1
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(5)
    step, first, again, named = _dropout_graph(p)
    global_step = tf.compat.v1.train.get_global_step()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      a0, b0, n0 = sess.run((first, again, named))
      a0_rerun = sess.run(first)
      sess.run(step.assign(1))
      a1 = sess.run(first)
      sess.run(global_step.assign(1))
      a2 = sess.run(first)

  np.testing.assert_array_equal(a0, a0_rerun)
  for other in (b0, n0, a1, a2):  # another call, site, micro-step, update
    assert np.mean((a0 == 0) != (other == 0)) > 0.1
  for out in (a0, b0, n0, a1, a2):
    dropped = np.mean(out == 0)
    assert abs(dropped - p) < 0.015
    kept = out[out != 0]
    np.testing.assert_allclose(kept, 1.0 / (1.0 - p), rtol=1e-6)
    assert abs(out.mean() - 1.0) < 0.02


def test_replayed_sites_draw_the_recorded_masks():
  """A block replaying a recording draws, site by site and in order, the
  masks of the recorded calls; outside it, new calls draw new masks."""
  with tf.Graph().as_default():
    x = tf.ones([64, 64])
    with tf.compat.v1.variable_scope("layer"):
      with dropout_masks.recording_sites() as recording:
        first = modeling.dropout(x, 0.2)
        second = modeling.dropout(x, 0.2)
      with dropout_masks.replaying_sites(recording):
        first_again = modeling.dropout(x, 0.2)
        second_again = modeling.dropout(x, 0.2)
      fresh = modeling.dropout(x, 0.2)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      a, b, a2, b2, c = sess.run((first, second, first_again, second_again,
                                  fresh))
  np.testing.assert_array_equal(a, a2)
  np.testing.assert_array_equal(b, b2)
  for one, other in ((a, b), (a, c), (b, c)):
    assert np.mean((one == 0) != (other == 0)) > 0.1


def test_dropout_mask_rate_and_independence_of_neighbours():
  """Each 64-bit random draw gives four 16-bit values: over 2**21 + 3 values
  (the last draw partly used) the drop rate is p and neighbours drop
  independently (both dropped with probability p**2), within 5 sigma, at
  every position within a draw and across draws."""
  p = 0.1
  size = 2**21 + 3
  with tf.Graph().as_default():
    _add_micro_step(3)
    keep = dropout_masks.keep_mask([size], p, "rate", after=[])
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      dropped = ~sess.run(keep)
  assert dropped.shape == (size,)
  assert abs(dropped.mean() - p) < 5 * np.sqrt(p * (1 - p) / size)
  both = dropped[:-1] & dropped[1:]
  for first in range(4):  # Pairs (4i + first, 4i + first + 1).
    pairs = both[first::4]
    assert abs(pairs.mean() - p * p) < 5 * np.sqrt(p * p / pairs.size)


def _np_splitmix64_finalize(z):
  """SplitMix64's output function (Steele et al. 2014), uint64 NumPy."""
  z = np.asarray(z, np.uint64)
  z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return z ^ (z >> np.uint64(31))


@pytest.mark.parametrize("offset", [0, 3, 105, 210])
def test_stateless_keep_mask_is_splitmix64_stream(offset):
  """The mask at an offset is the stream's values from that position on:
  value n is the 16-bit part n % 4 of SplitMix64 output n // 4 + 1 (an
  offset of 3 starts in the last part of the first output; 105 and 210
  are where a second and third tensor of this shape would start)."""
  gamma = np.uint64(0x9E3779B97F4A7C15)
  with np.errstate(over="ignore"):
    # The published first output of SplitMix64 seeded with 0.
    assert int(_np_splitmix64_finalize(gamma)) == 0xE220A8397B1DCDAF
    seed = np.array([(5 << 32) | 0x1234ABCD, 17], np.int64)
    words = seed.view(np.uint64)
    key = _np_splitmix64_finalize(words[0] ^ _np_splitmix64_finalize(words[1]))
    shape = (3, 5, 7)  # 105 values: 27 draws, the last one partly used.
    draws = _np_splitmix64_finalize(
        key + np.arange(1, 28 + offset // 4 + 1, dtype=np.uint64) * gamma)
  values = draws.astype("<u8").view("<u2")[offset:offset + 105].reshape(shape)
  with tf.Graph().as_default():
    keep = xla_kernels.keep_mask_16bit(
        tf.constant(shape, tf.int64), tf.constant(seed),
        tf.constant(6554, tf.uint16), tf.constant(offset, tf.int64))
    with tf.compat.v1.Session() as sess:
      got = sess.run(keep)
  np.testing.assert_array_equal(got, values >= 6554)
  assert 0 < (~got).sum() < 30


def test_dropout_mask_depends_on_graph_seed():
  masks = []
  for seed in (5, 6):
    with tf.Graph().as_default():
      tf.compat.v1.set_random_seed(seed)
      _, first, _, _ = _dropout_graph()
      with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        masks.append(sess.run(first) == 0)
  assert np.mean(masks[0] != masks[1]) > 0.1


def test_stateless_dropout_with_a_batch_size_known_only_at_run_time():
  """The compiled mask kernel takes its shape at run time: each batch size
  gets a mask of its own shape, the smaller one the start of the larger's
  stream (same site, same step)."""
  with tf.Graph().as_default():
    _add_micro_step(2)
    x = tf.compat.v1.placeholder(tf.float32, [None, 256])
    y = modeling.dropout(x, 0.25)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      small, large = (sess.run(y, {x: np.ones((n, 256), np.float32)})
                      for n in (3, 40))
  assert small.shape == (3, 256) and large.shape == (40, 256)
  np.testing.assert_array_equal(small, large[:3])
  assert abs(np.mean(large == 0) - 0.25) < 0.03


def test_dropout_makes_its_step_counters_at_the_root():
  """Without counters, a dropout call (here inside a variable scope) makes
  global_step and micro_step at the graph's root, one mask kernel call, and
  its masks change with the global step (an optimizer's update)."""
  with tf.Graph().as_default():
    with tf.compat.v1.variable_scope("head"):
      y = modeling.dropout(tf.ones([64, 128]), 0.2)
    assert _num_stateless_mask_draws(tf.compat.v1.get_default_graph()) == 1
    names = sorted(v.op.name for v in tf.compat.v1.global_variables())
    assert names == ["global_step", "micro_step"]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      first, first_again = sess.run(y), sess.run(y)
      sess.run(tf.compat.v1.train.get_global_step().assign(1))
      second = sess.run(y)
  np.testing.assert_array_equal(first, first_again)
  assert np.mean((first == 0) != (second == 0)) > 0.1
  assert abs(np.mean(first == 0) - 0.2) < 0.03


def test_dropout_zero_is_identity_and_bad_prob_rejected():
  with tf.Graph().as_default():
    x = tf.ones([3, 4])
    assert modeling.dropout(x, 0.0) is x
    assert modeling.dropout(x, None) is x
    with pytest.raises(ValueError, match="hidden_dropout_prob"):
      modeling.dropout(x, 1.0)


@pytest.mark.parametrize("dtype,checkpointing",
                         [(tf.bfloat16, False), (tf.float16, True)])
def test_reduced_precision_close_to_float32(dtype, checkpointing):
  cfg = _tiny_config()
  arrays = _random_weights(cfg, seed=2)
  for name in arrays:
    if "kernel" in name:
      arrays[name] *= 0.5
  with tf.Graph().as_default():
    inputs = dict(input_ids=tf.constant(IDS), input_mask=tf.constant(MASK),
                  token_type_ids=tf.constant(TYPES))
    full = modeling.BertModel(cfg, is_training=False, scope="bert", **inputs)
    num_vars = len(tf.compat.v1.global_variables())
    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                     reuse=True):
      low = modeling.BertModel(cfg, is_training=False, scope="bert",
                               compute_dtype=dtype,
                               gradient_checkpointing=checkpointing,
                               **inputs)
    tvars = tf.compat.v1.trainable_variables()
    assert len(tf.compat.v1.global_variables()) == num_vars
    assert all(v.dtype.base_dtype == tf.float32 for v in tvars)
    outputs = [low.get_sequence_output(), low.get_pooled_output(),
               low.get_embedding_output()] + low.get_all_encoder_layers()
    assert all(t.dtype == dtype for t in outputs)
    loss = tf.reduce_sum(tf.cast(low.get_pooled_output(), tf.float32))
    grads = tf.gradients(loss, tvars)
    assert all(g is not None and g.dtype == tf.float32 for g in grads)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, arrays)
      ref, got = sess.run(((full.get_sequence_output(),
                            full.get_pooled_output()),
                           (tf.cast(low.get_sequence_output(), tf.float32),
                            tf.cast(low.get_pooled_output(), tf.float32))))
      grad_values = sess.run([tf.convert_to_tensor(g) for g in grads])
  for want, have in zip(ref, got):
    assert np.abs(have - want).max() <= 3e-2 * np.abs(want).max()
  assert all(np.all(np.isfinite(g)) for g in grad_values)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16, tf.float32])
def test_dense_bias_gradient_is_the_rounded_sum(dtype):
  """The bias gradient of a reduced-precision `dense` is the float64 sum of
  the incoming gradient's rows, to the dtype's precision (TensorFlow's own
  bfloat16 BiasAddGrad sums in bfloat16: 9% of the largest sum off here)."""
  rng = np.random.RandomState(3)
  output_grad = rng.randn(1024, 48).astype(np.float32)
  with tf.Graph().as_default():
    x = tf.cast(tf.constant(rng.randn(1024, 8).astype(np.float32)), dtype)
    out = modeling.dense(x, 48, "layer")
    grad_ys = tf.cast(tf.constant(output_grad), dtype)
    bias = tf.compat.v1.trainable_variables("layer/bias")[0]
    bias_grad = tf.gradients(out, bias, grad_ys=grad_ys)[0]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      got, rounded_grad = sess.run((bias_grad, tf.cast(grad_ys, tf.float64)))
  want = rounded_grad.sum(axis=0)
  # At most a unit in the last place of the largest sum: 2**-7 (bf16) or
  # 2**-10 (fp16) of it; float32 sums in some order, 1e-5.
  ulp = {tf.bfloat16: 2.0**-7, tf.float16: 2.0**-10, tf.float32: 1e-5}[dtype]
  assert np.abs(got - want).max() <= ulp * np.abs(want).max()


def test_compute_dtype_rejects_others():
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match="compute_dtype"):
      modeling.BertModel(_tiny_config(), False, tf.constant(IDS),
                         compute_dtype=tf.float64)


def test_eval_mode_copies_config_and_disables_dropout():
  cfg = _tiny_config()
  with tf.Graph().as_default() as graph:
    _add_micro_step(0)
    modeling.BertModel(cfg, is_training=False, input_ids=tf.constant(IDS))
    assert not any("RandomUniform" in op.type
                   for op in graph.get_operations())
  assert cfg.hidden_dropout_prob == 0.1
  assert cfg.attention_probs_dropout_prob == 0.1


def test_gelu_and_activations():
  x = np.linspace(-4, 4, 17).astype(np.float32)
  got = modeling.gelu(tf.constant(x)).numpy()
  np.testing.assert_allclose(got, _np_gelu(x.astype(np.float64)), atol=1e-6)
  # Evaluation graphs use the form grappler fuses into the matmul: same
  # formula.
  fusable = modeling._fusable_gelu(tf.constant(x)).numpy()
  np.testing.assert_allclose(fusable, _np_gelu(x.astype(np.float64)),
                             atol=1e-6)
  assert modeling._activation("gelu", is_training=False) is (
      modeling._fusable_gelu)
  assert modeling._activation("gelu", is_training=True) is modeling.gelu
  assert modeling._activation("relu", is_training=False) is tf.nn.relu
  assert modeling.get_activation("gelu") is modeling.gelu
  assert modeling.get_activation("relu") is tf.nn.relu
  assert modeling.get_activation("linear") is None
  assert modeling.get_activation(None) is None
  assert modeling.get_activation(tf.tanh) is tf.tanh
  with pytest.raises(ValueError, match="hidden_act"):
    modeling.get_activation("swish7")


def test_exact_gelu_is_the_erf_form():
  x = np.linspace(-5, 5, 41)
  reference = np.array([v * (1.0 + math.erf(v / math.sqrt(2.0))) / 2.0
                        for v in x])
  assert modeling.get_activation("gelu_exact") is modeling.gelu_exact
  got = modeling.gelu_exact(tf.constant(x, tf.float32)).numpy()
  np.testing.assert_allclose(got, reference, rtol=1e-6, atol=1e-6)
  # It is a different function from Google's "gelu" (the tanh form).
  approximate = modeling.gelu(tf.constant(x, tf.float32)).numpy()
  assert 1e-4 < np.max(np.abs(approximate - reference)) < 1e-2


def test_config_round_trip(tmp_path):
  cfg = _tiny_config(hidden_act="relu", hidden_dropout_prob=0.2)
  path = tmp_path / "bert_config.json"
  path.write_text(cfg.to_json_string())
  loaded = modeling.BertConfig.from_json_file(str(path))
  assert loaded.to_dict() == cfg.to_dict()
  assert json.loads(cfg.to_json_string()) == dict(
      TINY, hidden_act="relu", hidden_dropout_prob=0.2,
      attention_probs_dropout_prob=0.1, initializer_range=0.02)
  assert modeling.BertConfig.from_dict(cfg.to_dict()).hidden_size == 32
  defaults = modeling.BertConfig(vocab_size=10)
  assert (defaults.hidden_size, defaults.num_hidden_layers,
          defaults.type_vocab_size) == (768, 12, 16)


def test_config_errors_name_file_and_flag(tmp_path):
  missing = str(tmp_path / "missing.json")
  with pytest.raises(FileNotFoundError) as info:
    modeling.BertConfig.from_json_file(missing)
  assert missing in str(info.value)
  assert "--bert_config_file" in str(info.value)
  bad = tmp_path / "bad.json"
  bad.write_text("{\"vocab_size\": 10,")
  with pytest.raises(ValueError, match="--bert_config_file") as info:
    modeling.BertConfig.from_json_file(str(bad))
  assert str(bad) in str(info.value)


def test_config_with_a_misspelt_key_names_it_and_the_key_meant(tmp_path):
  """A misspelt key is named (with the key it hides) rather than reported
  as that key missing, and the file is named once."""
  path = tmp_path / "bert_config.json"
  config = modeling.BertConfig(vocab_size=10).to_dict()
  config["hiden_size"] = config.pop("hidden_size")
  path.write_text(json.dumps(config))
  with pytest.raises(ValueError) as info:
    modeling.BertConfig.from_json_file(str(path))
  assert str(info.value) == (
      "--bert_config_file=%s has the unknown key 'hiden_size'; did you mean "
      "'hidden_size'?" % path)


def test_shape_helpers():
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 5, 7])
    shape = modeling.get_shape_list(x, expected_rank=3)
    assert isinstance(shape[0], tf.Tensor) and shape[1:] == [5, 7]
    matrix = modeling.reshape_to_matrix(x)
    assert matrix.shape.as_list() == [None, 7]
    back = modeling.reshape_from_matrix(matrix, shape)
    assert back.shape.as_list()[1:] == [5, 7]
    with pytest.raises(ValueError, match="expected rank"):
      modeling.assert_rank(x, 2)
    mask_3d = tf.ones([2, 5, 5])
    with pytest.raises(ValueError, match="not both"):
      modeling.attention_layer(
          x, x, mask_3d, size_per_head=7,
          attention_bias=modeling.attention_bias_from_mask(mask_3d))
    mask = modeling.create_attention_mask_from_input_mask(
        tf.constant(IDS), tf.constant(MASK))
    with tf.compat.v1.Session() as sess:
      value = sess.run(mask)
  np.testing.assert_array_equal(
      value, np.broadcast_to(MASK[:, None, :], (2, 10, 10)))


# ---------------------------------------------------------------------------
# skip_padding: the feed-forward layers on the non-padding positions alone.

# Four examples: full, padded after 7, padded after 3, and all padding (as
# the examples that fill up a last batch are).
PADDED_IDS = np.concatenate([IDS, IDS[1:] * 0 + 5, IDS[1:] * 0], 0)
PADDED_MASK = np.array([[1] * 10, [1] * 7 + [0] * 3, [1] * 3 + [0] * 7,
                        [0] * 10], np.int32)
PADDED_IDS[2, :3] = [2, 17, 3]
PADDED_TYPES = np.concatenate([TYPES, np.zeros((2, 10), np.int32)], 0)
REAL_EXAMPLES = 3


def test_skip_padding_matches_numpy_rederivation():
  """The pooled output and the layers at real positions are the model's;
  the layers are 0 at padding positions. The all-padding example is
  computed whole, as the model does."""
  cfg = _tiny_config()
  arrays = _random_weights(cfg, seed=3)
  layers, pooled = _run_tiny(arrays, ids=PADDED_IDS, mask=PADDED_MASK,
                             types=PADDED_TYPES, skip_padding=True)
  ref_layers, ref_pooled = _np_bert(arrays, cfg, PADDED_IDS, PADDED_MASK,
                                    PADDED_TYPES)
  real = PADDED_MASK[:REAL_EXAMPLES, :, None] == 1
  for got, want in zip(layers, ref_layers):
    got, want = got[:REAL_EXAMPLES], want[:REAL_EXAMPLES]
    np.testing.assert_allclose(np.where(real, got, 0.0),
                               np.where(real, want, 0.0), atol=1e-5, rtol=0)
    assert not got[~np.broadcast_to(real, got.shape)].any()
  np.testing.assert_allclose(pooled[:REAL_EXAMPLES],
                             ref_pooled[:REAL_EXAMPLES], atol=1e-5, rtol=0)
  # The all-padding example against the model without skip_padding: every
  # score is off by -10000 there, so float32 rounds the scores to ~1e-3,
  # which the float64 reference does not.
  all_layers, all_pooled = _run_tiny(arrays, ids=PADDED_IDS,
                                     mask=PADDED_MASK, types=PADDED_TYPES)
  np.testing.assert_allclose(pooled[REAL_EXAMPLES:],
                             all_pooled[REAL_EXAMPLES:], atol=1e-6, rtol=0)
  for got, want in zip(layers, all_layers):
    np.testing.assert_allclose(got[REAL_EXAMPLES:], want[REAL_EXAMPLES:],
                               atol=1e-6, rtol=0)


def _rounded_rows(n):
  """n rounded up to a multiple of max(16, 2 ** (floor(log2(n)) - 5))."""
  step = max(16, 2 ** (n.bit_length() - 1 - 5))
  return -(-n // step) * step


def test_row_counts_round_to_few_shapes_and_little_more_work():
  counts = list(range(1, 5000)) + [2**20 - 1, 2**20, 2**20 + 1, 3 * 2**33]
  with tf.Graph().as_default():
    n = tf.compat.v1.placeholder(tf.int64, [])
    rounded = padding_layout.bucketed_rows(n)
    with tf.compat.v1.Session() as sess:
      got = [sess.run(rounded, {n: count}) for count in counts]
  assert got == [_rounded_rows(count) for count in counts]
  assert all(count <= r < count + 16 or r <= count * 1.032
             for count, r in zip(counts, got))
  # 32 shapes per doubling of the count: 2049 to 4096 real tokens (up to
  # BERT's batch of 32 x 128 positions) compile 32 shapes, not 2048.
  assert len(set(got[2048:4096])) == 32


def test_skip_padding_runs_the_feed_forward_on_real_tokens_only():
  """Every encoder matmul but attention's own has one row per real token
  and per position of the all-padding example, 10 + 7 + 3 + 10 rows,
  rounded up to 32 (bucketed_rows): not 4 * 10."""
  with tf.Graph().as_default() as graph:
    model = modeling.BertModel(
        _tiny_config(), is_training=False,
        input_ids=tf.constant(PADDED_IDS),
        input_mask=tf.constant(PADDED_MASK),
        token_type_ids=tf.constant(PADDED_TYPES), skip_padding=True)
    matmuls = [op.outputs[0] for op in graph.get_operations()
               if op.type == "MatMul" and
               op.name.startswith("bert/encoder/layer_0/")]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      shapes = [value.shape for value in
                sess.run(matmuls + [model.get_pooled_output()])]
  # query, key, value, attention output, intermediate, output
  assert len(matmuls) == 6
  assert all(shape[0] == _rounded_rows(30) == 32 for shape in shapes[:-1]), (
      shapes)
  assert shapes[-1] == (4, 32)


def _skip_padding_gradients(skip_padding, gradient_checkpointing,
                            compute_dtype=tf.float32,
                            keep_activations_up_to=384):
  """Training-mode (dropout 0.1) pooled output and gradients of a loss on it
  and on the last layer's real positions, for the padded batch."""
  cfg = _tiny_config()
  with tf.Graph().as_default():
    model = _training_model(
        cfg, gradient_checkpointing, 77, 5, PADDED_IDS, PADDED_MASK,
        PADDED_TYPES, compute_dtype=compute_dtype, skip_padding=skip_padding,
        keep_activations_up_to=keep_activations_up_to)
    rng = np.random.RandomState(8)
    # The positions that are rows: the real ones, and all of the last
    # example's (all padding).
    rows = np.maximum(PADDED_MASK, np.arange(4)[:, None] >= REAL_EXAMPLES)
    pooled = tf.cast(model.get_pooled_output(), tf.float32)
    loss = (tf.reduce_sum(tf.cast(model.get_sequence_output(), tf.float32) *
                          rng.randn(4, 10, 32).astype(np.float32) *
                          rows[:, :, None].astype(np.float32)) +
            tf.reduce_sum(pooled * rng.randn(4, 32).astype(np.float32)))
    tvars = tf.compat.v1.trainable_variables()
    grads = [tf.convert_to_tensor(g) for g in tf.gradients(loss, tvars)]
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, _random_weights(cfg, seed=9))
      return sess.run([pooled] + grads), [v.op.name for v in tvars]


@pytest.mark.parametrize("checkpointing,keep", [(False, 384), (True, 384),
                                               (True, 0)])
def test_skip_padding_gives_the_same_gradients_with_dropout(checkpointing,
                                                            keep):
  """Dropout 0.1 on: same masks, so the same pooled output and gradients
  (the loss reads the positions that are rows: padding positions differ).
  With keep 0 a recomputed layer's feed-forward runs over groups of rows
  whose number is known only when the graph runs."""
  (pooled, *grads), names = _skip_padding_gradients(
      False, checkpointing, keep_activations_up_to=keep)
  (skip_pooled, *skip_grads), _ = _skip_padding_gradients(
      True, checkpointing, keep_activations_up_to=keep)
  np.testing.assert_allclose(skip_pooled, pooled, atol=1e-6, rtol=0)
  for name, a, b in zip(names, grads, skip_grads):
    assert np.abs(a).max() > 0, name
    np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-5, err_msg=name)
  # Dropout was on: an eval-mode pass gives another pooled output.
  cfg = _tiny_config()
  _, eval_pooled = _run_tiny(_random_weights(cfg, seed=9), ids=PADDED_IDS,
                             mask=PADDED_MASK, types=PADDED_TYPES)
  assert np.abs(eval_pooled - pooled).max() > 1e-3


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_skip_padding_in_reduced_precision(dtype):
  """Gather and scatter keep the compute dtype, so both runs round the same
  values in the same dtype: the pooled outputs differ at most where a
  float32 sum over the gathered rows, taken in another order, rounds to the
  neighbouring value. Bounded by 4 roundings of what the pooler sums,
  |kernel|^T |h| + |bias| for the final [CLS] vectors h (tests/rounding.py)."""
  (pooled, *_), _ = _skip_padding_gradients(False, False, dtype)
  (skip_pooled, *_), _ = _skip_padding_gradients(True, False, dtype)
  cfg = _tiny_config()
  arrays = _random_weights(cfg, seed=9)
  with tf.Graph().as_default() as graph:
    model = _training_model(
        cfg, False, 77, 5, PADDED_IDS, PADDED_MASK, PADDED_TYPES,
        compute_dtype=dtype, skip_padding=True)
    moved = {op.outputs[0].dtype for op in graph.get_operations()
             if op.type in ("GatherV2", "ScatterNd", "GatherNd")
             and "encoder" in op.name and op.outputs[0].dtype.is_floating}
    first = tf.cast(model.get_sequence_output()[:, 0], tf.float64)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, arrays)
      cls_vectors = sess.run(first)
  assert moved == {dtype}, moved
  magnitude = rounding.dense_magnitude(np.abs(cls_vectors),
                                       arrays["bert/pooler/dense/kernel"],
                                       arrays["bert/pooler/dense/bias"])
  rounding.assert_within_rounding(skip_pooled, pooled, magnitude, dtype, 4,
                                  "pooled output")


def test_skip_padding_with_a_batch_size_known_only_at_run_time():
  cfg = _tiny_config()
  arrays = _random_weights(cfg, seed=3)
  with tf.Graph().as_default():
    ids, mask, types = (tf.compat.v1.placeholder(tf.int32, [None, 10])
                        for _ in range(3))
    model = modeling.BertModel(cfg, is_training=False, input_ids=ids,
                               input_mask=mask, token_type_ids=types,
                               skip_padding=True)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      _assign(sess, arrays)
      pooled = sess.run(model.get_pooled_output(), {
          ids: PADDED_IDS, mask: PADDED_MASK, types: PADDED_TYPES})
  _, ref_pooled = _np_bert(arrays, cfg, PADDED_IDS, PADDED_MASK, PADDED_TYPES)
  np.testing.assert_allclose(pooled[:REAL_EXAMPLES],
                             ref_pooled[:REAL_EXAMPLES], atol=1e-5, rtol=0)


def test_library_path_draws_new_masks_for_each_micro_batch():
  """BertModel + optimization.create_optimizer with accumulation in a plain
  Session (no runner): the two micro-batches of one update, and the next
  update, draw different dropout masks (read here at the embeddings)."""
  import optimization  # pylint: disable=import-outside-toplevel
  cfg = _tiny_config()
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(3)
    model = modeling.BertModel(cfg, is_training=True,
                               input_ids=tf.constant(IDS),
                               input_mask=tf.constant(MASK))
    loss = tf.reduce_mean(tf.square(model.get_pooled_output()))
    train_op = optimization.create_optimizer(loss, 1e-3, 10, 0,
                                             num_accumulation_steps=2)
    with tf.control_dependencies([train_op]):
      step = tf.identity(tf.compat.v1.train.get_global_step())
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      runs = [sess.run((model.get_embedding_output(), step))
              for _ in range(3)]
  dropped = [output == 0 for output, _ in runs]
  assert [int(global_step) for _, global_step in runs] == [0, 1, 1]
  for i, j in ((0, 1), (1, 2), (0, 2)):
    assert np.mean(dropped[i] != dropped[j]) > 0.05


@pytest.mark.parametrize("gradient_checkpointing,keep_activations_up_to",
                         [(False, 384), (True, 384), (True, 0)])
def test_forward_masks_wait_for_their_layer(gradient_checkpointing,
                                            keep_activations_up_to):
  """A mask drawn from nothing but its seed could run when the step starts
  and stay alive until its layer comes: every forward draw of layer 1 must
  come after layer 0's output, and the embeddings' after the word lookup."""
  with tf.Graph().as_default() as graph:
    _training_model(_tiny_config(), gradient_checkpointing, 1, 0,
                    keep_activations_up_to=keep_activations_up_to)
    draws = [op for op in _mask_draws(graph)
             if not op.name.startswith("gradients")]
  by_scope = {"bert/embeddings/": "bert/embeddings/word_embeddings",
              "bert/encoder/layer_1/": "bert/encoder/layer_0/output/"}
  for scope, earlier in by_scope.items():
    in_scope = [op for op in draws if op.name.startswith(scope)]
    assert in_scope, scope
    for op in in_scope:
      assert any(name.startswith(earlier) for name in _ancestor_names(op)), (
          op.name)


def test_constant_mask_becomes_one_constant_of_the_session():
  """With constant inputs, grappler folds the attention bias [B, 1, S, S]
  into a constant that the session keeps for good. Made inside each layer,
  every recomputed layer's gradient had its own folded copy (24 for
  BERT-Large, 8 MiB each at batch 8, 512 tokens); made once, there is one."""
  cfg = _tiny_config(num_hidden_layers=4)
  with tf.Graph().as_default():
    model = _training_model(cfg, True, 1, 0)
    loss = tf.reduce_sum(tf.square(model.get_sequence_output()))
    train = tf.group(tf.compat.v1.train.GradientDescentOptimizer(0.1)
                     .minimize(loss))
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(train, run_metadata=metadata,
               options=tf.compat.v1.RunOptions(output_partition_graphs=True))
  batch, seq = IDS.shape
  bias_shape = [batch, 1, seq, seq]
  folded = [node.name for graph in metadata.partition_graphs
            for node in graph.node if node.op == "Const" and
            [d.size for d in node.attr["value"].tensor.tensor_shape.dim]
            == bias_shape]
  assert len(folded) <= 1, folded


def test_saving_after_a_step_does_not_copy_the_word_embeddings(tmp_path):
  """A gather on the table variable itself would put it in copy-on-read
  mode, and the Saver's read of it would then copy all its rows (120 MiB
  for BERT's vocabulary). The trace of the save lists what it allocated.
  (Optimizers that update rows in place, like plain SGD's scatter, switch
  the mode on themselves; create_optimizer's update is dense.)"""
  cfg = _tiny_config(vocab_size=4096)
  with tf.Graph().as_default():
    model = _training_model(cfg, False, 1, 0)
    loss = tf.reduce_sum(tf.square(model.get_pooled_output()))
    grads = tf.gradients(loss, [model.get_embedding_table()])
    assert isinstance(grads[0], tf.IndexedSlices)
    train = optimization.create_optimizer(loss, 1e-3, 10, 1)
    saver = tf.compat.v1.train.Saver()
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(train)
      sess.run(saver.saver_def.save_tensor_name,
               {saver.saver_def.filename_tensor_name: str(tmp_path / "ckpt")},
               options=tf.compat.v1.RunOptions(
                   trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
               run_metadata=metadata)
  table_bytes = 4096 * cfg.hidden_size * 4
  allocated = {node.node_name: record.alloc_bytes
               for device in metadata.step_stats.dev_stats
               for node in device.node_stats for memory in node.memory
               for record in memory.allocation_records
               if record.alloc_bytes >= table_bytes}
  assert not allocated, allocated


def test_towers_sharing_weights_draw_their_own_masks():
  cfg = _tiny_config()
  with tf.Graph().as_default():
    towers = [modeling.BertModel(cfg, is_training=True,
                                 input_ids=tf.constant(IDS), scope="bert")]
    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                     reuse=True):
      towers.append(modeling.BertModel(cfg, is_training=True,
                                       input_ids=tf.constant(IDS),
                                       scope="bert"))
    assert len(tf.compat.v1.trainable_variables()) == 5 + 16 * 2 + 2
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      first, second = sess.run([t.get_embedding_output() for t in towers])
  assert np.mean((first == 0) != (second == 0)) > 0.05
