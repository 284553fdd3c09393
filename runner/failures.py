# coding=utf-8
"""How a run that cannot go on ends: the runner's exceptions, and the
contexts that turn TensorFlow's errors into them.

`NonFiniteLossError`, `OutOfMemoryError` and `WorkerFailedError` carry the
advice in their message; userio/cli.py ends a command with "Training
stopped. <advice>" for them ("Evaluation stopped." or "Prediction stopped."
for an `OutOfMemoryError` there), and with one line and 128 + the signal's
number for `TrainingInterrupted`. cli finds these classes by name in this
module, which keeps cli free of TensorFlow.

`out_of_memory_errors` turns an allocation that fails into
`OutOfMemoryError` with out_of_memory's advice (and a save out of disk
space into disk_space's one line); `damaged_records` turns a record file
found cut short or damaged while reading into one line naming it
(tfrecord_input.damaged_records_error).
"""

from __future__ import absolute_import
from __future__ import division
from __future__ import print_function

import contextlib

import tensorflow as tf

from memory import out_of_memory
from runner import tfrecord_input
from userio import disk_space


class NonFiniteLossError(RuntimeError):
  """The training loss became NaN or infinite."""


class OutOfMemoryError(RuntimeError):
  """The device ran out of memory.

  Attributes:
    activity: what ran out of memory: "Training", "Evaluation" or
      "Prediction".
  """

  def __init__(self, message, activity=out_of_memory.TRAINING):
    super(OutOfMemoryError, self).__init__(message)
    self.activity = activity


class WorkerFailedError(RuntimeError):
  """Another worker of a multi-worker cluster stopped or became unreachable."""


class TrainingInterrupted(RuntimeError):
  """SIGINT (Ctrl-C) or SIGTERM stopped training after a checkpoint.

  Attributes:
    signum: the signal's number.
  """

  def __init__(self, message, signum):
    super(TrainingInterrupted, self).__init__(message)
    self.signum = signum


@contextlib.contextmanager
def out_of_memory_errors(activity, batch_size, config):
  """Turns an allocation that fails inside into OutOfMemoryError with
  out_of_memory's advice for `activity` (out_of_memory.TRAINING,
  EVALUATION or PREDICTION), which runs batches of `batch_size` examples
  under RunConfig `config`."""
  try:
    yield
  except tf.errors.ResourceExhaustedError as e:
    if disk_space.problem(e) is not None:
      # A save op out of disk space, not of memory.
      raise disk_space.failure_of(e, flag="--output_dir") from None
    raise OutOfMemoryError(out_of_memory.message(
        e, activity, batch_size=batch_size,
        num_accumulation_steps=config.num_accumulation_steps,
        training_advice=config.oom_message_fn), activity) from e


@contextlib.contextmanager
def damaged_records(graph):
  """Turns a DataLossError of `graph`'s input into one line naming the
  record file (tfrecord_input.damaged_records_error)."""
  try:
    yield
  except tf.errors.DataLossError as e:
    raise tfrecord_input.damaged_records_error(e, graph) from None
