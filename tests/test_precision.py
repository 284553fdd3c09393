"""--precision end to end: run_classifier's model_fn trained by the runner.

A tiny BERT learns a separable task in fp32, bf16 and fp16, each to the
loss of a working run; checkpoints stay float32, a bf16 checkpoint
evaluates in an fp32 graph, and only fp16 keeps a loss scale.
"""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import conftest
from runner import estimator
import modeling
import run_classifier

pytestmark = pytest.mark.slow

SEQ_LENGTH = 16
BATCH_SIZE = 16
NUM_EXAMPLES = 64
# Label 1 sentences use only tokens [5, 22), label 0 only [22, 40): one
# token anywhere decides the class. 16 updates at 2e-3 take the loss from
# ln 2 to about 0.1, in the middle of its steep fall, where a precision
# problem (lost or skipped updates) would show as a clearly higher loss.
TRAIN_STEPS = 16
VOCAB_SIZE = 40
SPLIT_TOKEN = 22
TINY = {"vocab_size": VOCAB_SIZE, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 32, "type_vocab_size": 2,
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
DTYPES = {"fp32": tf.float32, "bf16": tf.bfloat16, "fp16": tf.float16}
# Loss of a classifier that has learned nothing: ln 2.
CHANCE_LOSS = float(np.log(2.0))


def _examples():
  """Fixed synthetic features: [CLS] w1 .. wn [SEP] padding."""
  rng = np.random.RandomState(0)
  labels = np.arange(NUM_EXAMPLES) % 2
  input_ids = np.zeros([NUM_EXAMPLES, SEQ_LENGTH], np.int32)
  input_mask = np.zeros([NUM_EXAMPLES, SEQ_LENGTH], np.int32)
  for i, label in enumerate(labels):
    length = rng.randint(4, SEQ_LENGTH - 1)
    low, high = (5, SPLIT_TOKEN) if label else (SPLIT_TOKEN, VOCAB_SIZE)
    input_ids[i, 0], input_ids[i, length - 1] = 2, 3
    input_ids[i, 1:length - 1] = rng.randint(low, high, size=length - 2)
    input_mask[i, :length] = 1
  return {"input_ids": input_ids, "input_mask": input_mask,
          "segment_ids": np.zeros_like(input_ids),
          "label_ids": labels.astype(np.int32),
          "is_real_example": np.ones([NUM_EXAMPLES], np.int32)}


def _input_fn(is_training):
  def input_fn(params):
    dataset = tf.data.Dataset.from_tensor_slices(_examples())
    if is_training:
      dataset = dataset.repeat()
    return dataset.batch(params["batch_size"], drop_remainder=True)
  return input_fn


def _estimator(model_dir, precision):
  model_fn = run_classifier.model_fn_builder(
      bert_config=modeling.BertConfig.from_dict(TINY), num_labels=2,
      init_checkpoint=None, learning_rate=2e-3, num_train_steps=TRAIN_STEPS,
      num_warmup_steps=2, use_tpu=False, use_one_hot_embeddings=False,
      compute_dtype=DTYPES[precision])
  config = estimator.RunConfig(model_dir, save_checkpoints_steps=1000,
                               log_step_count_steps=1000, tf_random_seed=3)
  return estimator.Estimator(model_fn, config, train_batch_size=BATCH_SIZE,
                             eval_batch_size=BATCH_SIZE)


def _train_each_precision(folder):
  losses = {}
  for precision in DTYPES:
    est = _estimator(os.path.join(folder, precision), precision)
    est.train(_input_fn(True), max_steps=TRAIN_STEPS)
    losses[precision] = est.evaluate(_input_fn(False))["loss"]
  with open(os.path.join(folder, "losses.json"), "w") as f:
    json.dump(losses, f)


@pytest.fixture(scope="module")
def runs(shared_dir):
  """precision -> (model_dir, eval loss) after TRAIN_STEPS updates."""
  folder = conftest.build_once(shared_dir, "precision_runs",
                               _train_each_precision)
  with open(os.path.join(folder, "losses.json")) as f:
    losses = json.load(f)
  return {precision: (os.path.join(folder, precision), loss)
          for precision, loss in losses.items()}


def _checkpoint_values(model_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
  dtypes = reader.get_variable_to_dtype_map()
  return {name: (dtypes[name], reader.get_tensor(name)) for name in dtypes}


def test_every_precision_learns(runs):
  """Each precision reaches the loss a working run reaches here. Over 16
  updates the rounding of 8 (bf16) or 11 (fp16) significant bits moves the
  trajectory by an amount no rounding bound covers, so a precision is not
  held to fp32's loss but to the target: lost or skipped updates leave the
  loss near chance."""
  losses = {precision: loss for precision, (_, loss) in runs.items()}
  for precision, loss in losses.items():
    assert loss < 0.4 * CHANCE_LOSS, (precision, losses)


def test_checkpoints_hold_float32_variables(runs):
  for precision, (model_dir, _) in runs.items():
    values = _checkpoint_values(model_dir)
    kernel = "bert/encoder/layer_0/attention/self/query/kernel"
    assert values[kernel][0] == tf.float32, precision
    assert values[kernel + "/adam_m"][0] == tf.float32, precision
    for name, (dtype, _) in values.items():
      assert dtype in (tf.float32, tf.int64), (precision, name, dtype)


def test_only_fp16_keeps_a_loss_scale(runs):
  for precision, (model_dir, _) in runs.items():
    values = _checkpoint_values(model_dir)
    assert ("loss_scale" in values) == (precision == "fp16"), precision
  dtype, scale = _checkpoint_values(runs["fp16"][0])["loss_scale"]
  # Starts at 2**15, halves on each overflow, doubles only after 2000 good
  # updates: after 16 updates it is a power of two no larger than 2**15.
  assert dtype == tf.float32
  assert 1.0 <= scale <= 2.0**15
  assert np.log2(scale) == np.round(np.log2(scale))


def test_bf16_checkpoint_evaluates_in_fp32(runs):
  """The bf16 run's float32 checkpoint, read by an fp32 graph, is the
  learned model (the training loss is a dropout batch's, so not compared)."""
  model_dir, _ = runs["bf16"]
  fp32_est = _estimator(model_dir, "fp32")
  result = fp32_est.evaluate(_input_fn(False))
  assert result["global_step"] == TRAIN_STEPS
  assert result["loss"] < 0.4 * CHANCE_LOSS
