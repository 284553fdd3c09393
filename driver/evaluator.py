# coding=utf-8
"""Scoring a checkpoint with a task's evaluation, and what a score is kept
as.

`report` is what every evaluation's metrics become: eval_results.txt (or
the task's own file), TensorBoard scalars at their step, and, for an
evaluation a user asked for by itself, Google's "***** Eval results *****"
block. `CheckpointEvaluator` scores one checkpoint after another (during
training, or the checkpoints of a folder afterwards): each score is
reported, added to the evaluation history (driver/eval_history.py) and
logged as one line, and the best checkpoint of the history is kept apart
(checkpoints/best_checkpoint.py).
"""

import os
import time

from absl import logging

from checkpoints import best_checkpoint
from driver import best_metric
from driver import eval_history
from runner import summaries
from tasks import task as task_lib
from userio import output_files
from userio import progress
from userio import verbosity

# The metrics an evaluation's line shows: the chosen one, then the task's
# first few.
_METRICS_SHOWN = 4


def report(metrics, output_dir, *, log=True):
  """Writes a task's Metrics (None: nothing to report) to their file and,
  at their global step, to TensorBoard; with `log`, logs them too."""
  if metrics is None:
    return
  if log and metrics.report is None:
    task_lib.log_block("Eval results", [
        "%s = %s" % (key, metrics.values[key])
        for key in sorted(metrics.values)])
  elif log:
    logging.info("%s", metrics.report)
  if metrics.file_name:
    output_files.write_eval_results(
        os.path.join(output_dir, metrics.file_name), metrics.values,
        flag="--output_dir")
  if metrics.summaries and "global_step" in metrics.values:
    summaries.write_metrics(output_dir, metrics.summaries, metrics.values,
                            metrics.values["global_step"])


class CheckpointEvaluator(object):
  """Scores checkpoints of one output folder into its history.

  Attributes:
    history: the folder's eval_history.EvalHistory.
    objective: the best_metric.Objective that picks the best checkpoint.
  """

  def __init__(self, task, estimator, output_dir, objective, *,
               epoch_of=None, num_train_steps=None):
    """Args:
      task: the run's tasks.task.Task.
      estimator: the runner's Estimator.
      output_dir: the folder whose checkpoints are scored.
      objective: best_metric.Objective.
      epoch_of: callable(step) -> epochs trained by then (None: the run
        counts no epochs).
      num_train_steps: the training's updates, for the lines (None:
        unknown).
    """
    self.task = task
    self.estimator = estimator
    self.output_dir = output_dir
    self.objective = objective
    self.history = eval_history.EvalHistory(output_dir)
    self._epoch_of = epoch_of
    self._num_train_steps = num_train_steps

  def score(self, checkpoint, step):
    """Evaluates `checkpoint` (the one of update `step`), reports and
    records it, keeps the best; returns its history entry."""
    began = time.monotonic()
    with verbosity.only_progress_lines():
      metrics = self.task.evaluate(self.estimator, checkpoint_path=checkpoint)
    values = dict(metrics.values)
    values.setdefault(eval_history.STEP, step)
    report(metrics._replace(values=values), self.output_dir, log=False)
    epoch = self._epoch_of(step) if self._epoch_of else None
    entry = eval_history.make_entry(values, checkpoint, epoch)
    self.history.add(entry)
    self.keep_best()
    logging.info("%s", self._line(entry, time.monotonic() - began))
    return entry

  def best(self):
    """The history's best entry, or None."""
    return best_metric.best_entry(self.history.entries, self.objective)

  def keep_best(self):
    """Keeps the history's best checkpoint in best/ unless the record names
    it already (a run stopped between the two writes catches up here)."""
    best = self.best()
    if best is None:
      return
    record = best_checkpoint.recorded(self.output_dir) or {}
    if not (record.get("global_step") == best[eval_history.STEP] and
            record.get("metric") == self.objective.name and
            best_checkpoint.recorded_path(self.output_dir)):
      prefix = os.path.join(self.output_dir, best[eval_history.CHECKPOINT])
      if not best_checkpoint.has_files(prefix):
        logging.warning(
            "The best evaluation (%s at step %d) names %s, which is gone "
            "(--keep_checkpoint_max removed it); best/ keeps the one "
            "before.", self.objective.name, best[eval_history.STEP], prefix)
        return
      best_checkpoint.keep(self.output_dir, prefix,
                           metric=self.objective.name,
                           value=self.objective.value(best),
                           global_step=best[eval_history.STEP])
    # After every score: what the task tuned on the dev set follows the
    # best checkpoint, not the newest evaluation.
    self.task.on_best_checkpoint(eval_history.metric_values(best))

  def _line(self, entry, seconds):
    """The one line of an evaluation: its step, the chosen metric and the
    task's first others, how it stands, its time."""
    step = entry[eval_history.STEP]
    where = "step %d" % step
    if self._num_train_steps:
      where += "/%d" % self._num_train_steps
    if eval_history.EPOCH in entry:
      where += " (epoch %.3g)" % entry[eval_history.EPOCH]
    values = eval_history.metric_values(entry)
    names = [self.objective.name] + [
        name for name in self.task.eval_metric_names()
        if name != self.objective.name and name in values][
            :_METRICS_SHOWN - 1]
    shown = ", ".join("%s = %s" % (name, _number(values[name]))
                      for name in names)
    best = self.best()
    if best[eval_history.STEP] == step:
      standing = "the best so far"
    else:
      standing = "best %s = %s at step %d" % (
          self.objective.name, _number(self.objective.value(best)),
          best[eval_history.STEP])
    return "Evaluation at %s: %s; %s; %s." % (
        where, shown, standing, progress.format_seconds(seconds))


def _number(value):
  """A metric as the evaluation line shows it."""
  if isinstance(value, float):
    return "%.4f" % value
  return str(value)
