"""Tests for run_pretraining.py.

Google's heads and losses against a NumPy re-derivation, the eval metrics
of the real script against NumPy on hand-made records and a hand-made
checkpoint, Google's variable names, checkpoints with and without the
heads, the input order, and a run killed with SIGKILL that resumes to the
weights of an uninterrupted one. Bad input is in tests/test_bad_inputs.py.
"""
import hashlib
import json
import logging as std_logging
import os
import re
import signal

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from checkpoints import checkpoint_checks
from corpus import record_sidecars
from userio import cli
import conftest
from runner import estimator
from memory import memory_model
from memory import memory_settings
import modeling
import pretraining_records
import run_pretraining
from tasks import pretraining
import rounding
import test_modeling
from userio import units

pytestmark = pytest.mark.slow

CONFIG = dict(test_modeling.TINY, hidden_act="gelu", hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1, initializer_range=0.02)
TIMEOUT = 600


def _config(**changes):
  return modeling.BertConfig(**dict(CONFIG, **changes))


def _googles_heads(config):
  """Google's pretraining head variables, written out by hand."""
  h, v = config.hidden_size, config.vocab_size
  return {
      "cls/predictions/transform/dense/kernel": [h, h],
      "cls/predictions/transform/dense/bias": [h],
      "cls/predictions/transform/LayerNorm/beta": [h],
      "cls/predictions/transform/LayerNorm/gamma": [h],
      "cls/predictions/output_bias": [v],
      "cls/seq_relationship/output_weights": [2, h],
      "cls/seq_relationship/output_bias": [2],
  }


def _head_weights(config, seed):
  """Random values for the heads' variables, away from their initial ones."""
  rng = np.random.RandomState(seed)
  arrays = {}
  for name, shape in _googles_heads(config).items():
    if name.endswith("gamma"):
      value = 1.0 + 0.2 * rng.randn(*shape)
    elif name.endswith("beta") or name.endswith("bias"):
      value = 0.3 * rng.randn(*shape)
    else:
      value = 0.4 * rng.randn(*shape)
    arrays[name] = value.astype(np.float32)
  return arrays


def _np_log_softmax(logits):
  shifted = logits - logits.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _np_masked_lm(w, sequence_output, positions):
  """Log-probabilities [batch, predictions, vocab] of Google's masked-LM
  head: transform (dense, GELU, LayerNorm), then the word embeddings."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  rows = np.asarray(sequence_output, np.float64)[
      np.arange(len(positions))[:, None], positions]
  rows = test_modeling._np_gelu(test_modeling._np_dense(
      rows, w, "cls/predictions/transform/dense"))
  rows = test_modeling._np_layer_norm(rows, w,
                                      "cls/predictions/transform/LayerNorm")
  logits = (rows @ w["bert/embeddings/word_embeddings"].T +
            w["cls/predictions/output_bias"])
  return _np_log_softmax(logits), rows


def _np_next_sentence(w, pooled):
  """Log-probabilities [batch, 2] of Google's next-sentence head."""
  logits = (np.asarray(pooled, np.float64) @
            np.asarray(w["cls/seq_relationship/output_weights"],
                       np.float64).T +
            w["cls/seq_relationship/output_bias"])
  return _np_log_softmax(logits)


def _np_masked_lm_loss(log_probs, labels, weights):
  """Google's loss: weighted sum of -log p(label) / (sum of weights + 1e-5)."""
  per_position = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
  return (weights * per_position).sum() / (weights.sum() + 1e-5), per_position


# Google's run_pretraining.py flags and their defaults, listed by hand.
GOOGLE_FLAGS = {
    "bert_config_file": None, "input_file": None, "output_dir": None,
    "init_checkpoint": None, "max_seq_length": 128,
    "max_predictions_per_seq": 20, "do_train": False, "do_eval": False,
    "train_batch_size": 32, "eval_batch_size": 8, "learning_rate": 5e-5,
    "num_train_steps": 100000, "num_warmup_steps": 10000,
    "save_checkpoints_steps": 1000, "iterations_per_loop": 1000,
    "max_eval_steps": 100, "use_tpu": False, "tpu_name": None,
    "tpu_zone": None, "gcp_project": None, "master": None,
    "num_tpu_cores": 8,
}


def test_flags_have_googles_names_and_defaults():
  flag_values = flags.FlagValues()
  run_pretraining.define_flags(flag_values)
  got = {name: flag_values[name].default for name in GOOGLE_FLAGS}
  assert got == GOOGLE_FLAGS


# --------------------------------------------------------------- the heads


def _build_eval_graph(config, batch_size, seq_length, predictions):
  """model_fn's EVAL graph on placeholders; returns the features."""
  features = {name: tf.compat.v1.placeholder(
      tf.float32 if spec.dtype == tf.float32 else tf.int32,
      [batch_size] + list(spec.shape), name=name)
              for name, spec in pretraining.record_features(
                  seq_length, predictions).items()}
  model_fn = run_pretraining.model_fn_builder(
      config, None, 1e-4, 10, 1, False, False)
  tf.compat.v1.train.get_or_create_global_step()
  return model_fn(features, None, estimator.ModeKeys.EVAL, {})


def test_heads_have_googles_names_and_shapes():
  config = _config()
  with tf.Graph().as_default():
    _build_eval_graph(config, 2, 16, 4)
    shapes = {v.op.name: v.shape.as_list()
              for v in tf.compat.v1.trainable_variables()}
  heads = {name: shape for name, shape in shapes.items()
           if name.startswith("cls/")}
  assert heads == _googles_heads(config)
  encoder = {name: shape for name, shape in shapes.items()
             if not name.startswith("cls/")}
  assert encoder == test_modeling._google_variable_shapes(config)
  # The set-up's list of allowed fresh variables is the same set.
  assert dict(checkpoint_checks.pretraining_head_shapes(config)) == (
      _googles_heads(config))


