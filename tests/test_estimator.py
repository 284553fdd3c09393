"""Tests for runner/estimator.py (the runner).

A toy linear regression (3 inputs, squared loss, plain SGD) is trained through
the runner and checked against a NumPy re-derivation of the same SGD steps.
"""
import glob
import logging
import os
import shutil
import signal
import time

import numpy as np
import pytest
import tensorflow as tf

from checkpoints import checkpoint_checks
import conftest
from runner import estimator
from memory import out_of_memory

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
LR = 0.1
W_INIT = np.array([0.1, -0.1, 0.2], np.float32)


def make_data(n=16, seed=0):
  """Inputs [n, 3] and targets [n] of a noisy linear function."""
  rng = np.random.RandomState(seed)
  x = rng.randn(n, 3).astype(np.float32)
  y = (x.dot([1.0, -2.0, 0.5]) + 0.3 + 0.1 * rng.randn(n)).astype(np.float32)
  return x, y


def make_input_fn(x, y, training, shuffle=False, hang_at=None,
                  signal_at=None):
  """input_fn over in-memory arrays.

  `hang_at`: if not None, batches pass through a py_function that blocks on
  that batch index (-1: never). `signal_at`: (batch index, signal number)
  to send to this process when that batch is produced.
  """
  def input_fn(params):
    ds = tf.data.Dataset.from_tensor_slices({"x": x, "y": y})
    if training:
      if shuffle:
        ds = ds.shuffle(len(x))
      ds = ds.repeat()
    ds = ds.batch(params["batch_size"], drop_remainder=training)
    if hang_at is not None:
      ds = ds.map(_hang_at_batch(hang_at))
    if signal_at is not None:
      ds = ds.map(_signal_at_batch(*signal_at))
    return ds
  return input_fn


def _signal_at_batch(index, signum):
  """A dataset map that sends `signum` to this process at batch `index`."""
  calls = [0]

  def send(value):
    if calls[0] == index:
      os.kill(os.getpid(), signum)
    calls[0] += 1
    return value

  def fn(features):
    x = tf.py_function(send, [features["x"]], tf.float32)
    x.set_shape(features["x"].shape)
    return {"x": x, "y": features["y"]}
  return fn


def _hang_at_batch(index):
  """A dataset map that blocks forever when batch `index` is produced."""
  calls = [0]

  def wait(value):
    if calls[0] == index:
      time.sleep(600)
    calls[0] += 1
    return value

  def fn(features):
    x = tf.py_function(wait, [features["x"]], tf.float32)
    x.set_shape(features["x"].shape)
    return {"x": x, "y": features["y"]}
  return fn


def _accumulating_sgd(loss, lr, k):
  """SGD applying the mean gradient of every k runs (one update per k)."""
  global_step = tf.compat.v1.train.get_global_step()
  tvars = tf.compat.v1.trainable_variables()
  grads = tf.gradients(loss, tvars)
  optimizer = tf.compat.v1.train.GradientDescentOptimizer(lr)
  if k == 1:
    return optimizer.apply_gradients(zip(grads, tvars), global_step)
  accums = [tf.compat.v1.get_variable(
      v.op.name + "/accum", v.shape, initializer=tf.zeros_initializer(),
      trainable=False) for v in tvars]
  count = tf.compat.v1.get_variable("accum_count", [], tf.int64,
                                    tf.zeros_initializer(), trainable=False)
  with tf.control_dependencies([a.assign_add(g) for a, g in zip(accums,
                                                                grads)]):
    new_count = count.assign_add(1)

  def apply():
    update = optimizer.apply_gradients(
        [(a.read_value() / k, v) for a, v in zip(accums, tvars)], global_step)
    with tf.control_dependencies([update]):
      zeros = [a.assign(tf.zeros_like(a)) for a in accums]
    with tf.control_dependencies(zeros):
      return tf.identity(tf.constant(True))

  return tf.cond(tf.equal(new_count % k, 0), apply,
                 lambda: tf.constant(False))


def model_fn(features, labels, mode, params):
  """Linear regression pred = x.w + b with squared loss."""
  assert labels is None
  w = tf.compat.v1.get_variable(
      "w", [3], initializer=tf.compat.v1.constant_initializer(W_INIT))
  b = tf.compat.v1.get_variable("b", [], initializer=tf.zeros_initializer())
  pred = tf.linalg.matvec(features["x"], w) + b
  if params.get("extra_variable"):
    pred += tf.compat.v1.get_variable("extra", [],
                                      initializer=tf.ones_initializer())
  loss = tf.reduce_mean(tf.square(pred - features["y"]))
  if params.get("oom"):
    loss += _failing_allocation()
    pred += 0.0 * _failing_allocation()
  if params.get("oom_at_initialization"):
    tf.compat.v1.get_variable(
        "too_big", initializer=tf.reshape(_failing_allocation(), []))
  if params.get("nan_loss_at_step"):
    step = tf.compat.v1.train.get_global_step()
    loss *= tf.where(tf.equal(step + 1, params["nan_loss_at_step"]),
                     np.nan, 1.0)
  scaffold_fn = _scaffold_fn(params, b)
  if mode == estimator.ModeKeys.PREDICT:
    return estimator.EstimatorSpec(
        mode, predictions={"pred": pred, "x": features["x"]},
        scaffold_fn=scaffold_fn)
  if mode == estimator.ModeKeys.EVAL:
    mse = tf.compat.v1.metrics.mean_squared_error(features["y"], pred)
    return estimator.EstimatorSpec(mode, loss=loss,
                                   eval_metric_ops={"mse": mse},
                                   scaffold_fn=scaffold_fn)
  lr = tf.constant(params.get("lr", LR), tf.float32)
  tf.compat.v1.add_to_collection("learning_rate", lr)
  tf.compat.v1.add_to_collection("loss_scale", tf.constant(128.0))
  # The runner hands the RunConfig's accumulation steps to the model_fn.
  train_op = _accumulating_sgd(loss, lr,
                               params[estimator.ACCUMULATION_STEPS_KEY])
  return estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                 scaffold_fn=scaffold_fn)


