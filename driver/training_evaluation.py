# coding=utf-8
"""Evaluation during training: the listener the training loop calls after
the updates of the schedule.

The loop saves a checkpoint after every update of the EvalSchedule, then
calls `after_checkpoint`. The chief scores that checkpoint (the same
evaluation a separate --do_eval of it runs), and the history decides
whether early stopping ends the run. Nothing here touches the training
session: evaluation builds its own graph and session from the saved
checkpoint, so training consumes the same data, randomness and steps with
evaluations as without them.

A run resumed after a stop is called for the checkpoint it restores too:
an evaluation that a stop cut short runs then, and a run that early
stopping already ended stays ended. Both are read off the history, which
is why the decisions here keep no state of their own.
"""

from absl import logging

from driver import best_metric
from runner import training_listener


class EvaluationDuringTraining(training_listener.TrainingListener):
  """Scores the schedule's checkpoints and stops the run early when asked.

  On a worker that is not the chief, nothing is scored and the wish to stop
  is the chief's, which the runner shares among the workers.
  """

  def __init__(self, schedule, evaluator, *, patience=0, min_delta=0.0):
    """Args:
      schedule: the driver's eval_schedule.EvalSchedule.
      evaluator: an evaluator.CheckpointEvaluator on the chief, None on
        the other workers.
      patience, min_delta: early stopping's (0: off).
    """
    self.schedule = schedule
    self.evaluator = evaluator
    self.patience = patience
    self.min_delta = min_delta
    self.stopped_at = None

  def needs_checkpoint(self, step):
    return self.schedule.is_due(step)

  def after_checkpoint(self, step, checkpoint):
    """Scores the checkpoint of update `step` unless the history holds it;
    returns whether early stopping ends training here."""
    if self.evaluator is None:
      return False
    history = self.evaluator.history
    if history.entry_at(step) is None:
      self.evaluator.score(checkpoint, step)
    else:
      self.evaluator.keep_best()
    stop = best_metric.early_stop_entry(
        history.up_to(step), self.evaluator.objective, self.patience,
        self.min_delta)
    if stop is None:
      return False
    self.stopped_at = step
    logging.info(
        "Early stopping: %s has not improved%s for %d evaluation%s "
        "(--early_stopping_patience=%d); training ends at step %d of %d.",
        self.evaluator.objective.name,
        " by more than %g" % self.min_delta if self.min_delta else "",
        self.patience, "" if self.patience == 1 else "s", self.patience,
        step, self.schedule.num_train_steps)
    return True
