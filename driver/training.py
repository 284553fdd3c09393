# coding=utf-8
"""The one driver of every training command.

A training command is its flags and a task (tasks/task.py). `run` does
what every one of them does alike, in this order:

  1. refuses a command line that asks for nothing;
  2. starts: logging, the shared flags, the config and the vocabulary
     checked (startup/run_setup.py), then the task's own checks;
  3. refuses an --output_dir of another run, reads every requested set of
     data and checks it, and counts the training steps, all before anything
     slow starts;
  4. sets the run up: the output folder made and locked, the checkpoints
     checked, the memory settings, the RunConfig;
  5. trains, evaluating on the schedule of the evaluation flags
     (driver/evaluation_plan.py), then (on the chief of a cluster only)
     scores the folder's checkpoints, evaluates, predicts and exports, each
     as the flags ask, with the checkpoint --use_checkpoint names (the best
     evaluated one by default), writing the metrics the task computed to
     their file and to TensorBoard;
  6. ends with a line saying how long the run took and where its outputs
     are.
"""

import contextlib
import datetime
import shutil
import tempfile
import time

from absl import logging

from checkpoints import best_checkpoint
from checkpoints import run_info
from driver import checkpoint_scoring
from driver import evaluation_plan
from driver import evaluator as evaluator_lib
from runner import distribution as distribution_lib
from runner import estimator as estimator_lib
from runner import training_graph
from startup import run_setup
from tasks import task as task_lib
from userio import cli

# The flags that ask a training command for something, in the order a
# message lists them; a command defines some of them.
_ACTION_FLAGS = ("do_train", "do_eval", "do_predict", "export_dir")


def run(task, flags):
  """Runs the actions `flags` ask for on `task`.

  Args:
    task: a tasks/task.Task, made from the command's own flags.
    flags: the command line's startup/shared_flags.SharedFlags.

  Raises:
    cli.UserError for bad input, named in one line, before anything slow.
  """
  began = time.monotonic()
  _check_actions(flags)
  evaluation_plan.check_flags(flags)
  distribution_lib.check_flags(flags.distribution, flags.devices)
  with _work_dir(flags) as work_dir:
    _run(task, flags, work_dir, began)


def _run(task, flags, work_dir, began):
  """`run`'s steps, with what this process derives from the data (feature
  files, a converted --init_checkpoint) written into `work_dir`."""
  start = run_setup.start(flags, do_train=bool(flags.do_train),
                          min_seq_length=task.min_seq_length,
                          vocab_required=task.reads_text, work_dir=work_dir)
  flags = start.flags
  task.start(flags, start.bert_config, start.tokenizer)
  task.work_dir = work_dir
  record = task.record()
  run_setup.check_output_dir(flags.output_dir, record,
                             do_train=flags.do_train)
  task.read_data()
  steps = task.train_steps() if flags.do_train else (None, None)
  plan = evaluation_plan.make(task, flags, steps[0])
  if flags.do_train:
    record = dict(record, **plan.record_fields())
  setup = run_setup.set_up(flags, start.bert_config, do_train=flags.do_train,
                           record=record, step_memory=task.step_memory(),
                           heads=task.head_shapes(),
                           heads_are_new=task.heads_are_new,
                           lock_file=plan.lock_file)
  for line in task.settings_lines():
    logging.info("%s", line)
  estimator = _estimator(task, flags, start.bert_config, setup, steps)
  is_chief = estimator.config.is_chief
  listener = None
  if flags.do_train:
    listener = plan.listener(task, estimator, flags.output_dir,
                             is_chief=is_chief)
    _train(task, estimator, flags.train_batch_size, steps[0], listener)
  if is_chief and plan.scores_checkpoints:
    checkpoint_scoring.score_all(
        plan.evaluator(task, estimator, flags.output_dir), flags.output_dir,
        wait=plan.wait, timeout_secs=plan.timeout_secs,
        num_train_steps=plan.num_train_steps)
  if is_chief:
    _finish(task, estimator, flags, began,
            evaluated=listener is not None or plan.scores_checkpoints)
  else:
    # Evaluation, prediction and export run on one device, the chief's.
    logging.info("This worker's training is done; the chief writes the "
                 "other outputs.")