def _failing_allocation():
  """A scalar whose computation fails as an out-of-memory allocation does.

  TensorFlow reports a MemoryError raised in a numpy_function as
  ResourceExhaustedError, the error a real OOM gives; a real huge allocation
  would make the allocator wait and retry for seconds first.
  """
  def allocate():
    raise MemoryError("simulated: cannot allocate the activations")
  return tf.numpy_function(allocate, [], tf.float32)


def _scaffold_fn(params, b):
  """Original-style scaffold_fn: init_from_checkpoint + an init_fn on b."""
  if "init_checkpoint" not in params:
    return None
  set_b = b.assign(params["init_bias"])

  def scaffold_fn():
    tf.compat.v1.train.init_from_checkpoint(params["init_checkpoint"],
                                            {"w": "w"})
    return tf.compat.v1.train.Scaffold(
        init_fn=lambda scaffold, sess: sess.run(set_b))
  return scaffold_fn


def make_estimator(model_dir, k=1, batch=4, params=None, **config_kw):
  config = estimator.RunConfig(model_dir, num_accumulation_steps=k,
                               tf_random_seed=7, **config_kw)
  return estimator.Estimator(model_fn, config, params=params,
                             train_batch_size=batch, eval_batch_size=batch,
                             predict_batch_size=3)


def ckpt_values(path):
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name)
          for name in ("w", "b", "global_step", "micro_step")}


def numpy_sgd(x, y, batch, steps, lr=LR):
  """Reference: w, b after `steps` SGD updates on consecutive batches, and
  the loss of each update."""
  w, b = W_INIT.astype(np.float64), 0.0
  losses = []
  for step in range(steps):
    start = (step * batch) % len(x)
    xb, yb = x[start:start + batch], y[start:start + batch]
    err = xb.dot(w) + b - yb
    losses.append(np.mean(err ** 2))
    w, b = w - lr * 2 * xb.T.dot(err) / batch, b - lr * 2 * np.mean(err)
  return w, b, losses


def run_kill_script_main(model_dir, hang_at=-1):
  """What the subprocess of test_killed_run_resumes runs."""
  x, y = make_data(32)
  est = make_estimator(model_dir, save_checkpoints_steps=2)
  est.train(make_input_fn(x, y, True, shuffle=True, hang_at=hang_at),
            max_steps=6)


def run_signal_script_main(model_dir, signum, k):
  """What the subprocess of test_signal_saves_at_an_update_boundary runs."""
  x, y = make_data(32)
  est = make_estimator(model_dir, k=k)
  try:
    est.train(make_input_fn(x, y, True, signal_at=(3, signum)), max_steps=8)
  except estimator.TrainingInterrupted as e:
    print("interrupted by", e.signum, flush=True)


class _SignalInLastSave(estimator.Estimator):
  """Sends SIGTERM to its own process while saving step `last`."""

  last = 8

  def _save(self, sess, built, step):
    if step == self.last:
      os.kill(os.getpid(), signal.SIGTERM)
    super()._save(sess, built, step)


def run_last_save_script_main(model_dir):
  """What the subprocess of test_signal_in_the_last_save_stops_after_it
  runs."""
  x, y = make_data(32)
  config = estimator.RunConfig(model_dir, tf_random_seed=7,
                               save_checkpoints_steps=5)
  est = _SignalInLastSave(model_fn, config, train_batch_size=4)
  try:
    est.train(make_input_fn(x, y, True), max_steps=_SignalInLastSave.last)
  except estimator.TrainingInterrupted as e:
    print(e, flush=True)


# ------------------------------------------------------------------ training

@pytest.mark.parametrize("k", [1, 2])
def test_train_matches_numpy_sgd(tmp_path, k):
  x, y = make_data()
  est = make_estimator(str(tmp_path), k=k)
  assert est.train(make_input_fn(x, y, True), max_steps=3) is est
  values = ckpt_values(est.latest_checkpoint())
  w_ref, b_ref, _ = numpy_sgd(x, y, batch=4, steps=3)
  np.testing.assert_allclose(values["w"], w_ref, rtol=1e-5)
  np.testing.assert_allclose(values["b"], b_ref, rtol=1e-5, atol=1e-6)
  assert values["global_step"] == 3
  assert values["micro_step"] == 3 * k
  assert est.latest_checkpoint().endswith("model.ckpt-3")


