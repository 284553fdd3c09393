"""--use_xla: XLA-compiled training, evaluation and prediction.

A classifier on a tiny BERT (2 layers, hidden 32, with its usual dropout;
modeling.BertModel, a softmax head and optimization.create_optimizer) is
trained for three updates and used to predict, once without and once with
XLA, in one subprocess with TensorFlow's log of XLA compilations on, and a
third time with XLA and gradient checkpointing (training only: checkpointing
changes nothing but the backward pass). The training loss, the trained
variables and the predictions must agree: dropout masks drawn again
in the backward pass (attention, checkpointed layers) must match the
forward pass's under XLA too. The model takes the long-sequence path
(keep_activations_up_to=0), in which attention draws its masks again.
Training always compiles a few kernels (the optimizer's update and GELU's
passes); the log must show that the XLA run compiled more for training, and
that its prediction compiled clusters where the plain run's compiled none.
(Evaluation builds its graph like prediction; it is left out to keep XLA
compile time down.)
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import synthetic

pytestmark = pytest.mark.slow

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
SEQ_LENGTH = 8
VOCAB_SIZE = 40
XLA_MARKER = "=== XLA run starts ==="
CHECKPOINTING_MARKER = "=== XLA run with checkpointing starts ==="
PREDICT_MARKER = "=== prediction starts ==="
COMPILED_LINE = "Compilation of XLA executable"


def _input_fn(params):
  """16 fixed examples; batches of params["batch_size"] (repeated)."""
  features = synthetic.classifier_features(16, SEQ_LENGTH, VOCAB_SIZE, 11)
  dataset = tf.data.Dataset.from_tensor_slices(features)
  if params.get("repeat"):
    dataset = dataset.repeat()
  return dataset.batch(params["batch_size"])


def _summary_loss(model_dir):
  """The last "loss" scalar the training wrote to model_dir's summaries."""
  losses = []
  for path in tf.io.gfile.glob(os.path.join(model_dir, "events.out.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      losses.extend(value.simple_value for value in event.summary.value
                    if value.tag == "loss")
  return np.float32(losses[-1])


def _run(model_dir, use_xla, gradient_checkpointing=False, predict=True):
  """Trains 3 updates and (if `predict`) predicts; returns a dict of
  arrays."""
  from runner import estimator  # pylint: disable=import-outside-toplevel
  import modeling  # pylint: disable=import-outside-toplevel
  import optimization  # pylint: disable=import-outside-toplevel
  bert_config = modeling.BertConfig(
      vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=64,
      max_position_embeddings=SEQ_LENGTH)

  def model_fn(features, labels, mode, params):
    del labels, params  # The labels travel in features.
    training = mode == estimator.ModeKeys.TRAIN
    model = modeling.BertModel(
        bert_config, training, features["input_ids"], features["input_mask"],
        features["segment_ids"], gradient_checkpointing=gradient_checkpointing,
        keep_activations_up_to=0)
    weights = tf.compat.v1.get_variable(
        "output_weights", [2, 32],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
    pooled = model.get_pooled_output()
    if training:
      pooled = modeling.dropout(pooled, 0.1)
    logits = tf.matmul(pooled, weights, transpose_b=True)
    if not training:
      return estimator.EstimatorSpec(
          mode, predictions={"probabilities": tf.nn.softmax(logits)})
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=features["label_ids"], logits=logits))
    train_op = optimization.create_optimizer(loss, 1e-2, 10, 1)
    return estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

  est = estimator.Estimator(
      model_fn, estimator.RunConfig(model_dir, tf_random_seed=5,
                                    use_xla=use_xla),
      params={"repeat": False}, train_batch_size=4, predict_batch_size=8)
  est.train(lambda params: _input_fn(dict(params, repeat=True)), max_steps=3)
  reader = tf.train.load_checkpoint(est.latest_checkpoint())
  values = {"var:" + name: reader.get_tensor(name)
            for name, _ in tf.train.list_variables(est.latest_checkpoint())}
  values["train_loss"] = _summary_loss(model_dir)
  if not predict:
    return values
  print(PREDICT_MARKER, flush=True)
  values["probabilities"] = np.stack(
      [p["probabilities"] for p in est.predict(_input_fn)])
  return values