def _masked_lm_case(config, seed):
  rng = np.random.RandomState(seed)
  sequence_output = rng.randn(2, 6, config.hidden_size).astype(np.float32)
  table = (0.5 * rng.randn(config.vocab_size, config.hidden_size)).astype(
      np.float32)
  positions = np.array([[1, 4, 0], [5, 0, 0]], np.int32)
  labels = np.array([[7, 30, 0], [98, 0, 0]], np.int32)
  return sequence_output, table, positions, labels


def _masked_lm_error_bounds(w, sequence_output, positions, labels,
                            coefficient, dtype):
  """Running error bounds (tests/rounding.py) of the masked-LM head in
  `dtype`: its log-probabilities [positions, vocab], per-position losses,
  loss and word-embedding gradient, against the float64 head evaluated on
  the same inputs and weights rounded to `dtype`.

  Every op of the head rounds its output to `dtype` once (u |output|, its
  float32 sum adding at most 2^-24 of the magnitude summed), and passes the
  errors before it on with its absolute derivative: GELU's slope is at most
  1.13, LayerNorm divides by the row's spread (rounding.layer_norm_bound),
  a matmul multiplies by the absolute other factor, and log-softmax adds
  the row's largest logit error.

  Returns:
    (the exact values on rounded weights: log-probabilities, per-position
     loss, loss, gradient; and their four bounds).
  """
  u, u32 = rounding.unit_roundoff(dtype), rounding.unit_roundoff("float32")
  prefix = "cls/predictions/transform/"
  narrow = {k: rounding.rounded(v, dtype) for k, v in w.items()
            if k != "cls/predictions/output_bias" and "LayerNorm" not in k}
  w = dict(w, **narrow)
  rows = np.asarray(sequence_output, np.float64)[
      np.arange(len(positions))[:, None], positions].reshape(
          -1, sequence_output.shape[-1])
  kernel, table = w[prefix + "dense/kernel"], w[
      "bert/embeddings/word_embeddings"]
  product = rows @ kernel
  pre = product + w[prefix + "dense/bias"]
  pre_error = (u * np.abs(product) + u32 * (np.abs(rows) @ np.abs(kernel)) +
               u * np.abs(pre))
  activation = test_modeling._np_gelu(pre)
  activation_error = 1.13 * pre_error + u * np.abs(activation)
  gamma, beta = w[prefix + "LayerNorm/gamma"], w[prefix + "LayerNorm/beta"]
  transformed = test_modeling._np_layer_norm(
      activation, w, prefix + "LayerNorm")
  transformed_error = (rounding.layer_norm_bound(activation, activation_error,
                                                 gamma) +
                       u * np.abs(transformed))
  unbiased = transformed @ table.T
  logits_error = (transformed_error @ np.abs(table).T + u * np.abs(unbiased) +
                  u32 * (np.abs(transformed) @ np.abs(table).T))
  log_probs = _np_log_softmax(
      unbiased + w["cls/predictions/output_bias"])
  log_probs_error = logits_error + logits_error.max(-1, keepdims=True)
  index = np.arange(len(labels))
  per_position = -log_probs[index, labels]
  per_position_error = log_probs_error[index, labels]
  loss = (coefficient * per_position).sum()
  loss_error = (np.abs(coefficient) * per_position_error).sum()
  # d loss / d table = sum_i c_i (softmax_i - onehot_i) transformed_i; the
  # probabilities move by at most p times the log-probabilities' error.
  probs = np.exp(log_probs)
  logits_grad = coefficient[:, None] * probs
  logits_grad[index, labels] -= coefficient
  logits_grad_error = (np.abs(coefficient)[:, None] * probs * log_probs_error
                       + u * np.abs(logits_grad))
  gradient = logits_grad.T @ transformed
  gradient_error = (logits_grad_error.T @ np.abs(transformed) +
                    np.abs(logits_grad).T @ transformed_error +
                    u * np.abs(gradient))
  return ((log_probs, per_position, loss, gradient),
          (log_probs_error, per_position_error, loss_error, gradient_error))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("weights", [
    [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]],   # two padding slots
    [[1e-4, 0.0, 0.0], [0.0, 0.0, 0.0]],  # the 1e-5 is 9% of the sum
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],   # nothing masked: loss 0
])
def test_masked_lm_loss_matches_numpy(weights, dtype):
  """Loss, per-position loss, log-probabilities and the gradient of the
  word embeddings, which are the head's output projection (tied), for an
  encoder output in float32 and in bfloat16 (whose matmuls the head then
  runs in bfloat16)."""
  config = _config()
  sequence_output, table, positions, labels = _masked_lm_case(config, 1)
  weights = np.array(weights, np.float32)
  arrays = _head_weights(config, 2)
  with tf.Graph().as_default() as graph:
    embeddings = tf.compat.v1.get_variable(
        "bert/embeddings/word_embeddings", initializer=table)
    loss, per_position, log_probs = run_pretraining.get_masked_lm_output(
        config, tf.cast(tf.constant(sequence_output), dtype),
        embeddings, tf.constant(positions), tf.constant(labels),
        tf.constant(weights))
    (table_gradient,) = tf.gradients(loss, [embeddings])
    matmul_dtypes = {op.get_attr("T") for op in graph.get_operations()
                     if op.type == "MatMul" and
                     op.name.startswith("cls/predictions/")}
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      test_modeling._assign(sess, arrays)
      got = sess.run((loss, per_position, log_probs,
                      tf.convert_to_tensor(table_gradient)))
  assert matmul_dtypes == {tf.as_dtype(dtype)}
  assert got[2].dtype == np.float32
  rounded = tf.cast(tf.cast(sequence_output, dtype), tf.float32).numpy()
  w = dict(arrays, **{"bert/embeddings/word_embeddings": table})
  want_log_probs, rows = _np_masked_lm(w, rounded, positions)
  want_loss, want_per_position = _np_masked_lm_loss(want_log_probs, labels,
                                                    weights)
  # d loss / d table = sum_i w_i / (sum w + 1e-5) (softmax_i - onehot_i) t_i.
  coefficient = weights.reshape(-1) / (weights.sum() + 1e-5)
  error = np.exp(want_log_probs.reshape(-1, config.vocab_size))
  error[np.arange(6), labels.reshape(-1)] -= 1.0
  want_gradient = (coefficient[:, None] * error).T @ rows.reshape(
      -1, config.hidden_size)
  if dtype == "float32":
    tolerance = dict(rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[2], want_log_probs.reshape(
        -1, config.vocab_size), **tolerance)
    np.testing.assert_allclose(got[1], want_per_position.reshape(-1),
                               **tolerance)
    np.testing.assert_allclose(got[0], want_loss, **tolerance)
    np.testing.assert_allclose(got[3], want_gradient, rtol=1e-4, atol=1e-7)
    return
  rounding.check_float32_accumulation(dtype)
  exact, bounds = _masked_lm_error_bounds(
      w, rounded, positions, labels.reshape(-1), coefficient, dtype)
  for what, got_value, want_value, bound in zip(
      ["loss", "per-position loss", "log-probabilities",
       "word-embedding gradient"], got, [exact[2], exact[1], exact[0],
                                         exact[3]],
      [bounds[2], bounds[1], bounds[0], bounds[3]]):
    rounding.assert_within_bound(got_value, want_value, bound, what)


