"""The runner's training listeners (Estimator.train's saving_listeners), on
test_estimator's toy linear regression, against its NumPy SGD: a listener
is told of a checkpoint of each update it needs, holding exactly that
update's weights; it can end training; a resumed run tells it of the
checkpoint it starts from; a signal while it works stops the run at once.
"""
import os
import signal

import numpy as np
import pytest

from checkpoints import checkpoint_checks
from runner import estimator
from runner import training_listener
import test_estimator

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)


class Recorder(training_listener.TrainingListener):
  """Needs the updates `steps`; notes (step, checkpoint step, w) of each
  call; asks to stop after `stop_at`; raises at `fail_at`; sends itself
  `signal_at` = (step, signum) and then waits for it."""

  def __init__(self, steps, stop_at=None, fail_at=None, signal_at=None):
    self.steps = set(steps)
    self.stop_at = stop_at
    self.fail_at = fail_at
    self.signal_at = signal_at
    self.calls = []

  def needs_checkpoint(self, step):
    return step in self.steps

  def after_checkpoint(self, step, checkpoint):
    values = test_estimator.ckpt_values(checkpoint)
    self.calls.append((step, int(values["global_step"]), values["w"]))
    if step == self.fail_at:
      raise RuntimeError("listener failed at %d" % step)
    if self.signal_at and step == self.signal_at[0]:
      os.kill(os.getpid(), self.signal_at[1])
      signal.pause()  # Raised out of by the handler; else the test hangs.
    return step == self.stop_at


def _train(model_dir, listener, max_steps=8, **config):
  x, y = test_estimator.make_data(32)
  est = test_estimator.make_estimator(model_dir, **config)
  est.train(test_estimator.make_input_fn(x, y, True), max_steps=max_steps,
            saving_listeners=[listener])
  return est


def _sgd_w(steps):
  x, y = test_estimator.make_data(32)
  return test_estimator.numpy_sgd(x, y, batch=4, steps=steps)[0]


def test_each_needed_update_is_saved_and_told_and_training_is_unchanged(
    tmp_path):
  listener = Recorder({3, 5})
  est = _train(str(tmp_path), listener, save_checkpoints_steps=1000)
  assert [(step, saved) for step, saved, _ in listener.calls] == [(3, 3),
                                                                   (5, 5)]
  for step, _, w in listener.calls:
    np.testing.assert_allclose(w, _sgd_w(step), rtol=1e-5)
  # Saved for the listener (and the start and the end), nothing else.
  assert test_estimator._ckpt_steps(str(tmp_path)) == [0, 3, 5, 8]  # pylint: disable=protected-access
  np.testing.assert_allclose(
      test_estimator.ckpt_values(est.latest_checkpoint())["w"], _sgd_w(8),
      rtol=1e-5)


@pytest.mark.parametrize("k", [1, 2])
def test_a_listener_ends_training_after_its_update(tmp_path, k):
  listener = Recorder({2, 5, 7}, stop_at=5)
  est = _train(str(tmp_path), listener, k=k)
  assert [step for step, _, _ in listener.calls] == [2, 5]
  values = test_estimator.ckpt_values(est.latest_checkpoint())
  assert int(values["global_step"]) == 5
  assert int(values["micro_step"]) == 5 * k
  np.testing.assert_allclose(values["w"], _sgd_w(5), rtol=1e-5)
  # A rerun is told of update 5 again, stops before building anything and
  # leaves the checkpoints as they were.
  again = Recorder({2, 5, 7}, stop_at=5)
  _train(str(tmp_path), again, k=k)
  assert [step for step, _, _ in again.calls] == [5]
  assert checkpoint_checks.latest_checkpoint(str(tmp_path)).endswith("-5")


def test_a_resumed_run_is_told_of_its_checkpoint_first(tmp_path):
  """A run that failed in the listener after saving update 3: the rerun
  tells a listener of update 3 before its first step, then of 6; at the
  end a run that has nothing left to train tells it of the last."""
  with pytest.raises(RuntimeError, match="listener failed at 3"):
    _train(str(tmp_path), Recorder({3, 6}, fail_at=3))
  assert checkpoint_checks.latest_checkpoint(str(tmp_path)).endswith("-3")
  resumed = Recorder({3, 6, 8})
  est = _train(str(tmp_path), resumed)
  assert [(step, saved) for step, saved, _ in resumed.calls] == [
      (3, 3), (6, 6), (8, 8)]
  for step, _, w in resumed.calls:
    np.testing.assert_allclose(w, _sgd_w(step), rtol=1e-5)
  np.testing.assert_allclose(
      test_estimator.ckpt_values(est.latest_checkpoint())["w"], _sgd_w(8),
      rtol=1e-5)
  done = Recorder({8})
  _train(str(tmp_path), done)
  assert [step for step, _, _ in done.calls] == [8]


def run_signal_in_listener_main(model_dir, signum):
  """What the subprocess of the signal test runs."""
  try:
    _train(model_dir, Recorder({3}, signal_at=(3, signum)))
  except estimator.TrainingInterrupted as e:
    print(e, flush=True)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_a_listener_works_stops_at_once(tmp_path, signum,
                                                        run_script):
  """The listener waits for the signal it sent itself: only a signal that
  raises where the program is lets the run end (the test's timeout would
  end it otherwise). The checkpoint is whole, and the rerun tells the
  listener again before training on."""
  model_dir = str(tmp_path / "run")
  script = tmp_path / "listener_signal.py"
  script.write_text(
      "import sys\n"
      "sys.path[:0] = [%r, %r]\n"
      "import test_training_listener\n"
      "test_training_listener.run_signal_in_listener_main(sys.argv[1], "
      "int(sys.argv[2]))\n" % (REPO_ROOT, TESTS_DIR))
  result = run_script(str(script), [model_dir, str(int(signum))], 300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert ("Training stopped by %s at step 3/8; checkpoint %s holds it. Run "
          "the same command again to resume." % (
              signal.Signals(signum).name,
              os.path.join(model_dir, "model.ckpt-3"))) in result.stdout, (
                  result.stdout, result.stderr[-3000:])
  resumed = Recorder({3})
  est = _train(model_dir, resumed)
  assert [step for step, _, _ in resumed.calls] == [3]
  np.testing.assert_allclose(resumed.calls[0][2], _sgd_w(3), rtol=1e-5)
  np.testing.assert_allclose(
      test_estimator.ckpt_values(est.latest_checkpoint())["w"], _sgd_w(8),
      rtol=1e-5)