def _subprocess_main(out_dir):
  np.savez(os.path.join(out_dir, "plain.npz"),
           **_run(os.path.join(out_dir, "plain"), use_xla=False))
  print(XLA_MARKER, flush=True)
  np.savez(os.path.join(out_dir, "xla.npz"),
           **_run(os.path.join(out_dir, "xla"), use_xla=True))
  print(CHECKPOINTING_MARKER, flush=True)
  np.savez(os.path.join(out_dir, "xla_checkpointing.npz"),
           **_run(os.path.join(out_dir, "xla_checkpointing"), use_xla=True,
                  gradient_checkpointing=True, predict=False))


def test_xla_matches_plain_training_and_prediction(tmp_path):
  # Not at the top: this file also runs as the subprocess's script.
  import conftest  # pylint: disable=import-outside-toplevel
  env = dict(conftest.env_without_compilation_cache(), PYTHONPATH=REPO_ROOT,
             TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="device_compiler=1")
  result = subprocess.run(
      [sys.executable, os.path.abspath(__file__), str(tmp_path)], env=env,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      timeout=360, check=False)
  assert result.returncode == 0, result.stdout
  before, marker, after = result.stdout.partition(XLA_MARKER)
  assert marker, result.stdout
  after, marker, _ = after.partition(CHECKPOINTING_MARKER)
  assert marker, result.stdout
  plain_train, _, plain_predict = before.partition(PREDICT_MARKER)
  xla_train, _, xla_predict = after.partition(PREDICT_MARKER)
  assert plain_train.count(COMPILED_LINE) > 0, plain_train
  assert (xla_train.count(COMPILED_LINE) >
          plain_train.count(COMPILED_LINE)), xla_train
  assert plain_predict and COMPILED_LINE not in plain_predict, plain_predict
  assert COMPILED_LINE in xla_predict, xla_predict
  plain = np.load(tmp_path / "plain.npz")
  assert len([n for n in plain.files if n.startswith("var:")]) > 30
  assert plain["probabilities"].shape == (16, 2)
  for run in ("xla", "xla_checkpointing"):
    other = np.load(tmp_path / (run + ".npz"))
    expected = [n for n in plain.files
                if run == "xla" or n != "probabilities"]
    assert sorted(other.files) == sorted(expected)
    for name in expected:
      np.testing.assert_allclose(other[name], plain[name], rtol=0, atol=1e-5,
                                 err_msg="%s: %s" % (run, name))


def test_variables_set_up_ops_are_not_compiled():
  """Under --use_xla's jit scope, the ops get_variable adds (initializer,
  initial assignment, the read the Saver fetches) stay TensorFlow kernels;
  the model's math is compiled."""
  from runner import model_graphs  # pylint: disable=import-outside-toplevel
  with tf.Graph().as_default() as graph:
    with tf.xla.experimental.jit_scope(compile_ops=model_graphs._xla_compiles):  # pylint: disable=protected-access
      kernel = tf.compat.v1.get_variable(
          "layer/kernel", [3, 2],
          initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
      bias = tf.compat.v1.get_variable("layer/bias", [2],
                                       initializer=tf.zeros_initializer())
      output = tf.matmul(tf.ones([4, 3]), kernel) + bias
    compiled = {op.name: op.get_attr("_XlaCompile")
                for op in graph.get_operations()}
  set_up = [name for name in compiled
            if name.startswith(("layer/kernel/", "layer/bias/"))]
  assert {"layer/kernel/Assign", "layer/kernel/Read/ReadVariableOp",
          "layer/bias/Initializer/zeros"} <= set(set_up), set_up
  assert not any(compiled[name] for name in set_up), compiled
  assert compiled[output.op.name] and compiled["MatMul"], compiled


if __name__ == "__main__":
  _subprocess_main(sys.argv[1])