def test_next_sentence_loss_matches_numpy():
  config = _config()
  rng = np.random.RandomState(3)
  pooled = np.tanh(rng.randn(3, config.hidden_size)).astype(np.float32)
  labels = np.array([[0], [1], [1]], np.int32)
  arrays = _head_weights(config, 4)
  with tf.Graph().as_default():
    outputs = run_pretraining.get_next_sentence_output(
        config, tf.constant(pooled), tf.constant(labels))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      test_modeling._assign(sess, arrays)
      loss, per_example, log_probs = sess.run(outputs)
  want_log_probs = _np_next_sentence(arrays, pooled)
  want_per_example = -want_log_probs[np.arange(3), labels[:, 0]]
  np.testing.assert_allclose(log_probs, want_log_probs, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(per_example, want_per_example, rtol=1e-5)
  np.testing.assert_allclose(loss, want_per_example.mean(), rtol=1e-5)


def test_heads_may_be_missing_from_a_checkpoint_but_not_misshapen():
  config = _config()
  shapes = dict(checkpoint_checks.bert_variable_shapes(config))
  heads = checkpoint_checks.pretraining_head_shapes(config)
  missing = checkpoint_checks.check_matches_config(
      shapes, config, "minilm/bert_model.ckpt", "bert_config.json",
      heads=heads)
  assert sorted(missing) == sorted(_googles_heads(config))
  shapes.update(heads)
  assert checkpoint_checks.check_matches_config(
      shapes, config, "ckpt", "bert_config.json", heads=heads) == []
  shapes["cls/predictions/transform/dense/kernel"] = [16, 16]
  with pytest.raises(cli.UserError,
                     match=r"cls/predictions/transform/dense/kernel of shape "
                     r"\[16, 16\].*\[32, 32\]"):
    checkpoint_checks.check_matches_config(
        shapes, config, "ckpt", "bert_config.json", heads=heads)
  # The encoder is still checked against the config.
  del shapes["bert/encoder/layer_1/output/dense/kernel"]
  with pytest.raises(cli.UserError, match="layer_1/output/dense/kernel"):
    checkpoint_checks.check_matches_config(
        shapes, config, "ckpt", "bert_config.json", heads=heads)


@pytest.mark.parametrize("heads_are_new", [False, True])
def test_missing_heads_are_warned_about_unless_new(heads_are_new, minilm_dir,
                                                   tmp_path, caplog):
  """MiniLM has no cls/ heads: pre-training from it warns that they start
  fresh; a fine-tuning task's own head, which no pre-trained checkpoint
  has, is no news (said with -v 1 only)."""
  config = modeling.BertConfig.from_json_file(
      os.path.join(minilm_dir, "bert_config.json"))
  with caplog.at_level(std_logging.INFO):
    checkpoint_checks.check_checkpoints(
        str(tmp_path), os.path.join(minilm_dir, "bert_model.ckpt"), config,
        "bert_config.json", do_train=True,
        heads=checkpoint_checks.pretraining_head_shapes(config),
        heads_are_new=heads_are_new)
  assert ("cls/predictions/output_bias" in caplog.text) != heads_are_new
  assert ("initialized fresh" in caplog.text) != heads_are_new


def test_memory_model_counts_the_masked_lm_head():
  """The planner's hook: BertMemory with max_predictions_per_seq estimates
  memory_model's pretraining terms and plans a smaller micro-batch."""
  large = modeling.BertConfig.from_dict(memory_model.BERT_LARGE)
  plain = memory_model.BertMemory(large, 512)
  heads = memory_model.BertMemory(large, 512, max_predictions_per_seq=80)
  assert heads.estimate_bytes(4, "fp32", False, 2) == pytest.approx(
      memory_model.estimate_bytes(large, 512, 4, num_accumulation_steps=2,
                                 max_predictions_per_seq=80)["total"])
  assert heads.estimate_bytes(4, "fp32", False, 2) > plain.estimate_bytes(
      4, "fp32", False, 2)
  budget = 8 * units.GIB
  assert heads.plan(256, budget, "bf16", True) == memory_model.plan(
      large, 512, 256, budget, precisions=("bf16",),
      max_predictions_per_seq=80)
  assert "--max_predictions_per_seq=80" in heads.describe()
  assert "336.2M parameters" in heads.describe()  # 335.1M + 1.08M head


# ----------------------------------------------------------------- input


def _indexed_files(directory, num_files, per_file):
  """Files whose records say where they are: input_ids[1] = 10 + file,
  input_ids[2] = 10 + record."""
  paths = []
  for f in range(num_files):
    examples = pretraining_records.random_examples(per_file, 16, 4, 99, f)
    for r, example in enumerate(examples):
      example["input_ids"][1:3] = [10 + f, 10 + r]
    path = os.path.join(directory, "part-%d.tfrecord" % f)
    pretraining_records.write_records(path, examples)
    paths.append(path)
  return paths


def _origins(input_fn, batch_size, count):
  batches = input_fn({"batch_size": batch_size}).take(count)
  return [tuple(ids[1:3] - 10) for batch in batches
          for ids in batch["input_ids"].numpy()]


def test_training_input_is_seeded_and_interleaves_the_files(tmp_path):
  files = _indexed_files(str(tmp_path), 3, 6)

  def order(seed):
    return _origins(run_pretraining.input_fn_builder(
        files, 16, 4, is_training=True, seed=seed), 4, 12)

  first = order(3)
  assert len(first) == 48  # more than the 18 records: the files repeat
  assert first == order(3)
  assert first != order(4)
  assert len({f for f, _ in first[:8]}) >= 2
  assert sorted(set(first)) == [(f, r) for f in range(3) for r in range(6)]


def test_eval_input_reads_the_files_in_order_and_repeats(tmp_path):
  files = _indexed_files(str(tmp_path), 2, 3)
  got = _origins(run_pretraining.input_fn_builder(
      files[::-1], 16, 4, is_training=False), 4, 3)
  one_pass = [(1, r) for r in range(3)] + [(0, r) for r in range(3)]
  assert got == one_pass * 2


def test_input_files_expand_globs_and_lists_in_order(tmp_path):
  files = _indexed_files(str(tmp_path), 3, 1)
  pattern = os.path.join(str(tmp_path), "part-[12].tfrecord")
  assert pretraining.expand_input_files(
      "%s, %s" % (pattern, files[0])) == [files[1], files[2], files[0]]


def test_input_files_leave_the_sidecars_out(tmp_path):
  files = _indexed_files(str(tmp_path), 2, 1)
  for path in files:
    with open(path + ".meta.json", "w") as f:
      f.write("{}")
  assert pretraining.expand_input_files(
      os.path.join(str(tmp_path), "part-*")) == files


def _vocab(path, tokens):
  with open(path, "w") as f:
    f.write("".join(token + "\n" for token in tokens))
  return path


def _with_sidecar(path, vocab_file, vocab_size):
  record_sidecars.write(path, record_sidecars.describe(
      vocab_file, vocab_size, True, max_seq_length=16), 1)


def test_records_of_another_vocabulary_are_refused(tmp_path):
  """The sidecars name the vocabulary the records were made with: one
  larger than the config's vocab_size, another than --vocab_file, or two
  in one run end in one line naming the file; records without sidecars
  (Google's) pass."""
  config = _config()   # vocab_size 99
  files = _indexed_files(str(tmp_path), 2, 1)
  pattern = os.path.join(str(tmp_path), "part-*.tfrecord")
  ours = _vocab(str(tmp_path / "ours.txt"), ["tok%d" % i for i in range(90)])
  other = _vocab(str(tmp_path / "other.txt"),
                 ["tok%d" % i for i in range(89)] + ["extra"])
  assert pretraining.check_input_files(pattern, 16, 4, config)[1] is None
  for path in files:
    _with_sidecar(path, ours, 90)
  with open(ours, "rb") as f:
    ours_sha256 = hashlib.sha256(f.read()).hexdigest()
  assert pretraining.check_input_files(
      pattern, 16, 4, config, "c.json", ours) == (files, ours_sha256)

  def refusal(vocab_file=None, config_file="c.json", **changes):
    with pytest.raises(cli.UserError) as raised:
      pretraining.check_input_files(pattern, 16, 4, _config(**changes),
                                        config_file, vocab_file)
    assert "\n" not in str(raised.value)
    return str(raised.value)

  assert refusal(other) == (
      "--input_file: %s was made with another vocabulary than --vocab_file=%s"
      " (sha256 %s... in its sidecar, %s... here); pass the vocabulary "
      "create_pretraining_data.py was run with, or make the records again "
      "with this one." % (files[0], other, ours_sha256[:12],
                          hashlib.sha256(open(other, "rb").read())
                          .hexdigest()[:12]))
  assert refusal(vocab_size=80).startswith(
      "--input_file: %s was made with a vocabulary of 90 tokens (its sidecar "
      "says), more than the vocab_size=80 of --bert_config_file=c.json" %
      files[0])
  _with_sidecar(files[1], other, 90)
  assert refusal().startswith(
      "--input_file: %s and %s were made with different vocabularies" % (
          files[0], files[1]))


# ------------------------------------------------- the script, end to end


def _run(run_script, args, log_path):
  return conftest.run_logged(run_script, "run_pretraining.py", args, log_path,
                             TIMEOUT)


def _write_config(path, config):
  with open(path, "w") as f:
    json.dump(config, f)
  return path


def _save_checkpoint(arrays, prefix, global_step):
  """A checkpoint of `arrays` (name -> value) and global_step, as Google's
  run_pretraining.py writes them."""
  with tf.Graph().as_default():
    variables = {name: tf.compat.v1.Variable(value, name=name)
                 for name, value in arrays.items()}
    variables["global_step"] = tf.compat.v1.Variable(
        np.int64(global_step), name="global_step")
    saver = tf.compat.v1.train.Saver(var_list=variables)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, prefix, write_meta_graph=False)


