"""Data-parallel training (--distribution) against single-device training.

A tiny BERT classifier (2 layers, hidden 32, dropout 0, skipping padding as
run_classifier does) is trained for three updates with the same global batch
on one device and on two replicas; the trained variables must agree. Each
scenario runs in a subprocess (this file run as a script) because devices
must be configured before TensorFlow starts:
mirrored splits the CPU into /cpu:0 and /cpu:1; multi_worker starts two
processes on 127.0.0.1 with TF_CONFIG.
"""
import glob
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

import synthetic

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
STEPS = 3
GLOBAL_BATCH = 8
SEQ_LENGTH = 8
VOCAB_SIZE = 40


# --------------------------------------------------------------- subprocess


def _bert_config():
  import modeling  # pylint: disable=import-outside-toplevel
  return modeling.BertConfig(
      vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2,
      num_attention_heads=2, intermediate_size=64, hidden_dropout_prob=0.0,
      attention_probs_dropout_prob=0.0, max_position_embeddings=SEQ_LENGTH)


def _input_fn(params):
  """The same 32 examples, repeated, in batches of params["batch_size"].

  Every other example is padded after 5 of its 8 positions, so replicas
  hold different numbers of real tokens.
  """
  features = synthetic.classifier_features(32, SEQ_LENGTH, VOCAB_SIZE, 7,
                                          two_segments=True)
  features["input_mask"][1::2, 5:] = 0
  features["input_ids"] *= features["input_mask"]
  return tf.data.Dataset.from_tensor_slices(features).repeat().batch(
      params["batch_size"], drop_remainder=True)


def _classifier_loss(features):
  """Mean cross-entropy of a tiny BERT classifier; no dropout anywhere.

  (run_classifier.create_model drops out the pooled output, and masks of a
  split batch cannot equal those of the whole batch.)
  """
  import modeling  # pylint: disable=import-outside-toplevel
  model = modeling.BertModel(
      config=_bert_config(), is_training=True,
      input_ids=features["input_ids"], input_mask=features["input_mask"],
      token_type_ids=features["segment_ids"], skip_padding=True)
  pooled = model.get_pooled_output()
  output_weights = tf.compat.v1.get_variable(
      "output_weights", [2, pooled.shape[-1]],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.5))
  logits = tf.matmul(pooled, output_weights, transpose_b=True)
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=features["label_ids"], logits=logits))


def _write_init_checkpoint(path):
  """Random initial values of every trainable variable, saved to `path`.

  Both runs start from it: a graph with a strategy creates extra ops before
  the model's, so seeded random initializers would draw other values.
  """
  with tf.Graph().as_default():
    tf.compat.v1.set_random_seed(3)
    _classifier_loss(tf.compat.v1.data.make_one_shot_iterator(
        _input_fn({"batch_size": 2})).get_next())
    saver = tf.compat.v1.train.Saver(tf.compat.v1.trainable_variables())
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, path, write_meta_graph=False)


def _model_fn_builder(init_checkpoint, k):
  """A TRAIN-only model_fn: the classifier from `init_checkpoint`, AdamW."""
  from runner import estimator  # pylint: disable=import-outside-toplevel
  import optimization  # pylint: disable=import-outside-toplevel

  def model_fn(features, labels, mode, params):
    del labels, params  # Unused.
    loss = _classifier_loss(features)
    tf.compat.v1.train.init_from_checkpoint(
        init_checkpoint,
        {v.op.name: v.op.name for v in tf.compat.v1.trainable_variables()})
    train_op = optimization.create_optimizer(
        loss, 1e-2, num_train_steps=10, num_warmup_steps=1,
        num_accumulation_steps=k)
    return estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
  return model_fn


def _train(model_dir, init_checkpoint, k, distribution=None,
           input_fn=_input_fn, listeners=None):
  """Trains STEPS updates; returns {name: value} of the trainables."""
  from runner import estimator  # pylint: disable=import-outside-toplevel
  config = estimator.RunConfig(model_dir, tf_random_seed=5,
                               num_accumulation_steps=k,
                               distribution=distribution)
  est = estimator.Estimator(_model_fn_builder(init_checkpoint, k), config,
                            train_batch_size=GLOBAL_BATCH)
  est.train(input_fn, max_steps=STEPS, saving_listeners=listeners)
  if not config.is_chief:
    return {}
  reader = tf.train.load_checkpoint(est.latest_checkpoint())
  names = [name for name, _ in tf.train.list_variables(init_checkpoint)]
  values = {name: reader.get_tensor(name) for name in names}
  values["global_step"] = reader.get_tensor("global_step")
  return values