def test_micro_batch_size_passed_to_input_fn(tmp_path):
  seen = []
  x, y = make_data()

  def input_fn(params):
    seen.append(params["batch_size"])
    return make_input_fn(x, y, True)(params)
  make_estimator(str(tmp_path), k=2, batch=4).train(input_fn, max_steps=1)
  assert seen == [2]


def test_batch_size_not_divisible(tmp_path):
  x, y = make_data()
  est = make_estimator(str(tmp_path), k=2, batch=5)
  with pytest.raises(ValueError, match="train_batch_size=5 does not split "
                     "into 2 micro-batches over 1 replicas"):
    est.train(make_input_fn(x, y, True), max_steps=1)


def test_train_stops_when_data_ends(tmp_path):
  x, y = make_data(12)
  est = make_estimator(str(tmp_path))
  est.train(make_input_fn(x, y, False), max_steps=100)
  values = ckpt_values(est.latest_checkpoint())
  assert values["global_step"] == 3  # 12 examples / batch 4
  w_ref, _, _ = numpy_sgd(x, y, batch=4, steps=3)
  np.testing.assert_allclose(values["w"], w_ref, rtol=1e-5)


# ---------------------------------------------------- evaluate and predict

def test_train_evaluate_predict_round_trip(tmp_path):
  x, y = make_data()
  est = make_estimator(str(tmp_path))
  est.train(make_input_fn(x, y, True), max_steps=4)
  values = ckpt_values(est.latest_checkpoint())
  pred_ref = x.astype(np.float64).dot(values["w"]) + values["b"]

  results = est.evaluate(make_input_fn(x, y, False))
  mse_ref = np.mean((pred_ref - y) ** 2)
  assert results["global_step"] == 4
  np.testing.assert_allclose(results["mse"], mse_ref, rtol=1e-5)
  # 4 equal batches: the mean of the batch losses is the overall MSE.
  np.testing.assert_allclose(results["loss"], mse_ref, rtol=1e-5)
  assert glob.glob(os.path.join(str(tmp_path), "eval", "events.out.*"))

  two = est.evaluate(make_input_fn(x, y, False), steps=2, name="half")
  np.testing.assert_allclose(two["mse"], np.mean((pred_ref - y)[:8] ** 2),
                             rtol=1e-5)
  assert glob.glob(os.path.join(str(tmp_path), "eval_half", "events.out.*"))

  preds = list(est.predict(make_input_fn(x, y, False)))
  assert len(preds) == 16  # batches of 3 split into single examples
  np.testing.assert_allclose([p["pred"] for p in preds], pred_ref, rtol=1e-5)
  np.testing.assert_array_equal(preds[5]["x"], x[5])
  batches = list(est.predict(make_input_fn(x, y, False),
                             yield_single_examples=False))
  assert [len(b["pred"]) for b in batches] == [3, 3, 3, 3, 3, 1]


def test_evaluate_without_checkpoint_uses_the_initial_values(tmp_path,
                                                            caplog):
  # As TF1's Estimator: evaluating a pretrained --init_checkpoint needs no
  # training run first.
  x, y = make_data()
  init = _write_init_checkpoint(str(tmp_path / "init"), [1.0, 2.0, 3.0])
  params = {"init_checkpoint": init, "init_bias": 5.0}
  est = make_estimator(str(tmp_path / "empty"), params=params)
  results = est.evaluate(make_input_fn(x, y, False))
  expected = np.mean((x.dot([1.0, 2.0, 3.0]) + 5.0 - y) ** 2)
  np.testing.assert_allclose(results["mse"], expected, rtol=1e-5)
  assert results["global_step"] == 0
  assert "no checkpoint in" in caplog.text and "empty" in caplog.text


def test_checkpoint_of_another_model_is_explained(tmp_path):
  x, y = make_data()
  make_estimator(str(tmp_path)).train(make_input_fn(x, y, True), max_steps=1)
  other = make_estimator(str(tmp_path), params={"extra_variable": True})
  with pytest.raises(ValueError, match="model.ckpt-1 does not match this "
                     "model.*--output_dir"):
    other.evaluate(make_input_fn(x, y, False))


# ---------------------------------------------------------- checkpointing

def _ckpt_steps(model_dir):
  pattern = os.path.join(model_dir, "model.ckpt-*.index")
  return sorted(int(p.split("-")[-1].split(".")[0]) for p in glob.glob(pattern))