def _read_eval_results(path):
  with open(path) as f:
    lines = f.read().splitlines()
  keys = [line.split(" = ")[0] for line in lines]
  assert keys == sorted(keys) and all(" = " in line for line in lines)
  return {key: float(line.split(" = ")[1]) for key, line in zip(keys, lines)}


EVAL_SEQ, EVAL_PREDICTIONS, EVAL_BATCH, EVAL_STEPS = 16, 4, 2, 4


def _np_heads(w, config, examples):
  """NumPy masked-LM [n, predictions, vocab] and next-sentence [n, 2]
  log-probabilities of records under weights `w`."""
  stacked = {k: np.stack([e[k] for e in examples]) for k in examples[0]}
  layers, pooled = test_modeling._np_bert(
      w, config, stacked["input_ids"], stacked["input_mask"],
      stacked["segment_ids"])
  log_probs, _ = _np_masked_lm(w, layers[-1], stacked["masked_lm_positions"])
  return log_probs, _np_next_sentence(w, pooled)


def _labelled_eval_examples(w, config):
  """Five records whose labels make both accuracies neither 0 nor 1: the
  NumPy model's prediction for some slots, another id for the others, and
  the prediction again for the padding slots (weight 0, so they must not
  count)."""
  examples = pretraining_records.random_examples(
      5, EVAL_SEQ, EVAL_PREDICTIONS, config.vocab_size, 11)
  log_probs, ns_log_probs = _np_heads(w, config, examples)
  real = np.stack([e["masked_lm_weights"] for e in examples]) > 0
  top2 = np.sort(log_probs, -1)[..., -2:]
  assert (top2[..., 1] - top2[..., 0])[real].min() > 1e-3  # no near-ties
  assert np.abs(ns_log_probs[:, 0] - ns_log_probs[:, 1]).min() > 1e-3
  predicted = log_probs.argmax(-1)
  for i, example in enumerate(examples):
    slots = np.arange(EVAL_PREDICTIONS)
    wrong = (predicted[i] + 1) % config.vocab_size
    example["masked_lm_ids"] = np.where(
        real[i] & (slots % 2 == 1), wrong, predicted[i])
    ns_predicted = int(ns_log_probs[i].argmax())
    example["next_sentence_labels"] = np.array(
        [ns_predicted if i % 2 == 0 else 1 - ns_predicted], np.int64)
  return examples, log_probs, ns_log_probs


