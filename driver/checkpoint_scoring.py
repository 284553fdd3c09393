# coding=utf-8
"""Scoring the checkpoints a folder holds (--eval_all_checkpoints), and
those a running training goes on saving there (--wait_for_checkpoints).

This is the evaluator that runs beside a training job rather than inside
it: a run that only evaluates, in the training's --output_dir, under a
lock of its own (evaluators exclude each other; the training keeps its
lock). Each checkpoint not in eval_history.jsonl yet is scored, oldest
first, into the same history, TensorBoard folder and best-checkpoint
record as evaluation during training writes.

While waiting, a checkpoint can disappear before its turn: the training's
Saver keeps only --keep_checkpoint_max of them. It is then named in a
warning and passed over.
"""

import os
import time

from absl import logging

from checkpoints import best_checkpoint
from checkpoints import checkpoint_checks
from userio import cli
from userio import file_systems
from userio import folder_lock
from userio import progress

# The lock file of an evaluator in a training's folder.
LOCK_FILE = "eval.lock"
# Seconds between two looks for new checkpoints.
POLL_SECS = 10.0


def check_folder(output_dir, *, wait):
  """Refuses a folder that holds no run to score, before anything slow.

  Raises:
    cli.UserError naming the folder and the fix.
  """
  if checkpoint_checks.checkpoints_in(output_dir, include_unlisted=True):
    return
  if wait and _training_is_running(output_dir):
    return
  raise cli.UserError(
      "--output_dir=%s holds no checkpoint to score%s. Point --output_dir "
      "at a training run's folder%s." % (
          output_dir, "" if not wait else " and no training is running there",
          "" if wait else ", or add --wait_for_checkpoints to wait for a "
          "training that is starting"))


def _training_is_running(output_dir):
  """Whether a live process holds the training lock of local
  `output_dir`; None where locks mean nothing (a remote folder)."""
  if file_systems.is_remote(output_dir):
    return None
  if not os.path.isdir(output_dir):
    return False
  return folder_lock.held_by(output_dir) is not None


def _step_of(prefix):
  return int(prefix.rsplit("-", 1)[1])


def score_all(evaluator, output_dir, *, wait=False, timeout_secs=3600,
              num_train_steps=None, poll_secs=POLL_SECS, sleep=time.sleep,
              clock=time.monotonic):
  """Scores every checkpoint of `output_dir` the history lacks; with
  `wait`, then the new ones as they come, until the training has saved
  its last (`num_train_steps`), no training holds the folder, or
  `timeout_secs` pass without a new one.

  Returns:
    How many checkpoints were scored.
  """
  scored = 0
  last_new = clock()
  while True:
    # Asked before the checkpoints are listed: a training that had ended
    # by then saves nothing after the listing.
    running = _training_is_running(output_dir)
    evaluator.history.reload()
    done = set(evaluator.history.steps())
    pending = [prefix for prefix in checkpoint_checks.checkpoints_in(
        output_dir, include_unlisted=True) if _step_of(prefix) not in done]
    for prefix in pending:
      if _score_if_present(evaluator, prefix):
        scored += 1
        done.add(_step_of(prefix))
    if pending:
      last_new = clock()
    if not wait:
      break
    reason = _why_done(output_dir, running, done, num_train_steps,
                       clock() - last_new, timeout_secs)
    if reason:
      logging.info("Stopped waiting for checkpoints: %s.", reason)
      break
    sleep(poll_secs)
  _log_summary(evaluator, scored)
  return scored


def _score_if_present(evaluator, prefix):
  """Scores checkpoint `prefix`; False when the Saver removed it first."""
  if not best_checkpoint.has_files(prefix):
    logging.warning("%s was removed before its turn (--keep_checkpoint_max "
                    "of the training); passed over.", prefix)
    return False
  try:
    evaluator.score(prefix, _step_of(prefix))
  except (ValueError, OSError):
    if best_checkpoint.has_files(prefix):
      raise
    logging.warning("%s was removed while it was scored (--keep_checkpoint_"
                    "max of the training); passed over.", prefix)
    return False
  return True


def _why_done(output_dir, running, done, num_train_steps, idle_secs,
              timeout_secs):
  """Why waiting for checkpoints ends now, or None to wait on; `running`:
  `_training_is_running` before this round's checkpoints were listed."""
  if num_train_steps and done and max(done) >= num_train_steps:
    return "the training's last checkpoint (step %d) is scored" % max(done)
  if running is False:
    return "no training is running in %s" % output_dir
  if idle_secs >= timeout_secs:
    return "no new checkpoint for %s (--eval_timeout_secs=%d)" % (
        progress.format_seconds(idle_secs), timeout_secs)
  return None


def _log_summary(evaluator, scored):
  """The line that ends the scoring: how many, and how many in all (the
  driver's next line names the best)."""
  logging.info("Scored %d checkpoint%s; %d in %s.", scored,
               "" if scored == 1 else "s", len(evaluator.history.entries),
               os.path.basename(evaluator.history.path))