def test_checkpoint_interval_and_max_kept(tmp_path):
  x, y = make_data()
  model_dir = str(tmp_path)
  est = make_estimator(model_dir, save_checkpoints_steps=2,
                       keep_checkpoint_max=2)
  est.train(make_input_fn(x, y, True), max_steps=7)
  assert _ckpt_steps(model_dir) == [6, 7]  # saved at 2, 4, 6 and the end
  # A new run keeps counting the old checkpoints towards the maximum.
  make_estimator(model_dir, save_checkpoints_steps=2,
                 keep_checkpoint_max=2).train(make_input_fn(x, y, True),
                                              max_steps=10)
  assert _ckpt_steps(model_dir) == [8, 10]
  state = tf.train.get_checkpoint_state(model_dir)
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
      "model.ckpt-8", "model.ckpt-10"]


def _write_absolute_checkpoint_state(model_dir):
  """Rewrites `checkpoint` with absolute paths, as savers used to write it."""
  prefixes = [os.path.join(model_dir, "model.ckpt-%d" % step)
              for step in _ckpt_steps(model_dir)]
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, prefixes[-1], all_model_checkpoint_paths=prefixes)
  state = tf.train.get_checkpoint_state(model_dir)
  assert state.model_checkpoint_path == prefixes[-1]


@pytest.mark.parametrize("absolute_state", [False, True])
def test_copied_and_moved_dirs_resume_from_their_own_checkpoints(
    tmp_path, absolute_state):
  x, y = make_data()
  original = str(tmp_path / "original")
  make_estimator(original, save_checkpoints_steps=1,
                 keep_checkpoint_max=2).train(make_input_fn(x, y, True),
                                              max_steps=3)
  if absolute_state:
    _write_absolute_checkpoint_state(original)
  else:  # What this runner writes: names relative to the folder.
    with open(os.path.join(original, "checkpoint")) as f:
      assert "\"model.ckpt-3\"" in f.read()
  original_files = sorted(os.listdir(original))
  copy = str(tmp_path / "copy")
  shutil.copytree(original, copy)
  est = make_estimator(copy, save_checkpoints_steps=1, keep_checkpoint_max=2)
  assert est.latest_checkpoint() == os.path.join(copy, "model.ckpt-3")
  est.train(make_input_fn(x, y, True), max_steps=5)
  # The copy resumed at step 3 (no retraining from step 0) and rotated only
  # its own checkpoints; the original is untouched.
  assert _ckpt_steps(copy) == [4, 5]
  assert sorted(os.listdir(original)) == original_files
  assert _ckpt_steps(original) == [2, 3]
  w_ref, b_ref, _ = numpy_sgd(x, y, batch=4, steps=5)
  np.testing.assert_allclose(ckpt_values(est.latest_checkpoint())["w"], w_ref,
                             rtol=1e-5)
  moved = str(tmp_path / "moved")
  shutil.move(original, moved)
  assert checkpoint_checks.latest_checkpoint(moved) == os.path.join(
      moved, "model.ckpt-3")
  assert checkpoint_checks.checkpoints_in(moved) == [
      os.path.join(moved, "model.ckpt-2"), os.path.join(moved, "model.ckpt-3")]


def test_checkpoints_found_without_a_state_file(tmp_path):
  x, y = make_data()
  model_dir = str(tmp_path)
  make_estimator(model_dir, save_checkpoints_steps=5).train(
      make_input_fn(x, y, True), max_steps=10)
  os.remove(os.path.join(model_dir, "checkpoint"))
  assert checkpoint_checks.checkpoints_in(model_dir) == [
      os.path.join(model_dir, "model.ckpt-%d" % step) for step in (0, 5, 10)]
  assert checkpoint_checks.latest_checkpoint(str(tmp_path / "missing")) is None


def test_unlisted_checkpoints_of_a_run_keeping_them_all(tmp_path):
  """keep_checkpoint_max=0 keeps every checkpoint, but TF's `checkpoint`
  file then names only the newest; include_unlisted finds the others."""
  x, y = make_data()
  model_dir = str(tmp_path)
  make_estimator(model_dir, save_checkpoints_steps=5,
                 keep_checkpoint_max=0).train(make_input_fn(x, y, True),
                                              max_steps=15)
  every = [os.path.join(model_dir, "model.ckpt-%d" % step)
           for step in (0, 5, 10, 15)]
  assert checkpoint_checks.checkpoints_in(model_dir) == every[-1:]
  assert checkpoint_checks.checkpoints_in(model_dir,
                                          include_unlisted=True) == every


@pytest.mark.parametrize("k", [1, 2])
def test_resume_sees_the_same_data(tmp_path, k):
  x, y = make_data(24)
  input_fn = make_input_fn(x, y, True, shuffle=True)
  full_dir, split_dir = str(tmp_path / "full"), str(tmp_path / "split")
  make_estimator(full_dir, k=k).train(input_fn, max_steps=6)
  make_estimator(split_dir, k=k).train(input_fn, max_steps=3)
  assert ckpt_values(tf.train.latest_checkpoint(split_dir))["micro_step"] == (
      3 * k)
  make_estimator(split_dir, k=k).train(input_fn, max_steps=6)
  full = ckpt_values(tf.train.latest_checkpoint(full_dir))
  split = ckpt_values(tf.train.latest_checkpoint(split_dir))
  np.testing.assert_allclose(split["w"], full["w"], rtol=1e-6)
  np.testing.assert_allclose(split["b"], full["b"], rtol=1e-6, atol=1e-7)
  assert split["micro_step"] == full["micro_step"] == 6 * k
  # The shuffled order matters: plain consecutive batches give other weights.
  w_unshuffled, _, _ = numpy_sgd(x, y, batch=4, steps=6)
  assert not np.allclose(full["w"], w_unshuffled, rtol=1e-3)


