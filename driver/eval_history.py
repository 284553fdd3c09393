# coding=utf-8
"""The evaluation history of an output folder: eval_history.jsonl.

One JSON object per line, one line per evaluated checkpoint, ordered by
update: "global_step", "checkpoint" (its name in the folder), "epoch" when
the run counts epochs, then the task's metrics under the names
eval_results.txt gives them. A metric that is not a number is written as
null. Keys are sorted and floats written exactly (Python's shortest
round-trip form), so the same evaluations give the same bytes: a resumed
run's history is the uninterrupted run's, byte for byte. Times are left
out for that reason; the log and TensorBoard have them.

Training that evaluates on a schedule, and the scoring of a folder's
checkpoints afterwards or beside a running training, write the same file;
the whole file is rewritten (under a temporary name, then renamed) for each
entry, so a reader never sees half of one.
"""

import json
import math
import os

import numpy as np
import tensorflow as tf

from userio import cli
from userio import output_files

HISTORY_FILE = "eval_history.jsonl"
# The fields of an entry that are not metrics.
STEP, CHECKPOINT, EPOCH = "global_step", "checkpoint", "epoch"


def _json_value(value):
  """A metric's value as JSON takes it: a number, or None for NaN and
  infinities."""
  value = np.asarray(value).item()
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value


def make_entry(metrics, checkpoint, epoch=None):
  """The history entry of one evaluation.

  Args:
    metrics: the task's results, with "global_step".
    checkpoint: the evaluated checkpoint's path.
    epoch: the epochs trained at its step, or None.
  """
  entry = {key: _json_value(value) for key, value in metrics.items()
           if np.size(value) == 1}
  entry[STEP] = int(metrics[STEP])
  entry[CHECKPOINT] = os.path.basename(checkpoint)
  if epoch is not None:
    entry[EPOCH] = round(float(epoch), 6)
  return entry


def metric_values(entry):
  """The metrics of an entry (NaN for null), without its other fields."""
  return {key: (math.nan if value is None else value)
          for key, value in entry.items()
          if key not in (STEP, CHECKPOINT, EPOCH)}


class EvalHistory(object):
  """The entries of a folder's eval_history.jsonl.

  Attributes:
    path: the file.
    entries: list of dicts, ordered by global_step, one per step.
  """

  def __init__(self, output_dir):
    self.path = os.path.join(output_dir, HISTORY_FILE)
    self.entries = _read(self.path)

  def reload(self):
    """Reads the file again (another process may have added entries)."""
    self.entries = _read(self.path)

  def steps(self):
    """The global steps evaluated."""
    return [entry[STEP] for entry in self.entries]

  def entry_at(self, step):
    """The entry of `step`, or None."""
    for entry in self.entries:
      if entry[STEP] == step:
        return entry
    return None

  def up_to(self, step):
    """The entries of steps up to `step`, in order."""
    return [entry for entry in self.entries if entry[STEP] <= step]

  def add(self, entry):
    """Adds `entry` (replacing one of the same step) and rewrites the
    file."""
    self.entries = sorted(
        [e for e in self.entries if e[STEP] != entry[STEP]] + [entry],
        key=lambda e: e[STEP])
    output_files.write_text(self.path, "".join(
        json.dumps(e, sort_keys=True, allow_nan=False) + "\n"
        for e in self.entries), flag="--output_dir")


def _read(path):
  """The entries of `path` (none when it does not exist).

  Raises:
    cli.UserError naming the line that is not an entry.
  """
  if not tf.io.gfile.exists(path):
    return []
  with tf.io.gfile.GFile(path, "r") as reader:
    lines = reader.read().splitlines()
  entries = []
  for number, line in enumerate(lines, 1):
    try:
      entry = json.loads(line)
      if not isinstance(entry.get(STEP), int):
        raise ValueError("no integer %r" % STEP)
    except (ValueError, AttributeError) as e:
      raise cli.UserError(
          "%s:%d is not an evaluation entry (%s); delete that line, or the "
          "file to evaluate the checkpoints again." % (path, number, e)
      ) from None
    entries.append(entry)
  return sorted(entries, key=lambda e: e[STEP])