def _np_eval_results(examples, log_probs, ns_log_probs, order):
  """Google's metrics over the eval batches of records `order`."""
  labels = np.stack([e["masked_lm_ids"] for e in examples])
  weights = np.stack([e["masked_lm_weights"] for e in examples])
  ns_labels = np.array([e["next_sentence_labels"][0] for e in examples])
  position_loss = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
  correct = log_probs.argmax(-1) == labels
  ns_loss = -ns_log_probs[np.arange(len(examples)), ns_labels]
  ns_correct = ns_log_probs.argmax(-1) == ns_labels
  w = weights[order]
  batch_losses = []
  for start in range(0, len(order), EVAL_BATCH):
    batch = order[start:start + EVAL_BATCH]
    mlm, _ = _np_masked_lm_loss(log_probs[batch], labels[batch],
                                weights[batch])
    batch_losses.append(mlm + ns_loss[batch].mean())
  return {
      "masked_lm_accuracy": (w * correct[order]).sum() / w.sum(),
      "masked_lm_loss": (w * position_loss[order]).sum() / w.sum(),
      "next_sentence_accuracy": ns_correct[order].mean(),
      "next_sentence_loss": ns_loss[order].mean(),
      "loss": np.mean(batch_losses),
  }


def test_eval_metrics_match_numpy_on_a_checkpoint_with_heads(tmp_path,
                                                            run_script):
  """A checkpoint holding bert/ and Google's cls/ heads (random values),
  evaluated over two files (3 + 2 records, batches of 2, 4 steps: the
  files are read in order and repeated). Loaded by --init_checkpoint the
  heads are restored (global_step 0); as --output_dir's checkpoint it
  reports its global_step; with an older checkpoint beside it,
  --eval_all_checkpoints evaluates both into eval_history.jsonl, each
  against NumPy."""
  config = _config()
  w = dict(test_modeling._random_weights(config, 5), **_head_weights(
      config, 6))
  examples, log_probs, ns_log_probs = _labelled_eval_examples(w, config)
  files = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
  pretraining_records.write_records(files[0], examples[:3])
  pretraining_records.write_records(files[1], examples[3:])
  config_file = _write_config(str(tmp_path / "bert_config.json"), CONFIG)
  checkpoint_dir = str(tmp_path / "trained")
  _save_checkpoint(w, os.path.join(checkpoint_dir, "model.ckpt-7"), 7)
  common = ["--input_file=%s" % ",".join(files),
            "--bert_config_file=%s" % config_file,
            "--max_seq_length=%d" % EVAL_SEQ,
            "--max_predictions_per_seq=%d" % EVAL_PREDICTIONS, "--do_eval",
            "--eval_batch_size=%d" % EVAL_BATCH,
            "--max_eval_steps=%d" % EVAL_STEPS]
  # -v 1: Google's variable listing shows what the checkpoint supplied.
  log = _run(run_script, common + [
      "--init_checkpoint=%s" % os.path.join(checkpoint_dir, "model.ckpt-7"),
      "--output_dir=%s" % (tmp_path / "out"), "-v", "1"],
             str(tmp_path / "init.log"))
  assert "cls/predictions/output_bias:0, shape = (99,), *INIT_FROM_CKPT*" in (
      log)
  from_init = _read_eval_results(str(tmp_path / "out" / "eval_results.txt"))
  want = _np_eval_results(examples, log_probs, ns_log_probs,
                          np.array([0, 1, 2, 3, 4, 0, 1, 2]))
  assert sorted(from_init) == sorted(list(want) + ["global_step"])
  assert from_init["global_step"] == 0
  assert 0 < want["masked_lm_accuracy"] < 1
  assert 0 < want["next_sentence_accuracy"] < 1
  for key, value in want.items():
    assert from_init[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key

  _run(run_script, common + ["--output_dir=%s" % checkpoint_dir],
       str(tmp_path / "resume.log"))
  from_dir = _read_eval_results(os.path.join(checkpoint_dir,
                                             "eval_results.txt"))
  assert from_dir == dict(from_init, global_step=7)

  # --eval_all_checkpoints: an older checkpoint (other weights) first.
  w3 = dict(test_modeling._random_weights(config, 8), **_head_weights(
      config, 9))
  _save_checkpoint(w3, os.path.join(checkpoint_dir, "model.ckpt-3"), 3)
  # As a Saver keeping every checkpoint writes it: only the newest named.
  tf.compat.v1.train.update_checkpoint_state(
      checkpoint_dir, "model.ckpt-7",
      all_model_checkpoint_paths=["model.ckpt-7"])
  _run(run_script, common + ["--output_dir=%s" % checkpoint_dir,
                             "--eval_all_checkpoints"],
       str(tmp_path / "all.log"))
  with open(os.path.join(checkpoint_dir, "eval_history.jsonl")) as f:
    history = [json.loads(line) for line in f]
  assert [sorted(r) for r in history] == [sorted(
      list(want) + ["global_step", "checkpoint"])] * 2
  want3 = _np_eval_results(examples, *_np_heads(w3, config, examples),
                           np.array([0, 1, 2, 3, 4, 0, 1, 2]))
  assert [r["global_step"] for r in history] == [3, 7]
  for got, expected in ((history[0], want3), (history[1], want)):
    for key, value in expected.items():
      assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
  assert want3["loss"] != pytest.approx(want["loss"], rel=1e-3)
  assert _read_eval_results(os.path.join(
      checkpoint_dir, "eval_results.txt")) == from_dir


def test_checkpoint_without_heads_starts_them_fresh(tmp_path, run_script,
                                                   minilm_dir):
  """Continued pretraining from MiniLM, which has no cls/ heads: the
  encoder comes from the checkpoint, the heads from their initializers,
  and the log names them. One update at a learning rate of 1e-9 changes
  nothing measurable."""
  examples = pretraining_records.random_examples(8, 32, 5, 30522, 2)
  pretraining_records.write_records(str(tmp_path / "data.tfrecord"),
                                    examples)
  checkpoint = os.path.join(minilm_dir, "bert_model.ckpt")
  out = str(tmp_path / "out")
  log = _run(run_script, [
      "--input_file=%s" % (tmp_path / "data.tfrecord"),
      "--bert_config_file=%s" % os.path.join(minilm_dir, "bert_config.json"),
      "--init_checkpoint=%s" % checkpoint, "--output_dir=%s" % out,
      "--max_seq_length=32", "--max_predictions_per_seq=5", "--do_train",
      "--train_batch_size=2", "--num_train_steps=1", "--num_warmup_steps=0",
      "--learning_rate=1e-9", "-v", "1"], str(tmp_path / "run.log"))
  fresh = [line for line in log.splitlines() if "initialized fresh" in line]
  assert len(fresh) == 1
  for name in _googles_heads(_config()):
    assert name in fresh[0]
  assert "bert/embeddings/word_embeddings:0, shape = (30522, 384), " \
      "*INIT_FROM_CKPT*" in log
  assert "cls/predictions/output_bias:0, shape = (30522,)\n" in log
  trained = tf.train.load_checkpoint(os.path.join(out, "model.ckpt-1"))
  original = tf.train.load_checkpoint(checkpoint)
  for name in ("bert/embeddings/word_embeddings",
               "bert/encoder/layer_5/output/dense/kernel"):
    np.testing.assert_allclose(trained.get_tensor(name),
                               original.get_tensor(name), atol=1e-6)
  np.testing.assert_allclose(trained.get_tensor(
      "cls/predictions/transform/LayerNorm/gamma"), 1.0, atol=1e-6)
  np.testing.assert_allclose(trained.get_tensor(
      "cls/predictions/output_bias"), 0.0, atol=1e-6)
  kernel = trained.get_tensor("cls/predictions/transform/dense/kernel")
  assert 0.015 < kernel.std() < 0.02  # truncated normal, stddev 0.02
  with open(os.path.join(out, "run_info.json")) as f:
    info = json.load(f)
  assert (info["task"], info["max_seq_length"],
          info["max_predictions_per_seq"]) == ("pretraining", 32, 5)
  assert "vocab_file" not in info and not os.path.exists(
      os.path.join(out, "vocab.txt"))


# A run long enough to be killed between its first checkpoint (step 10)
# and its end: 200 updates of 2 micro-batches of 2 examples.
RESUME_STEPS = 200


def _resume_settings(root):
  config_file = os.path.join(root, "bert_config.json")
  files = [os.path.join(root, "part-%d.tfrecord" % i) for i in range(3)]

  def command(out, actions):
    return ["--input_file=%s" % os.path.join(root, "part-*.tfrecord"),
            "--bert_config_file=%s" % config_file, "--output_dir=%s" % out,
            "--max_seq_length=16", "--max_predictions_per_seq=4",
            "--train_batch_size=4", "--num_accumulation_steps=2",
            "--learning_rate=1e-3", "--num_train_steps=%d" % RESUME_STEPS,
            "--num_warmup_steps=10", "--save_checkpoints_steps=10",
            "--log_step_count_steps=50", "--eval_batch_size=4",
            "--max_eval_steps=3", "--seed=7"] + ["--" + a for a in actions]

  return {"root": root, "config_file": config_file, "files": files,
          "command": command, "output_dir": os.path.join(root, "out")}


def _uninterrupted_run(run_script, root):
  settings = _resume_settings(root)
  _write_config(settings["config_file"], CONFIG)
  for i, path in enumerate(settings["files"]):
    pretraining_records.write_records(
        path, pretraining_records.random_examples(12, 16, 4, 99, 20 + i))
  _run(run_script,
       settings["command"](settings["output_dir"], ["do_train", "do_eval"]),
       os.path.join(root, "run.log"))


@pytest.fixture(scope="module")
def reference_run(shared_dir, run_script):
  root = conftest.build_once(shared_dir, "pretraining_e2e",
                             lambda root: _uninterrupted_run(run_script, root))
  return _resume_settings(root)


def test_uninterrupted_run_outputs(reference_run):
  out = reference_run["output_dir"]
  results = _read_eval_results(os.path.join(out, "eval_results.txt"))
  assert sorted(results) == ["global_step", "loss", "masked_lm_accuracy",
                             "masked_lm_loss", "next_sentence_accuracy",
                             "next_sentence_loss"]
  assert results["global_step"] == RESUME_STEPS
  # Trained on these records, the model beats chance (1/99 and about 1/2
  # of the 36 records' labels) and the initial loss ln(99) + ln(2) = 5.29.
  assert results["masked_lm_accuracy"] > 0.1
  assert results["loss"] < 4.5
  with open(os.path.join(reference_run["root"], "run.log")) as f:
    log = f.read()
  assert "step 200/200 (100.0%)" in log and " left" in log
  events = [name for name in os.listdir(out) if name.startswith("events.")]
  scalars = set()
  for event in tf.compat.v1.train.summary_iterator(
      os.path.join(out, events[0])):
    scalars.update(value.tag for value in event.summary.value)
  assert {"loss", "learning_rate", "examples_per_sec"} <= scalars


def test_resume_after_kill_matches_uninterrupted_run(reference_run, tmp_path,
                                                    run_script, script_runner):
  output_dir = str(tmp_path / "killed")
  args = reference_run["command"](output_dir, ["do_train"])
  returncode = conftest.signal_after_first_update_saved(
      script_runner, "run_pretraining.py", args, output_dir,
      str(tmp_path / "killed.log"), signal.SIGKILL, TIMEOUT)
  killed_at = conftest.checkpoint_step(output_dir)
  assert returncode == -signal.SIGKILL, "run ended before the kill"
  assert killed_at is not None and 10 <= killed_at < RESUME_STEPS

  log = _run(run_script, args, str(tmp_path / "resumed.log"))
  assert "Resuming from" in log
  assert conftest.checkpoint_step(output_dir) == RESUME_STEPS
  final = "model.ckpt-%d" % RESUME_STEPS
  resumed = tf.train.load_checkpoint(os.path.join(output_dir, final))
  reference = tf.train.load_checkpoint(
      os.path.join(reference_run["output_dir"], final))
  names = sorted(reference.get_variable_to_shape_map())
  assert names == sorted(resumed.get_variable_to_shape_map())
  assert "cls/predictions/output_bias/adam_m" in names
  for name in names:
    np.testing.assert_allclose(resumed.get_tensor(name),
                               reference.get_tensor(name), rtol=1e-6,
                               atol=1e-7, err_msg=name)


def test_sigterm_saves_the_update_and_stops(reference_run, tmp_path,
                                           script_runner):
  """SIGTERM once an update is saved: the run saves the update it
  reached, names it in its last line and exits with 128 + 15."""
  output_dir = str(tmp_path / "stopped")
  log_path = str(tmp_path / "stopped.log")
  returncode = conftest.signal_after_first_update_saved(
      script_runner, "run_pretraining.py",
      reference_run["command"](output_dir, ["do_train"]), output_dir,
      log_path, signal.SIGTERM, TIMEOUT)
  with open(log_path) as f:
    last = f.read().strip().splitlines()[-1]
  assert returncode == 128 + signal.SIGTERM, last
  assert "Training stopped by SIGTERM at step" in last
  step = int(last.split(" at step ")[1].split("/")[0])
  assert 10 <= step < RESUME_STEPS
  assert conftest.checkpoint_step(output_dir) == step


def test_diverging_run_stops_with_one_line(tmp_path, run_script):
  """A learning rate of 1e12 makes the loss NaN within a few updates: the
  runner's advice is the last line, status 1, no traceback, no checkpoint
  of the diverged weights."""
  pretraining_records.write_records(
      str(tmp_path / "data.tfrecord"),
      pretraining_records.random_examples(8, 16, 4, 99, 0))
  out = str(tmp_path / "out")
  result = run_script("run_pretraining.py", [
      "--input_file=%s" % (tmp_path / "data.tfrecord"),
      "--bert_config_file=%s" % _write_config(
          str(tmp_path / "bert_config.json"), CONFIG),
      "--output_dir=%s" % out, "--max_seq_length=16",
      "--max_predictions_per_seq=4", "--do_train", "--train_batch_size=4",
      "--num_train_steps=6", "--num_warmup_steps=0",
      "--learning_rate=1e12"], TIMEOUT)
  last = result.stderr.strip().splitlines()[-1]
  assert result.returncode == 1, result.stderr[-3000:]
  assert re.match(r"Training stopped\. Loss is -?(nan|inf) at step ",
                  last), last
  assert "lower --learning_rate" in last
  assert "Traceback" not in result.stderr
  assert conftest.checkpoint_step(out) == 0  # only the starting point


def test_planned_bf16_lamb_run(reference_run, tmp_path, run_script):
  """bf16, LAMB and --micro_batch_size=auto, whose plan counts the
  masked-LM head: 2 updates to a finite loss, float32 checkpoints. (XLA,
  mirrored and multi-worker training go through the same runner paths as
  the fine-tuning scripts, tested there.)"""
  out = str(tmp_path / "bf16")
  args = [arg for arg in reference_run["command"](out, ["do_train"])
          if not arg.startswith(("--num_train_steps", "--num_warmup",
                                 "--num_accumulation_steps"))]
  log = _run(run_script, args + [
      "--num_train_steps=2", "--num_warmup_steps=1",
      "--log_step_count_steps=1", "--precision=bf16", "--optimizer=lamb",
      "--micro_batch_size=auto", "--device_memory_gb=0.5009"],
             str(tmp_path / "bf16.log"))
  # The run plans with the time model of this machine's device.
  kind = memory_settings.device_kind(None)
  expected = memory_model.plan(CONFIG, 16, 4, 0.5009 * units.GIB,
                              precisions=("bf16",), max_predictions_per_seq=4,
                              device=kind)
  without_head = memory_model.plan(CONFIG, 16, 4, 0.5009 * units.GIB,
                                  precisions=("bf16",), device=kind)
  assert expected != without_head
  planned = [line for line in log.splitlines()
             if "--micro_batch_size=auto:" in line]
  assert planned and ("micro-batch %d x %d accumulation" % (
      expected.micro_batch, expected.accumulation_steps)) in planned[0]
  assert "by the %s time model" % kind.upper() in planned[0]
  assert "step 2/2" in log and "nan" not in log.lower()
  reader = tf.train.load_checkpoint(os.path.join(out, "model.ckpt-2"))
  dtypes = reader.get_variable_to_dtype_map()
  assert dtypes["cls/predictions/output_bias"] == tf.float32
  assert dtypes["bert/encoder/layer_0/output/dense/kernel"] == tf.float32


def test_mirrored_matches_one_device_when_replicas_mask_alike(tmp_path,
                                                             run_script):
  """Two CPU replicas against one device, from the same checkpoint without
  dropout. Each replica normalizes its masked-LM loss by its own weights,
  as each TPU core did in Google's code; with the same number of masked
  positions in every record that equals the whole batch's loss, so the
  weights must agree."""
  config = dict(CONFIG, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
  config_file = _write_config(str(tmp_path / "bert_config.json"), config)
  pretraining_records.write_records(
      str(tmp_path / "data.tfrecord"), pretraining_records.random_examples(
          16, 16, 4, 99, 8, all_predictions=True))
  init = dict(test_modeling._random_weights(_config(), 9),
              **_head_weights(_config(), 10))
  _save_checkpoint(init, str(tmp_path / "init" / "model.ckpt"), 0)
  common = ["--input_file=%s" % (tmp_path / "data.tfrecord"),
            "--bert_config_file=%s" % config_file,
            "--init_checkpoint=%s" % (tmp_path / "init" / "model.ckpt"),
            "--max_seq_length=16", "--max_predictions_per_seq=4",
            "--do_train", "--train_batch_size=8", "--num_train_steps=3",
            "--num_warmup_steps=1", "--learning_rate=1e-2"]
  _run(run_script, common + ["--output_dir=%s" % (tmp_path / "one")],
       str(tmp_path / "one.log"))
  _run(run_script, common + ["--output_dir=%s" % (tmp_path / "two"),
                             "--distribution=mirrored",
                             "--devices=/cpu:0,/cpu:1"],
       str(tmp_path / "two.log"))
  one = tf.train.load_checkpoint(str(tmp_path / "one" / "model.ckpt-3"))
  two = tf.train.load_checkpoint(str(tmp_path / "two" / "model.ckpt-3"))
  for name in sorted(init):
    np.testing.assert_allclose(two.get_tensor(name), one.get_tensor(name),
                               rtol=0, atol=1e-5, err_msg=name)
  assert max(np.abs(one.get_tensor(name) - init[name]).max()
             for name in init) > 1e-3