def test_resume_removes_what_a_killed_save_left(tmp_path, caplog):
  """A run killed while TensorFlow saved a checkpoint leaves the save's
  temporary files; the next run removes those, and nothing else."""
  x, y = make_data(24)
  input_fn = make_input_fn(x, y, True)
  model_dir = str(tmp_path)
  make_estimator(model_dir).train(input_fn, max_steps=3)
  kept = sorted(os.listdir(model_dir)) + ["notes.tempstate.txt"]
  left = ["model.ckpt-5.data-00000-of-00001.tempstate7389869690266341530",
          "model.ckpt-5.index.tempstate12", "checkpoint.tmp4f2a9c"]
  for name in left + ["notes.tempstate.txt"]:
    with open(os.path.join(model_dir, name), "w") as f:
      f.write("half")
  caplog.set_level(logging.INFO)
  make_estimator(model_dir).train(input_fn, max_steps=6)
  names = set(os.listdir(model_dir))
  assert not names & set(left), names
  assert set(kept) <= names | {"model.ckpt-0.index",
                               "model.ckpt-0.data-00000-of-00001"}
  assert "Removed model.ckpt-5.index.tempstate12, left by a run stopped" in (
      caplog.text)
  assert ckpt_values(tf.train.latest_checkpoint(model_dir))[
      "global_step"] == 6


def test_runner_sessions_place_only_the_ops_they_run(tmp_path):
  """place_pruned_graph: an op that no run needs is never placed, so one
  pinned to a device that does not exist stops a plain session's first run
  (TensorFlow's default places the whole graph) but not the runner's."""
  graph = tf.Graph()
  with graph.as_default():
    needed = tf.constant(1.0) + 1.0
    with tf.device("/job:nowhere/device:CPU:0"):
      tf.constant(2.0) * 3.0  # never run
  with tf.compat.v1.Session(graph=graph) as plain:
    with pytest.raises(tf.errors.InvalidArgumentError):
      plain.run(needed)
  runner = make_estimator(str(tmp_path))
  with runner._session(graph) as sess:  # pylint: disable=protected-access
    assert sess.run(needed) == 2.0


def test_new_run_saves_its_starting_point_and_a_resumed_run_does_not(
    tmp_path):
  x, y = make_data()
  model_dir = str(tmp_path)
  make_estimator(model_dir, save_checkpoints_steps=1000).train(
      make_input_fn(x, y, True), max_steps=2)
  start = ckpt_values(os.path.join(model_dir, "model.ckpt-0"))
  np.testing.assert_array_equal(start["w"], W_INIT.astype(np.float32))
  assert start["b"] == 0 and start["global_step"] == 0
  resumed_from = os.path.join(model_dir, "model.ckpt-2.index")
  before = os.stat(resumed_from).st_mtime_ns
  make_estimator(model_dir, save_checkpoints_steps=1000).train(
      make_input_fn(x, y, True), max_steps=3)
  assert _ckpt_steps(model_dir) == [0, 2, 3]
  assert os.stat(resumed_from).st_mtime_ns == before  # not saved again
  w_ref, _, _ = numpy_sgd(x, y, batch=4, steps=3)
  latest = ckpt_values(tf.train.latest_checkpoint(model_dir))
  np.testing.assert_allclose(latest["w"], w_ref, rtol=1e-5)


def test_train_already_done_is_a_no_op(tmp_path):
  x, y = make_data()
  est = make_estimator(str(tmp_path))
  est.train(make_input_fn(x, y, True), max_steps=2)
  before = os.path.getmtime(est.latest_checkpoint() + ".index")
  est.train(make_input_fn(x, y, True), max_steps=2)
  assert os.path.getmtime(est.latest_checkpoint() + ".index") == before
  assert _ckpt_steps(str(tmp_path)) == [0, 2]


