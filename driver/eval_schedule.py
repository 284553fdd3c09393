# coding=utf-8
"""When a training run scores its dev set: the updates after which it
evaluates.

A run with --do_train and --do_eval and an interval (--eval_every_steps,
--eval_every_epochs, or both) evaluates after every update the interval
names and after the last one. The schedule is a set of update numbers
fixed before training starts, so a resumed run evaluates after the same
updates as an uninterrupted one, whatever the time-based checkpoints do.
"""

import math

from userio import cli

# Added to a fractional epoch boundary before rounding it down, so that a
# boundary that is a whole number in exact arithmetic stays one in floats
# (3668 / 32 * 2 is 229.25, but 0.1 * 3 * 10 is 3.0000000000000004).
_FLOAT_SLACK = 1e-9


class EvalSchedule(object):
  """The updates a training run evaluates after.

  Attributes:
    steps: sorted tuple of update numbers in [1, num_train_steps], the last
      always num_train_steps.
    steps_per_epoch: training examples / train batch size (a float), or
      None when the run counts no epochs (pre-training).
  """

  def __init__(self, num_train_steps, *, every_steps=0, every_epochs=0.0,
               steps_per_epoch=None):
    """Args:
      num_train_steps: the run's updates.
      every_steps: evaluate every this many updates (0: off).
      every_epochs: evaluate every this many epochs (0: off); an epoch ends
        after floor(k * steps_per_epoch) updates, as Google's scripts round
        the number of training steps.
      steps_per_epoch: needed with every_epochs.
    """
    self.num_train_steps = int(num_train_steps)
    self.every_steps = int(every_steps or 0)
    self.every_epochs = float(every_epochs or 0.0)
    self.steps_per_epoch = steps_per_epoch
    steps = {self.num_train_steps}
    if self.every_steps:
      steps.update(range(self.every_steps, self.num_train_steps,
                         self.every_steps))
    if self.every_epochs:
      interval = self.every_epochs * steps_per_epoch
      count = 1
      while True:
        step = int(math.floor(count * interval + _FLOAT_SLACK))
        if step >= self.num_train_steps:
          break
        if step >= 1:
          steps.add(step)
        count += 1
    self.steps = tuple(sorted(steps))
    self._due = frozenset(self.steps)

  def is_due(self, step):
    """Whether the run evaluates after update `step`."""
    return step in self._due

  def epoch(self, step):
    """The epochs done after update `step` (a float), or None without
    epochs."""
    if not self.steps_per_epoch:
      return None
    return step / self.steps_per_epoch

  def describe(self):
    """The schedule in words, e.g. "every 115 updates (1 epoch) and after
    update 345: 3 evaluations"."""
    parts = []
    if self.every_steps:
      parts.append("every %d updates" % self.every_steps)
    if self.every_epochs:
      parts.append("every %g epoch%s" % (
          self.every_epochs, "" if self.every_epochs == 1 else "s"))
    return "%s and after update %d: %d evaluation%s" % (
        " and ".join(parts), self.num_train_steps, len(self.steps),
        "" if len(self.steps) == 1 else "s")


def check_interval_flags(*, do_train, do_eval, every_steps, every_epochs):
  """Refuses an interval that cannot be honoured, before anything slow.

  Args:
    do_train, do_eval: the run's actions.
    every_steps, every_epochs: --eval_every_steps and --eval_every_epochs
      (None: the script does not define that flag).

  Raises:
    cli.UserError naming the flag and the fix.
  """
  given = [(name, value) for name, value in (
      ("--eval_every_steps", every_steps),
      ("--eval_every_epochs", every_epochs)) if value]
  for name, value in given:
    if value < 0:
      raise cli.UserError("%s=%s must be positive (0 turns it off)." %
                          (name, value))
  if not given:
    return
  name = given[0][0]
  if not do_eval:
    raise cli.UserError(
        "%s evaluates on the dev set during training; add --do_eval (and "
        "the dev data it reads)." % name)
  if not do_train:
    raise cli.UserError(
        "%s sets when training evaluates; without --do_train, use "
        "--eval_all_checkpoints to score the checkpoints of --output_dir."
        % name)
