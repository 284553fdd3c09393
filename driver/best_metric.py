# coding=utf-8
"""Which evaluation was best, and when evaluations stop a run early.

Both are read off the evaluation history (driver/eval_history.py), in the
order of its entries, so a resumed run, a run that scores checkpoints
afterwards and an uninterrupted run come to the same answers from the same
history.

The best entry is the first one whose metric no later entry beats strictly.
Early stopping counts the evaluations since the metric last improved by
more than `min_delta` on the best value so far, and stops the run after the
evaluation that makes the count reach `patience`, as Hugging Face's
EarlyStoppingCallback counts. A value that is not a number (NaN) never
improves on anything.
"""

import math

from userio import cli

# Words in a metric's name that make lower values better.
_LOWER_IS_BETTER = ("loss", "perplexity")


class Objective(object):
  """A metric and its direction.

  Attributes:
    name: the metric's key in the evaluation's results (e.g. "eval_f1").
    higher_is_better: bool.
  """

  def __init__(self, name):
    self.name = name
    self.higher_is_better = not any(word in name.lower()
                                    for word in _LOWER_IS_BETTER)

  @property
  def direction(self):
    return "higher" if self.higher_is_better else "lower"

  def value(self, entry):
    """The metric's value in a history entry, as a float."""
    return float(entry[self.name])

  def improves(self, value, reference, min_delta=0.0):
    """Whether `value` beats `reference` (None: nothing yet) by more than
    `min_delta`."""
    if math.isnan(value):
      return False
    if reference is None or math.isnan(reference):
      return True
    gain = value - reference if self.higher_is_better else reference - value
    return gain > min_delta


def best_entry(entries, objective):
  """The best of `entries` (dicts with objective.name), or None for none."""
  best = None
  for entry in entries:
    if best is None or objective.improves(objective.value(entry),
                                          objective.value(best)):
      best = entry
  return best


def early_stop_entry(entries, objective, patience, min_delta=0.0):
  """The entry after which early stopping ends training, or None.

  Args:
    entries: the history's entries in the order they were evaluated.
    objective: the Objective watched.
    patience: evaluations without an improvement that stop the run (0:
      never).
    min_delta: what an improvement must exceed.
  """
  if not patience:
    return None
  best_value, waited = None, 0
  for entry in entries:
    value = objective.value(entry)
    if best_value is None or objective.improves(value, best_value,
                                                min_delta):
      waited = 0
    else:
      waited += 1
    if objective.improves(value, best_value):
      best_value = value
    if waited >= patience:
      return entry
  return None


def check_best_metric(name, reported, default):
  """The Objective of --best_metric (None: the task's `default`).

  Args:
    name: the flag's value, or None.
    reported: the metric names the task's evaluation reports.
    default: the task's headline metric.

  Raises:
    cli.UserError listing the metrics the task reports.
  """
  chosen = name or default
  if chosen not in reported:
    raise cli.UserError(
        "--best_metric=%s is not a metric this task's evaluation reports; "
        "pass one of %s." % (chosen, ", ".join(sorted(reported))))
  return Objective(chosen)


def check_patience_flags(*, patience, min_delta, evaluates_in_training):
  """Refuses early stopping that nothing could trigger.

  Args:
    patience, min_delta: --early_stopping_patience and
      --early_stopping_min_delta.
    evaluates_in_training: whether the run evaluates during training.

  Raises:
    cli.UserError naming the flag and the fix.
  """
  if patience is None:
    return
  if patience < 0:
    raise cli.UserError("--early_stopping_patience=%d must be positive (0 "
                        "turns early stopping off)." % patience)
  if min_delta and min_delta < 0:
    raise cli.UserError("--early_stopping_min_delta=%g must be 0 or more." %
                        min_delta)
  if patience and not evaluates_in_training:
    raise cli.UserError(
        "--early_stopping_patience counts evaluations during training; add "
        "--do_train --do_eval and --eval_every_steps or "
        "--eval_every_epochs.")