def test_killed_run_resumes(tmp_path, script_runner):
  killed_dir, ref_dir = str(tmp_path / "killed"), str(tmp_path / "ref")
  script = tmp_path / "train_script.py"
  script.write_text(
      "import sys\n"
      "sys.path[:0] = [%r, %r]\n"
      "import test_estimator\n"
      "test_estimator.run_kill_script_main(sys.argv[1], int(sys.argv[2]))\n"
      % (REPO_ROOT, TESTS_DIR))
  # Batch 3 is requested by step 4, after the step-2 checkpoint: the run
  # blocks there until it is killed.
  running = script_runner.start(str(script), [killed_dir, "3"], 120,
                                output_path=str(tmp_path / "killed.log"))
  try:
    deadline = time.time() + 120
    while (not conftest.checkpoint_step(killed_dir) and running.alive()
           and time.time() < deadline):
      time.sleep(0.05)
  finally:
    running.signal(signal.SIGKILL)
    result = running.wait()
  assert result.returncode == -signal.SIGKILL, result.stdout[-3000:]
  assert _ckpt_steps(killed_dir) == [0, 2]

  # The restart is a new Estimator and graph: only the checkpoint carries
  # state over.
  run_kill_script_main(killed_dir)
  run_kill_script_main(ref_dir)
  killed = ckpt_values(tf.train.latest_checkpoint(killed_dir))
  ref = ckpt_values(tf.train.latest_checkpoint(ref_dir))
  assert killed["global_step"] == ref["global_step"] == 6
  assert killed["micro_step"] == ref["micro_step"] == 6
  np.testing.assert_allclose(killed["w"], ref["w"], rtol=1e-6)
  np.testing.assert_allclose(killed["b"], ref["b"], rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- scaffold

def _write_init_checkpoint(path, w_value):
  with tf.Graph().as_default():
    w = tf.compat.v1.get_variable(
        "w", initializer=tf.constant(w_value, tf.float32))
    with tf.compat.v1.Session() as sess:
      sess.run(w.initializer)
      return tf.compat.v1.train.Saver([w]).save(sess, path)


def test_init_checkpoint_and_init_fn_only_on_fresh_start(tmp_path):
  x, y = make_data()
  model_dir = str(tmp_path / "model")
  first = _write_init_checkpoint(str(tmp_path / "first"), [1.0, 2.0, 3.0])
  other = _write_init_checkpoint(str(tmp_path / "other"), [7.0, 8.0, 9.0])
  # lr = 0 keeps the variables at their starting values.
  params = {"lr": 0.0, "init_checkpoint": first, "init_bias": 5.0}
  make_estimator(model_dir, params=params).train(make_input_fn(x, y, True),
                                                 max_steps=1)
  values = ckpt_values(tf.train.latest_checkpoint(model_dir))
  np.testing.assert_allclose(values["w"], [1.0, 2.0, 3.0])
  assert values["b"] == 5.0

  # predict without a checkpoint initializes as a fresh run does.
  est = make_estimator(str(tmp_path / "none"), params=params)
  preds = [p["pred"] for p in est.predict(make_input_fn(x, y, False))]
  np.testing.assert_allclose(preds, x.dot([1.0, 2.0, 3.0]) + 5.0, rtol=1e-5)

  params = {"lr": 0.0, "init_checkpoint": other, "init_bias": -1.0}
  make_estimator(model_dir, params=params).train(make_input_fn(x, y, True),
                                                 max_steps=2)
  values = ckpt_values(tf.train.latest_checkpoint(model_dir))
  assert values["global_step"] == 2
  np.testing.assert_allclose(values["w"], [1.0, 2.0, 3.0])
  assert values["b"] == 5.0


@pytest.mark.parametrize("target", ["tensor", "op"])
def test_step_callable_runs_the_step_and_reads_after_it(target):
  """Each call runs the step once; fetches see the step's writes."""
  with tf.Graph().as_default():
    counter = tf.compat.v1.get_variable(
        "counter", shape=[], dtype=tf.int64,
        initializer=tf.compat.v1.zeros_initializer())
    total = tf.compat.v1.get_variable(
        "total", shape=[], dtype=tf.float32,
        initializer=tf.compat.v1.zeros_initializer())
    step_op = counter.assign_add(1)
    if target == "op":
      step_op = tf.group(step_op, total.assign_add(0.5))
    with tf.control_dependencies([step_op]):
      fetches = {"counter": counter.read_value(),
                 "twice": 2 * counter.read_value()}
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      step = estimator.make_step_callable(sess, step_op, fetches)
      assert sess.run(counter) == 0  # building the callable runs nothing
      assert step() == {"counter": 1, "twice": 2}
      assert step() == {"counter": 2, "twice": 4}
      assert sess.run(total) == (1.0 if target == "op" else 0.0)


def test_spec_rejects_scaffold_and_scaffold_fn():
  with pytest.raises(ValueError, match="scaffold or scaffold_fn"):
    estimator.EstimatorSpec(estimator.ModeKeys.TRAIN,
                            scaffold=tf.compat.v1.train.Scaffold(),
                            scaffold_fn=lambda: None)
  with pytest.raises(ValueError, match="mode"):
    estimator.EstimatorSpec("training")


# ------------------------------------------------------------------ errors

def test_non_finite_loss_keeps_last_checkpoint(tmp_path):
  x, y = make_data()
  model_dir = str(tmp_path)
  est = make_estimator(model_dir, save_checkpoints_steps=2,
                       params={"nan_loss_at_step": 5})
  with pytest.raises(estimator.NonFiniteLossError) as info:
    est.train(make_input_fn(x, y, True), max_steps=8)
  message = str(info.value)
  for part in ("step 5", "learning rate 0.1", "--learning_rate",
               "--warmup_proportion", "--precision", "input data"):
    assert part in message
  assert _ckpt_steps(model_dir) == [0, 2, 4]
  values = ckpt_values(tf.train.latest_checkpoint(model_dir))
  w_ref, _, _ = numpy_sgd(x, y, batch=4, steps=4)
  np.testing.assert_allclose(values["w"], w_ref, rtol=1e-5)
  # The intact checkpoint resumes.
  make_estimator(model_dir, save_checkpoints_steps=2).train(
      make_input_fn(x, y, True), max_steps=6)
  values = ckpt_values(tf.train.latest_checkpoint(model_dir))
  w_ref, _, _ = numpy_sgd(x, y, batch=4, steps=6)
  np.testing.assert_allclose(values["w"], w_ref, rtol=1e-5)


def test_out_of_memory_error(tmp_path):
  x, y = make_data()
  est = make_estimator(str(tmp_path / "a"), params={"oom": True})
  with pytest.raises(estimator.OutOfMemoryError) as info:
    est.train(make_input_fn(x, y, True), max_steps=1)
  for flag in ("--train_batch_size=4", "--num_accumulation_steps=1",
               "--max_seq_length"):
    assert flag in str(info.value)
  assert isinstance(info.value.__cause__, tf.errors.ResourceExhaustedError)

  est = make_estimator(str(tmp_path / "b"), params={"oom": True},
                       oom_message_fn=lambda e: "plan: " + type(e).__name__)
  with pytest.raises(estimator.OutOfMemoryError,
                     match="^plan: ResourceExhaustedError$"):
    est.train(make_input_fn(x, y, True), max_steps=1)


def test_out_of_memory_in_evaluation_and_prediction_names_their_batch_flags(
    tmp_path, monkeypatch):
  monkeypatch.delenv("TF_MKL_ALLOC_MAX_BYTES", raising=False)  # no cap line
  x, y = make_data()
  est = make_estimator(str(tmp_path), params={"oom": True})
  with pytest.raises(estimator.OutOfMemoryError) as info:
    est.evaluate(make_input_fn(x, y, False))
  assert info.value.activity == "Evaluation"
  assert str(info.value).splitlines() == [
      "Out of memory in batches of 4 examples: lower --eval_batch_size or "
      "--max_seq_length.",
      "TensorFlow said: MemoryError: simulated: cannot allocate the "
      "activations"]
  with pytest.raises(estimator.OutOfMemoryError) as info:
    list(est.predict(make_input_fn(x, y, False)))
  assert info.value.activity == "Prediction"
  assert str(info.value).startswith(
      "Out of memory in batches of 3 examples: lower --predict_batch_size")


def test_out_of_memory_while_initializing_is_training_advice(tmp_path):
  x, y = make_data()
  est = make_estimator(str(tmp_path), params={"oom_at_initialization": True})
  with pytest.raises(estimator.OutOfMemoryError) as info:
    est.train(make_input_fn(x, y, True), max_steps=1)
  assert info.value.activity == "Training"
  assert "--num_accumulation_steps" in str(info.value)
  assert not os.listdir(tmp_path)  # it failed before the first checkpoint


def test_out_of_memory_names_a_cap_on_the_cpu_allocator(tmp_path,
                                                         monkeypatch):
  assert out_of_memory.cpu_allocator_cap_line({}) is None
  assert out_of_memory.cpu_allocator_cap_line(
      {"TF_MKL_ALLOC_MAX_BYTES": str(6 * 2**30)}) == (
          "TF_MKL_ALLOC_MAX_BYTES=6442450944 (6.00 GiB) caps what "
          "TensorFlow's CPU allocator may reserve: raise or unset it if the "
          "machine has more RAM.")
  # The process's own setting reaches the message (TensorFlow read it when
  # its allocator started; only the message looks at it here).
  monkeypatch.setenv("TF_MKL_ALLOC_MAX_BYTES", "not a number")
  x, y = make_data()
  est = make_estimator(str(tmp_path), params={"oom": True})
  with pytest.raises(estimator.OutOfMemoryError) as info:
    est.train(make_input_fn(x, y, True), max_steps=1)
  assert str(info.value).splitlines()[-1] == (
      "TF_MKL_ALLOC_MAX_BYTES=not a number caps what TensorFlow's CPU "
      "allocator may reserve: raise or unset it if the machine has more RAM.")


# ------------------------------------------------------ logs and summaries

def test_progress_line_and_summaries(tmp_path, caplog):
  x, y = make_data()
  model_dir = str(tmp_path)
  caplog.set_level(logging.INFO, logger="absl")
  est = make_estimator(model_dir, log_step_count_steps=2,
                       save_summary_steps=2)
  est.train(make_input_fn(x, y, True), max_steps=4)
  _, _, losses = numpy_sgd(x, y, batch=4, steps=4)

  lines = [r.getMessage() for r in caplog.records
           if r.getMessage().startswith("step ")]
  assert len(lines) == 2
  assert lines[0].startswith("step 2/4 (50.0%%), loss = %.4f, lr = 1.0e-01, "
                             % np.mean(losses[:2]))
  assert "examples/sec" in lines[0] and lines[0].endswith(" left")
  assert lines[1].startswith("step 4/4 (100.0%%), loss = %.4f"
                             % np.mean(losses[2:]))
  assert lines[1].endswith(", 0:00:00 left")

  scalars = {}
  for path in glob.glob(os.path.join(model_dir, "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        scalars[(value.tag, event.step)] = value.simple_value
  assert {tag for tag, _ in scalars} == {"loss", "learning_rate",
                                         "examples_per_sec", "loss_scale"}
  assert sorted(step for tag, step in scalars if tag == "loss") == [2, 4]
  np.testing.assert_allclose(scalars[("loss", 2)], np.mean(losses[:2]),
                             rtol=1e-5)
  np.testing.assert_allclose(scalars[("learning_rate", 4)], LR, rtol=1e-6)
  assert scalars[("loss_scale", 2)] == 128.0
  assert scalars[("examples_per_sec", 2)] > 0


@pytest.mark.parametrize("signum,k", [(signal.SIGTERM, 2), (signal.SIGINT, 1)])
def test_signal_saves_at_an_update_boundary(tmp_path, signum, k, run_script):
  """SIGTERM / Ctrl-C: training finishes the update under way, saves it and
  stops; rerun, it ends with the weights of an uninterrupted run."""
  model_dir = str(tmp_path / "run")
  script = tmp_path / "signal_run.py"
  script.write_text(
      "import sys\n"
      "sys.path[:0] = [%r, %r]\n"
      "import test_estimator\n"
      "test_estimator.run_signal_script_main(sys.argv[1], int(sys.argv[2]), "
      "int(sys.argv[3]))\n" % (REPO_ROOT, TESTS_DIR))
  result = run_script(str(script), [model_dir, str(int(signum)), str(k)],
                      300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "interrupted by %d" % signum in result.stdout, result.stderr[-3000:]
  values = ckpt_values(checkpoint_checks.latest_checkpoint(model_dir))
  assert 1 <= values["global_step"] < 8
  assert values["micro_step"] == k * values["global_step"]
  x, y = make_data(32)
  est = make_estimator(model_dir, k=k)
  est.train(make_input_fn(x, y, True), max_steps=8)
  w_ref, b_ref, _ = numpy_sgd(x, y, batch=4, steps=8)
  values = ckpt_values(est.latest_checkpoint())
  np.testing.assert_allclose(values["w"], w_ref, rtol=1e-5)
  np.testing.assert_allclose(values["b"], b_ref, rtol=1e-5, atol=1e-6)


def test_signal_in_the_last_save_stops_after_it(tmp_path, run_script):
  """SIGTERM while the end-of-training checkpoint is written: the save
  completes and the run stops with the line naming it, rather than going on
  or dying inside the save."""
  model_dir = str(tmp_path / "run")
  script = tmp_path / "last_save_run.py"
  script.write_text(
      "import sys\n"
      "sys.path[:0] = [%r, %r]\n"
      "import test_estimator\n"
      "test_estimator.run_last_save_script_main(sys.argv[1])\n" % (
          REPO_ROOT, TESTS_DIR))
  result = run_script(str(script), [model_dir], 300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert ("Training stopped by SIGTERM at step 8/8; checkpoint %s holds it."
          % os.path.join(model_dir, "model.ckpt-8")) in result.stdout, (
              result.stdout, result.stderr[-3000:])
  x, y = make_data(32)
  w_ref, b_ref, _ = numpy_sgd(x, y, batch=4, steps=8)
  values = ckpt_values(checkpoint_checks.latest_checkpoint(model_dir))
  np.testing.assert_allclose(values["w"], w_ref, rtol=1e-5)
  np.testing.assert_allclose(values["b"], b_ref, rtol=1e-5, atol=1e-6)


def test_time_interval_checkpoints(tmp_path):
  """A tiny save_checkpoints_secs saves at every update boundary, never in
  the middle of an accumulated update."""
  x, y = make_data()
  model_dir = str(tmp_path)
  est = make_estimator(model_dir, k=2, save_checkpoints_steps=1000,
                       save_checkpoints_secs=1e-6, keep_checkpoint_max=10)
  est.train(make_input_fn(x, y, True), max_steps=3)
  assert _ckpt_steps(model_dir) == [0, 1, 2, 3]
  with pytest.raises(ValueError, match="save_checkpoints_secs"):
    make_estimator(model_dir, save_checkpoints_secs=0)


def test_evaluate_and_predict_log_their_progress(tmp_path, caplog):
  x, y = make_data()
  est = make_estimator(str(tmp_path))
  est.train(make_input_fn(x, y, True), max_steps=1)
  with caplog.at_level(logging.INFO):
    est.evaluate(make_input_fn(x, y, False), num_batches=4)
    predictions = list(est.predict(make_input_fn(x, y, False),
                                   num_batches=6))
  assert len(predictions) == 16
  text = caplog.text
  assert "Evaluating: 4 batches in" in text
  assert "Predicting: 6 batches in" in text
