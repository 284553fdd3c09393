# coding=utf-8
"""What a run's evaluation flags ask for, checked before anything slow.

`make` reads --eval_every_steps, --eval_every_epochs, --best_metric,
--early_stopping_patience and _min_delta, --eval_all_checkpoints,
--wait_for_checkpoints and --use_checkpoint against the run's actions and
the task's metrics, and refuses in one line what cannot work. The
EvaluationPlan it returns makes the training loop's listener
(driver/training_evaluation.py) and the evaluator that scores a folder's
checkpoints (driver/checkpoint_scoring.py).
"""

from checkpoints import best_checkpoint
from checkpoints import run_info
from driver import best_metric
from driver import checkpoint_scoring
from driver import eval_schedule
from driver import evaluator as evaluator_lib
from driver import training_evaluation
from userio import cli
from userio import folder_lock

# run_info.json's fields that tell an evaluator in the folder what the
# training counts.
NUM_TRAIN_STEPS_FIELD = "num_train_steps"
STEPS_PER_EPOCH_FIELD = "steps_per_epoch"


class EvaluationPlan(object):
  """The evaluations of one run.

  Attributes:
    schedule: eval_schedule.EvalSchedule of evaluation during training, or
      None.
    objective: best_metric.Objective of --best_metric when evaluations
      choose a best checkpoint, else None.
    patience, min_delta: early stopping's.
    scores_checkpoints: --eval_all_checkpoints.
    wait, timeout_secs: --wait_for_checkpoints, --eval_timeout_secs.
    num_train_steps: the training's updates (this run's, or the one its
      folder records), or None.
    steps_per_epoch: training examples per train batch, or None.
  """

  def __init__(self, *, schedule=None, objective=None, patience=0,
               min_delta=0.0, scores_checkpoints=False, wait=False,
               timeout_secs=0, num_train_steps=None, steps_per_epoch=None):
    self.schedule = schedule
    self.objective = objective
    self.patience = patience or 0
    self.min_delta = min_delta or 0.0
    self.scores_checkpoints = scores_checkpoints
    self.wait = wait
    self.timeout_secs = timeout_secs
    self.num_train_steps = num_train_steps
    self.steps_per_epoch = steps_per_epoch

  @property
  def lock_file(self):
    """The lock a run of this plan holds in --output_dir: an evaluator's
    own beside a training's."""
    return (checkpoint_scoring.LOCK_FILE if self.scores_checkpoints else
            folder_lock.LOCK_FILE)

  def record_fields(self):
    """What a training run adds to run_info.json for an evaluator."""
    fields = {NUM_TRAIN_STEPS_FIELD: self.num_train_steps}
    if self.steps_per_epoch:
      fields[STEPS_PER_EPOCH_FIELD] = self.steps_per_epoch
    return fields

  def evaluator(self, task, estimator, output_dir):
    """The CheckpointEvaluator of the run's folder."""
    epoch_of = None
    if self.steps_per_epoch:
      epoch_of = lambda step: step / self.steps_per_epoch
    return evaluator_lib.CheckpointEvaluator(
        task, estimator, output_dir, self.objective, epoch_of=epoch_of,
        num_train_steps=self.num_train_steps)

  def listener(self, task, estimator, output_dir, *, is_chief):
    """The training loop's listener, or None without evaluations during
    training; only the chief's scores."""
    if self.schedule is None:
      return None
    return training_evaluation.EvaluationDuringTraining(
        self.schedule,
        self.evaluator(task, estimator, output_dir) if is_chief else None,
        patience=self.patience, min_delta=self.min_delta)


def _evaluates_in_training(flags):
  return bool(flags.do_train and flags.do_eval and (
      flags.eval_every_steps or flags.eval_every_epochs))