def _parsed_flags(*args):
  """The SharedFlags of a command line of the shared flags."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  from startup import shared_flags  # pylint: disable=import-outside-toplevel
  fv = flags.FlagValues()
  shared_flags.define_common_flags(128, fv)
  fv(["test"] + list(args))
  return shared_flags.read(fv)


def _make_distribution(shared):
  from runner import distribution  # pylint: disable=import-outside-toplevel
  return distribution.make_distribution(shared.distribution, shared.devices)


def _print_error(fn):
  """Runs fn(); prints the ValueError it raises (the parent checks it)."""
  try:
    fn()
  except ValueError as e:
    print("ERROR:", e)


def _count_all_reduces(strategy, k, runs=4):
  """Prints how many all-reduce ops each run of a train op executes, after
  "ALL_REDUCES_<k>:".

  A one-variable model under `strategy` with k accumulation steps; the ops
  come from a full trace of each session.run.
  """
  import optimization  # pylint: disable=import-outside-toplevel
  with tf.Graph().as_default(), strategy.scope():
    tf.compat.v1.train.get_or_create_global_step()

    def replica_fn():
      w = tf.compat.v1.get_variable("w", [3],
                                    initializer=tf.ones_initializer())
      return optimization.create_optimizer(tf.reduce_sum(w * w), 0.1, 10, 0,
                                           num_accumulation_steps=k)
    train_ops = strategy.extended.call_for_each_replica(
        tf.autograph.experimental.do_not_convert(replica_fn))
    train_op = tf.group(strategy.experimental_local_results(train_ops))
    counts = []
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(runs):
        metadata = tf.compat.v1.RunMetadata()
        sess.run(train_op, options=tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                 run_metadata=metadata)
        counts.append(sum(
            node.timeline_label.startswith(node.node_name + " = Collective")
            for device in metadata.step_stats.dev_stats
            for node in device.node_stats))
  print("ALL_REDUCES_%d:" % k, json.dumps(counts))


def _run_mirrored(out_dir):
  """Single-device and mirrored (/cpu:0, /cpu:1) runs -> npz files.

  For k = 1 and 2 accumulation steps: single_<k>.npz, mirrored_<k>.npz and
  the all-reduces per run. Then prints the error of a micro-batch that does
  not split over 2 CPUs, and how memory_settings sees the strategy's replicas.
  """
  from memory import memory_settings  # pylint: disable=import-outside-toplevel
  import modeling  # pylint: disable=import-outside-toplevel
  from startup import run_setup  # pylint: disable=import-outside-toplevel
  fv = _parsed_flags("--distribution=mirrored", "--devices=/cpu:0,/cpu:1")
  strategy = _make_distribution(fv)
  print("REPLICAS:", json.dumps(memory_settings.replicas_of(strategy)))
  init = os.path.join(out_dir, "init", "model.ckpt")
  _write_init_checkpoint(init)
  for k in (1, 2):
    for name, distribution in (("single", None), ("mirrored", strategy)):
      run = "%s_%d" % (name, k)
      np.savez(os.path.join(out_dir, run + ".npz"),
               **_train(os.path.join(out_dir, run), init, k, distribution))
    _count_all_reduces(strategy, k)
  fv = _parsed_flags("--distribution=mirrored", "--devices=/cpu:0,/cpu:1",
                     "--output_dir=" + os.path.join(out_dir, "bad"),
                     "--train_batch_size=6", "--num_accumulation_steps=2")
  # The set-up refuses the split before any Estimator is made.
  _print_error(lambda: run_setup.resolve_memory(
      fv, modeling.BertConfig(vocab_size=30), True, strategy))


def _run_worker(out_dir):
  """One multi_worker task (TF_CONFIG set by the parent), three runs.

  1. Trains with k = 1: worker 0 saves multi_worker_1.npz; worker 1 then
     trains the single-device reference single_1.npz.
  2. The same with k = 2 accumulation steps (multi_worker_2, single_2).
  3. Trains with a listener on every update whose chief wishes to stop
     after update 2, after a pause (an evaluation): every worker stops
     there, and each prints the updates it was told of.
  4. Trains again in a new directory; worker 1 exits abruptly (code 3) at
     its second micro-batch, and worker 0 prints the error it gets.
  """
  from runner import estimator  # pylint: disable=import-outside-toplevel
  strategy = _make_distribution(_parsed_flags("--distribution=multi_worker"))
  index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
  init = os.path.join(out_dir, "init", "model.ckpt")
  if index == 0:
    _write_init_checkpoint(init)
  deadline = time.monotonic() + 120
  while not os.path.exists(init + ".index"):
    assert time.monotonic() < deadline, "worker 0 wrote no init checkpoint"
    time.sleep(0.1)
  for k in (1, 2):
    run = "multi_worker_%d" % k
    values = _train(os.path.join(out_dir, run), init, k, strategy)
    if index == 0:
      np.savez(os.path.join(out_dir, run + ".npz"), **values)
    else:
      reference = "single_%d" % k
      np.savez(os.path.join(out_dir, reference + ".npz"),
               **_train(os.path.join(out_dir, reference), init, k))
  listener = _StopAfter(2)
  _train(os.path.join(out_dir, "voted"), init, 1, strategy,
         listeners=[listener])
  print("TOLD:", listener.told, flush=True)
  input_fn = _dying_input_fn(1) if index == 1 else _input_fn
  try:
    _train(os.path.join(out_dir, "dying"), init, 1, strategy, input_fn)
  except estimator.WorkerFailedError as e:
    print("WORKER FAILED:", e)


class _StopAfter(object):
  """A training listener of every update whose chief, after a pause, asks
  to stop after update `step`; it notes (step, checkpoint) of each call."""

  def __init__(self, step):
    self.step = step
    self.told = []

  def needs_checkpoint(self, step):
    del step  # Every update.
    return True

  def after_checkpoint(self, step, checkpoint):
    self.told.append((step, os.path.basename(checkpoint or "")))
    if checkpoint is None:
      return False  # Not the chief.
    time.sleep(1.0)  # The other worker waits for the chief's decision.
    return step == self.step


def _dying_input_fn(micro_batch):
  """_input_fn whose process exits abruptly at micro-batch `micro_batch`."""

  def exit_at(index):
    if int(index) == micro_batch:
      os._exit(3)  # pylint: disable=protected-access
    return index

  def checked(index, features):
    check = tf.py_function(exit_at, [index], tf.int64)
    with tf.control_dependencies([check]):
      return tf.nest.map_structure(tf.identity, features)

  return lambda params: _input_fn(params).enumerate().map(checked)


def _subprocess_main(argv):
  scenario, out_dir = argv[1], argv[2]
  if scenario == "mirrored":
    _run_mirrored(out_dir)
  elif scenario == "worker":
    _run_worker(out_dir)


# -------------------------------------------------------------------- tests


def _python(args, env=None):
  """Starts this file as a script with `args` (output captured)."""
  environment = dict(os.environ, PYTHONPATH=REPO_ROOT,
                     TF_CPP_MIN_LOG_LEVEL="2")
  environment.update(env or {})
  return subprocess.Popen([sys.executable, os.path.abspath(__file__)] + args,
                          env=environment, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=240):
  """(exit code, output) of `process`; kills it if it outlives `timeout`."""
  try:
    output, _ = process.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    process.communicate(timeout=60)
    raise
  return process.returncode, output


def _assert_same_variables(out_dir, k, other_name):
  """The run's trained variables equal the single-device run's (to 1e-5)."""
  reference = np.load(os.path.join(out_dir, "single_%d.npz" % k))
  other = np.load(os.path.join(out_dir, "%s_%d.npz" % (other_name, k)))
  assert sorted(reference.files) == sorted(other.files)
  assert len(reference.files) > 30  # every BERT variable, not a subset
  assert int(other["global_step"]) == STEPS
  for name in reference.files:
    np.testing.assert_allclose(other[name], reference[name], rtol=0,
                               atol=1e-5, err_msg=name)
  # The updates moved the weights, so the equality is not trivial.
  init = tf.train.load_checkpoint(os.path.join(out_dir, "init", "model.ckpt"))
  moved = max(np.max(np.abs(reference[name] - init.get_tensor(name)))
              for name in reference.files if name != "global_step")
  assert moved > 1e-3


@pytest.mark.slow
def test_mirrored_reproduces_single_device(tmp_path):
  code, output = _finish(_python(["mirrored", str(tmp_path)]))
  assert code == 0, output
  for k in (1, 2):
    _assert_same_variables(tmp_path, k, "mirrored")
    # Gradients are all-reduced once per update: on every k-th run only.
    counts = json.loads(
        output.split("ALL_REDUCES_%d:" % k)[1].splitlines()[0])
    assert [count > 0 for count in counts] == [
        (run + 1) % k == 0 for run in range(len(counts))], counts
  # Two replicas, both CPU devices of this process sharing its RAM.
  assert "REPLICAS: [2, 2, 2]" in output, output
  assert ("ERROR: --train_batch_size=6 / --num_accumulation_steps=2 gives "
          "micro-batches of 3 examples, which do not split evenly over the 2 "
          "replicas of --distribution; choose a --train_batch_size that is a "
          "multiple of 4" in output), output


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _start_workers(tmp_path):
  """Starts the 2 workers' processes, each with its TF_CONFIG."""
  workers = ["127.0.0.1:%d" % port for port in _free_ports(2)]
  processes = []
  for index in range(2):
    tf_config = json.dumps({"cluster": {"worker": workers},
                            "task": {"type": "worker", "index": index}})
    # Temporary files in tmp_path: worker 1 ends by os._exit, skipping
    # TensorFlow's clean-up of them.
    processes.append(_python(["worker", str(tmp_path)],
                             env={"TF_CONFIG": tf_config,
                                  "TMPDIR": str(tmp_path)}))
  return processes


