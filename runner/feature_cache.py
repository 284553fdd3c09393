# coding=utf-8
"""Feature files (TFRecord): written whole or not at all, and verified
before a later run reuses them.

A task writes the features of a set to a file in --output_dir (e.g.
train.tf_record), which a later run over the same data may reuse, through
`FeatureFile`:

  * the records go to `<file>.tmp`, renamed when complete;
  * a full disk ends in one line (userio/disk_space.py) with about the
    size the whole file needs (the bytes written so far, extrapolated over
    all examples), and no temporary file is left;
  * with `depends_on` (what the records are made from: data files'
    checksums, vocabulary, flags), the sidecar `<file>.meta.json`
    (userio/sidecars.py) then records it, the file's size and checksum and
    its number of records.

`prepare` reuses a file only when its sidecar vouches for it (same inputs,
size and checksum): a file cut short by a full disk or an interrupted copy,
or damaged, is written again, with a log line saying why. A task does it
with (tasks/task.py's `prepare_features` wraps the two):

    def write():
      with feature_cache.FeatureFile(path, len(examples),
                                     depends_on=fingerprint) as out:
        for example in examples:
          out.write(serialized_record(example))

    feature_cache.prepare(path, fingerprint, write)

where `fingerprint` comes from `fingerprint(...)`: what the records are
made from, so that a change to any of it writes the file again.
"""

import contextlib
import os

from absl import logging
import tensorflow as tf

from runner import tfrecord_input
from userio import disk_space
from userio import output_files
from userio import sidecars

# The example order of a feature file whose records were permuted with a
# seed (the other: "file", the data file's order).
SHUFFLED = "shuffled"


class FeatureFile(object):
  """Context that writes a TFRecord file of serialized records.

  Attributes:
    path: the file.
    num_records, num_bytes: what has been written so far.
  """

  def __init__(self, path, num_examples, *, depends_on=None,
               examples_done=None, what="features", flag="--output_dir"):
    """Args:
      path: the file to write.
      num_examples: the examples its records come from (for the estimate
        of the space it needs).
      depends_on: what the records are made from (a JSON object) for the
        sidecar; None writes no sidecar.
      examples_done: callable () -> the examples written so far, when an
        example may give several records (default: one record each).
      what: what the records are, for messages.
      flag: the flag that chose the file's folder, for messages.
    """
    self.path = path
    self.num_records = 0
    self.num_bytes = 0
    self._num_examples = num_examples
    self._depends_on = depends_on
    self._examples_done = examples_done or (lambda: self.num_records)
    self._what = what
    self._flag = flag
    self._stack = None
    self._writer = None

  def _estimate(self):
    return disk_space.extrapolated(self.num_bytes, self._examples_done(),
                                   self._num_examples)

  def __enter__(self):
    # A file without a sidecar is never reused, so the old sidecar goes
    # before the file changes.
    sidecars.remove(self.path)
    folder, name = os.path.split(self.path)
    with contextlib.ExitStack() as stack:
      stack.enter_context(disk_space.writing(
          folder or ".", "%s %s" % (self._what, name), size=self._estimate,
          flag=self._flag, partial=lambda entry: entry.startswith(name) and (
              disk_space.is_partial(entry))))
      temporary = stack.enter_context(output_files.replacing(self.path))
      self._writer = stack.enter_context(tf.io.TFRecordWriter(temporary))
      # Unwound by __exit__; a failure above unwinds what was entered.
      self._stack = stack.pop_all()
    return self

  def write(self, record):
    """Appends one serialized record (bytes)."""
    self._writer.write(record)
    self.num_records += 1
    self.num_bytes += len(record) + tfrecord_input.RECORD_FRAMING_BYTES

  def __exit__(self, kind, value, trace):
    suppressed = self._stack.__exit__(kind, value, trace)
    if kind is None and self._depends_on is not None:
      sidecars.write(self.path, self._depends_on, records=self.num_records)
    return suppressed


def fingerprint(data_files, vocab_file, do_lower_case, max_seq_length, task,
                num_examples, *, record_format, example_order="file",
                shuffle_seed=None, window_stride=None, **settings):
  """What the records of a feature file are made from (its `depends_on`):
  equal fingerprints, equal records.

  Args:
    data_files: the paths the examples were read from (their sha256 is
      recorded, so an edited file is noticed).
    vocab_file: the vocabulary (WordPiece vocab.txt or SentencePiece
      .model); its sha256 is recorded.
    do_lower_case, max_seq_length: the flags.
    task: the task's name, e.g. "mrpc", "swag", "ner".
    num_examples: the examples (or windows) written.
    record_format: the writer's layout version; a script bumps it when its
      records change, so files of the older layout are written again.
    example_order: "file" (the records follow the data file) or "shuffled"
      (permuted with `shuffle_seed`).
    window_stride: the stride of a script that reads long texts in
      windows, or None when it does not.
    **settings: any further JSON values the records depend on (label list,
      context, ...).

  Returns:
    A JSON-ready dict. For run_classifier.py's arguments it is the dict
    its feature files have always recorded, so their caches stay valid.
  """
  result = {
      "record_format": int(record_format),
      "data_sha256": [sidecars.describe_file(path)["sha256"]
                      for path in data_files],
      "vocab_sha256": sidecars.describe_file(vocab_file)["sha256"],
      "do_lower_case": bool(do_lower_case),
      "max_seq_length": int(max_seq_length),
      "task": task,
      "num_examples": int(num_examples),
      "example_order": example_order,
  }
  if example_order == SHUFFLED:
    result["shuffle_seed"] = int(shuffle_seed)
  if window_stride is not None:
    result["window_stride"] = int(window_stride)
  clashes = sorted(set(settings) & (set(result) | {sidecars.FILE_KEY}))
  if clashes:
    raise ValueError("settings may not replace the keys %s." % clashes)
  result.update(settings)
  return result


def check(path, depends_on):
  """Why the feature file `path` may not be reused as the one made from
  `depends_on`, or None when its sidecar vouches for it."""
  return sidecars.check(path, depends_on)


def prepare(path, depends_on, write, what="features"):
  """Reuses `path` when its sidecar vouches for it; else calls `write()`,
  which must write it with its sidecar (a FeatureFile with `depends_on`).

  Returns:
    Whether `path` was written.
  """
  reason = check(path, depends_on)
  if reason is None:
    logging.info("Reusing %s in %s (its sidecar vouches for its inputs, "
                 "size and checksum).", what, path)
    return False
  if tf.io.gfile.exists(path):
    logging.info("Writing %s to %s again: %s.", what, path, reason)
  write()
  return True


def int64_feature(values):
  """A tf.train.Feature of integers."""
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values):
  """A tf.train.Feature of floats."""
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def serialized_example(features):
  """The serialized tf.train.Example of `features`, a dict of name ->
  tf.train.Feature (written in the dict's order)."""
  return tf.train.Example(features=tf.train.Features(
      feature=features)).SerializeToString()
