# coding=utf-8
"""TensorBoard scalars, written the one way every command writes them.

An `EventFile` is the file tf.compat.v1.summary.FileWriter would write, but
written and flushed in the caller's thread, so that a full disk raises
where the caller can say so in one line (userio/disk_space.py) and leaves
no half-written event behind. `write_metrics` puts a set of metrics at
their global step into a folder of the output directory, as evaluation
does.
"""

import os
import socket
import time

import numpy as np
import tensorflow as tf

from runner import tfrecord_input
from userio import disk_space
from userio import file_systems


def scalar_summary(values, step, writer):
  """Writes a dict tag -> float as one Summary proto at `step`."""
  summary = tf.compat.v1.Summary(value=[
      tf.compat.v1.Summary.Value(tag=tag, simple_value=float(value))
      for tag, value in sorted(values.items())])
  writer.add_summary(summary, step)


class EventFile(object):
  """A new TensorBoard event file in `logdir`, written in this thread.

  The file is what tf.compat.v1.summary.FileWriter writes (TFRecords of
  Event protos, a version event first, named
  events.out.tfevents.<seconds>.<host>, here with the process id after it,
  so that a rerun within the same second does not replace it, and a number
  after that for another file of the process in that second), but
  FileWriter writes from a thread of its own, where a failed write prints a
  traceback. Here each event is written and flushed at once: a write that
  fails raises in the caller, and a local file is cut back to its last
  complete event (removed when it holds none).

  Attributes:
    path: the event file.
    pending_bytes: the size of the event being written.
  """

  def __init__(self, logdir):
    self.path = _new_path(os.path.join(
        logdir, "events.out.tfevents.%010d.%s.%d" % (
            time.time(), socket.gethostname(), os.getpid())))
    self.pending_bytes = 0
    self._complete_bytes = 0
    tf.io.gfile.makedirs(logdir)
    self._writer = tf.io.TFRecordWriter(self.path)
    self._write(tf.compat.v1.Event(wall_time=time.time(),
                                   file_version="brain.Event:2"))

  def add_summary(self, summary, step):
    self._write(tf.compat.v1.Event(wall_time=time.time(), step=int(step),
                                   summary=summary))

  def _write(self, event):
    data = event.SerializeToString()
    self.pending_bytes = len(data) + tfrecord_input.RECORD_FRAMING_BYTES
    try:
      self._writer.write(data)
      self._writer.flush()
    except Exception:
      self._cut_back()
      raise
    self._complete_bytes += self.pending_bytes

  def _cut_back(self):
    """Drops what the failed write left after the last complete event."""
    try:
      self._writer.close()
    except Exception:  # pylint: disable=broad-except
      pass  # The write's own error is the one to report.
    if file_systems.is_remote(self.path) or not os.path.exists(self.path):
      return
    if self._complete_bytes:
      os.truncate(self.path, self._complete_bytes)
    else:
      os.remove(self.path)

  def close(self):
    self._writer.close()


def _new_path(path):
  """`path`, or when a file has that name (a second event file of this
  process within the same second: evaluations during training write one
  each), the first free `path`.<n>."""
  candidate, count = path, 1
  while tf.io.gfile.exists(candidate):
    candidate = "%s.%d" % (path, count)
    count += 1
  return candidate


def write_metrics(output_dir, name, metrics, global_step):
  """Writes the scalar values of `metrics` (name -> number) as TensorBoard
  scalars at `global_step` into output_dir/name (e.g. "eval", beside the
  training summaries). Array values and "global_step" itself are left
  out."""
  folder = os.path.join(output_dir, name)
  scalars = {key: value for key, value in metrics.items()
             if key != "global_step" and np.size(value) == 1}
  with disk_space.writing(output_dir, "evaluation summaries in %s" % name,
                          partial=lambda entry: False, flag="--output_dir"):
    writer = EventFile(folder)
    scalar_summary(scalars, global_step, writer)
    writer.close()