@pytest.mark.slow
def test_multi_worker(tmp_path):
  """Reproduces one device, with and without accumulation; stops every
  worker where the chief's listener asks; survives a dead worker."""
  chief, other = _start_workers(tmp_path)
  other_code, other_output = _finish(other)
  # Bounded: _finish fails the test if the chief hangs past its timeout.
  code, output = _finish(chief, timeout=120)
  assert other_code == 3, other_output  # it died on purpose, at the end
  assert code == 0, output
  _assert_same_variables(tmp_path, 1, "multi_worker")
  _assert_same_variables(tmp_path, 2, "multi_worker")
  # Only the chief (worker 0) wrote checkpoints and summaries.
  assert os.path.exists(tmp_path / "multi_worker_1" / "checkpoint")
  assert len(glob.glob(str(tmp_path / "multi_worker_1" / "events.*"))) == 1
  assert ("WORKER FAILED: A worker of the cluster in TF_CONFIG stopped or "
          "is unreachable (TensorFlow said: " in output), output
  # The chief's wish to stop after update 2 stopped both workers there.
  assert "TOLD: [(1, 'model.ckpt-1'), (2, 'model.ckpt-2')]" in output, output
  assert "TOLD: [(1, ''), (2, '')]" in other_output, other_output
  voted = tmp_path / "voted"
  assert sorted(glob.glob(str(voted / "model.ckpt-*.index"))) == [
      str(voted / ("model.ckpt-%d.index" % step)) for step in (0, 1, 2)]