@contextlib.contextmanager
def _work_dir(flags):
  """Where this process writes what it derives from the data: --output_dir,
  but on a worker of a cluster that is not the chief a temporary folder of
  its own, removed at the end. Every worker of a cluster sees the same
  --output_dir and derives the same files; only the chief writes there."""
  if distribution_lib.is_chief_task(flags.distribution):
    yield flags.output_dir
    return
  folder = tempfile.mkdtemp(prefix="bert_worker_")
  try:
    yield folder
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def _check_actions(flags):
  """Refuses a command line that sets none of the action flags its
  command defines."""
  defined = [name for name in _ACTION_FLAGS if name in flags.defined]
  if not any(getattr(flags, name) for name in defined):
    raise cli.UserError("Nothing to do: pass at least one of %s." %
                        _listed(["--" + name for name in defined]))


def _listed(names):
  """"a, b and c"."""
  return (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1
          else names[0])


def _estimator(task, flags, bert_config, setup, steps):
  """The Estimator of the task's head with the run's settings; `steps`:
  (num_train_steps, num_warmup_steps), Nones for a run that does not
  train."""
  num_train_steps, num_warmup_steps = steps
  settings = training_graph.ModelSettings(
      bert_config=bert_config, init_checkpoint=flags.init_checkpoint,
      learning_rate=flags.learning_rate, num_train_steps=num_train_steps,
      num_warmup_steps=num_warmup_steps, use_tpu=flags.use_tpu,
      use_one_hot_embeddings=flags.use_tpu, optimizer=flags.optimizer,
      gradient_checkpointing=setup.gradient_checkpointing,
      compute_dtype=setup.compute_dtype,
      skip_padding=run_setup.skip_padding(bool(flags.skip_padding),
                                          flags.use_xla))
  return estimator_lib.Estimator(
      model_fn=training_graph.model_fn_builder(task.head, settings),
      config=setup.run_config, train_batch_size=flags.train_batch_size,
      eval_batch_size=flags.eval_batch_size,
      predict_batch_size=flags.predict_batch_size)


def _train(task, estimator, train_batch_size, num_train_steps, listener):
  """Writes (or reuses) the training features and trains to
  `num_train_steps` updates, telling `listener` (None: none) of the
  checkpoints it asks for."""
  input_fn, lines = task.train_input_fn()
  if listener is not None and listener.evaluator is not None:
    lines.append("Evaluations: %s" % listener.schedule.describe())
  task_lib.log_block("Running training", lines + [
      "Batch size = %d" % train_batch_size,
      "Num steps = %d" % num_train_steps])
  estimator.train(input_fn=input_fn, max_steps=num_train_steps,
                  saving_listeners=[listener] if listener else None)


def _finish(task, estimator, flags, began, *, evaluated):
  """Evaluates (unless the run `evaluated` already), predicts and exports
  as the flags ask, with the checkpoint --use_checkpoint names; the last
  line."""
  checkpoint = best_checkpoint.resolve(
      flags.use_checkpoint, flags.output_dir,
      given="use_checkpoint" in flags.given)
  if evaluated:
    _log_best(flags.output_dir, checkpoint)
  if flags.do_eval and not evaluated:
    evaluator_lib.report(task.evaluate(estimator, checkpoint),
                         flags.output_dir)
  if flags.do_predict:
    evaluator_lib.report(task.predict(estimator, checkpoint),
                         flags.output_dir)
  export = None
  if flags.export_dir:
    export = estimator.export_saved_model(
        flags.export_dir, task.serving_input_receiver_fn(),
        checkpoint_path=checkpoint, assets=run_info.assets(flags.output_dir))
  _log_end(began, flags.output_dir, export)


def _log_best(output_dir, checkpoint):
  """The line that says which evaluated checkpoint was best, where it is
  and what uses it."""
  best = best_checkpoint.describe(output_dir)
  if best is None:
    return
  used = ("prediction and --export_dir use it (--use_checkpoint=latest for "
          "the newest)" if checkpoint == best_checkpoint.recorded_path(
              output_dir) else "this run uses %s (--use_checkpoint)" % (
                  checkpoint or "the newest checkpoint"))
  logging.info("Best checkpoint: %s, kept as %s; %s.", best,
               best_checkpoint.recorded_path(output_dir), used)


def _log_end(began, output_dir, export):
  """The run's last line: its time, and where its outputs are."""
  elapsed = datetime.timedelta(seconds=round(time.monotonic() - began))
  where = "outputs in %s" % output_dir
  if export:
    where += ", SavedModel in %s" % export
  logging.info("Done in %s: %s.", elapsed, where)