def check_flags(flags):
  """Refuses evaluation flags that contradict each other or the run's
  actions; reads nothing (the first check of a run).

  Raises:
    cli.UserError naming the flag and the fix.
  """
  eval_schedule.check_interval_flags(
      do_train=flags.do_train, do_eval=flags.do_eval,
      every_steps=flags.eval_every_steps,
      every_epochs=flags.eval_every_epochs)
  _check_scoring_flags(flags)
  if flags.best_metric and not (_evaluates_in_training(flags) or
                                flags.eval_all_checkpoints):
    raise cli.UserError(
        "--best_metric picks the best of several evaluations; add "
        "--eval_every_steps or --eval_every_epochs (with --do_train "
        "--do_eval), or --eval_all_checkpoints.")
  best_metric.check_patience_flags(
      patience=flags.early_stopping_patience,
      min_delta=flags.early_stopping_min_delta,
      evaluates_in_training=_evaluates_in_training(flags))


def make(task, flags, num_train_steps):
  """The EvaluationPlan of the run's flags (`check_flags` passed).

  Args:
    task: the run's tasks.task.Task, its data read.
    flags: startup.shared_flags.SharedFlags.
    num_train_steps: the training's updates, None when it does not train.

  Raises:
    cli.UserError naming the flag and the fix.
  """
  steps_per_epoch = _steps_per_epoch(task, flags)
  schedule = None
  if _evaluates_in_training(flags):
    schedule = eval_schedule.EvalSchedule(
        num_train_steps, every_steps=flags.eval_every_steps,
        every_epochs=flags.eval_every_epochs,
        steps_per_epoch=steps_per_epoch)
  objective = None
  if schedule is not None or flags.eval_all_checkpoints:
    objective = best_metric.check_best_metric(
        flags.best_metric, task.eval_metric_names(),
        task.eval_metric_names()[0])
  if flags.use_checkpoint and not flags.do_train:
    best_checkpoint.check_use_checkpoint(
        flags.use_checkpoint, flags.output_dir,
        given="use_checkpoint" in flags.given)
  recorded = {} if flags.do_train else run_info.read(flags.output_dir) or {}
  if flags.eval_all_checkpoints:
    checkpoint_scoring.check_folder(flags.output_dir,
                                    wait=bool(flags.wait_for_checkpoints))
  return EvaluationPlan(
      schedule=schedule, objective=objective,
      patience=flags.early_stopping_patience,
      min_delta=flags.early_stopping_min_delta,
      scores_checkpoints=bool(flags.eval_all_checkpoints),
      wait=bool(flags.wait_for_checkpoints),
      timeout_secs=flags.eval_timeout_secs,
      num_train_steps=num_train_steps or recorded.get(NUM_TRAIN_STEPS_FIELD),
      steps_per_epoch=steps_per_epoch or recorded.get(STEPS_PER_EPOCH_FIELD))


def _check_scoring_flags(flags):
  """--eval_all_checkpoints and --wait_for_checkpoints against the
  actions."""
  if flags.wait_for_checkpoints and not flags.eval_all_checkpoints:
    raise cli.UserError("--wait_for_checkpoints waits to score new "
                        "checkpoints; add --eval_all_checkpoints.")
  if not flags.eval_all_checkpoints:
    return
  if not flags.do_eval:
    raise cli.UserError("--eval_all_checkpoints scores checkpoints on the "
                        "dev set; add --do_eval.")
  if flags.do_train:
    raise cli.UserError(
        "--eval_all_checkpoints scores the checkpoints of a folder, beside "
        "or after its training; to evaluate while this run trains, use "
        "--eval_every_steps or --eval_every_epochs instead.")
  if flags.eval_timeout_secs is not None and flags.eval_timeout_secs < 1:
    raise cli.UserError("--eval_timeout_secs=%d must be at least 1." %
                        flags.eval_timeout_secs)


def _steps_per_epoch(task, flags):
  """Training examples per --train_batch_size, when the run trains on a
  task that counts epochs; else None."""
  if not flags.do_train or flags.eval_every_epochs is None:
    return None
  num_examples, _ = task.num_train_examples()
  return num_examples / flags.train_batch_size