@pytest.mark.parametrize("args, tf_config, message", [
    (["--devices=/cpu:0"], None,
     "--devices=/cpu:0 needs --distribution=mirrored."),
    (["--distribution=mirrored", "--devices=cpu0"], None,
     "--devices: 'cpu0' is not a device name like /gpu:0 or /cpu:1."),
    (["--distribution=mirrored"], None,
     "--distribution=mirrored found 0 GPU(s); pass --devices"),
    (["--distribution=multi_worker"], None,
     "--distribution=multi_worker needs the TF_CONFIG environment variable. "
     "Set TF_CONFIG on every worker to JSON like {\"cluster\": {\"worker\": "
     "[\"host1:12345\", \"host2:12345\"]}, \"task\": {\"type\": \"worker\", "
     "\"index\": 0}}"),
    (["--distribution=multi_worker"], "{cluster",
     "TF_CONFIG={cluster is malformed (JSONDecodeError"),
    (["--distribution=multi_worker"], '{"cluster": {"worker": ["a:1"]}}',
     "is malformed (KeyError: 'task')"),
    (["--distribution=multi_worker"],
     '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", '
     '"index": 1}}', "is malformed (IndexError"),
    (["--distribution=multi_worker"],
     '{"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": '
     '"ps", "index": 0}}', "the task must be a \"chief\" or \"worker\""),
])
def test_make_distribution_errors(monkeypatch, args, tf_config, message):
  if tf_config is None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
  else:
    monkeypatch.setenv("TF_CONFIG", tf_config)
  with pytest.raises(ValueError) as error:
    _make_distribution(_parsed_flags(*args))
  assert message in str(error.value)


if __name__ == "__main__":
  _subprocess_main(sys.argv)
