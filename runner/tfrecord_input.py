# coding=utf-8
"""The `input_fn` of a feature file: batches from a TFRecord file.

`tfrecord_input_fn` reads one file; a stream of records built otherwise
(several files interleaved, say) is batched with `parse_batches`.
Records are batched first and then parsed with one vectorized
`tf.io.parse_example` per batch, several batches in parallel with their
order kept, so the input pipeline costs a few ops per step rather than
several per example and never starves the step (the runner prefetches the
batches, see runner/model_graphs.py). `first_record` reads a file's first
record in plain Python, for checks that must not start TensorFlow's runtime.

The files a graph's input reads are noted in the graph (`note_record_files`),
so that a record found cut short or damaged while a session runs (a
DataLossError, which does not name its file) ends in one line naming the
file (`damaged_records_error`).
"""

import os
import re
import struct

import tensorflow as tf

from userio import cli
from userio import sidecars

# The original's shuffle buffer.
SHUFFLE_BUFFER = 100
# Bytes a TFRecord file adds to each record: its length (8), the length's
# checksum (4) and the data's checksum (4).
RECORD_FRAMING_BYTES = 16


def parse_batches(records, name_to_features, batch_size, drop_remainder):
  """Batches a dataset of serialized tf.train.Example records and parses
  each batch with one op.

  Args:
    records: tf.data.Dataset of scalar string Tensors.
    name_to_features: dict of feature name -> tf.io.FixedLenFeature.
    batch_size: records per batch.
    drop_remainder: drop a last batch smaller than `batch_size`.

  Returns:
    tf.data.Dataset of dicts of [batch, ...] Tensors in the order of
    `records`; int64 features come out as int32 (the model's input type).
  """

  def decode_batch(serialized):
    features = tf.io.parse_example(serialized, name_to_features)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
            for name, t in features.items()}

  batches = records.batch(batch_size, drop_remainder=drop_remainder)
  # map keeps the order of its input even when run in parallel.
  return batches.map(decode_batch, num_parallel_calls=tf.data.AUTOTUNE)


def tfrecord_input_fn(input_file, name_to_features, is_training,
                      drop_remainder, seed=None):
  """Returns input_fn(params): batches of params["batch_size"] parsed records.

  Args:
    input_file: path of a TFRecord file of tf.train.Example records.
    name_to_features: dict of feature name -> tf.io.FixedLenFeature.
    is_training: repeat the file forever and shuffle it, as the original.
    drop_remainder: drop a last batch smaller than the batch size.
    seed: shuffle seed; a fixed one makes the order reproducible, which
      resuming a training run relies on.

  Returns:
    callable(params) -> tf.data.Dataset of dicts of [batch, ...] Tensors;
    int64 features come out as int32 (the model's input type).
  """

  def input_fn(params):
    note_record_files([input_file])
    d = tf.data.TFRecordDataset(input_file)
    if is_training:
      d = d.repeat()
      d = d.shuffle(buffer_size=SHUFFLE_BUFFER, seed=seed)
    return parse_batches(d, name_to_features, params["batch_size"],
                         drop_remainder)

  return input_fn


def _crc32c_table():
  """The byte table of CRC-32C (Castagnoli, reflected polynomial)."""
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    table.append(crc)
  return table


_CRC32C_TABLE = _crc32c_table()


def _masked_crc32c(data):
  """The checksum a TFRecord file stores for `data` (bytes): CRC-32C,
  rotated right by 15 bits plus 0xa282ead8, modulo 2**32."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  crc ^= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def first_record(path):
  """The first serialized record of TFRecord file `path`, or None if it is
  empty; ValueError saying what is wrong if it is not a TFRecord file.

  Read in Python (with its two checksums) rather than with tf.data: an
  eager op here would start TensorFlow's runtime, after which
  --distribution=mirrored can no longer split the CPU into devices.
  A record is: length (uint64, little-endian), the length's masked CRC-32C
  (uint32), the data, the data's masked CRC-32C.
  """
  with tf.io.gfile.GFile(path, "rb") as reader:
    header = reader.read(12)
    if not header:
      return None
    problem = "its first bytes are not a record header"
    if len(header) == 12:
      length, length_crc = struct.unpack("<QI", header)
      if _masked_crc32c(header[:8]) == length_crc:
        data = reader.read(length)
        data_crc = reader.read(4)
        if (len(data) == length and len(data_crc) == 4 and
            _masked_crc32c(data) == struct.unpack("<I", data_crc)[0]):
          return data
        problem = "its first record is cut short or damaged"
  raise ValueError(problem)


# The graph collection of the TFRecord files the graph's input reads.
RECORD_FILES = "tfrecord_input_files"
# How TensorFlow's record reader says what it found ("corrupted record at
# 3050", "truncated record at 49000").
_READER_WORDS = re.compile(r"\b(?:corrupted|truncated) record at \d+")


def note_record_files(paths):
  """Notes in the default graph that its input reads the TFRecord files
  `paths`."""
  for path in paths:
    if path not in tf.compat.v1.get_collection(RECORD_FILES):
      tf.compat.v1.add_to_collection(RECORD_FILES, path)


def _damaged_file(paths):
  """The first of `paths` whose records cannot all be read, or None when
  each reads whole."""
  for path in paths:
    try:
      for _ in tf.compat.v1.io.tf_record_iterator(path):
        pass
    except (tf.errors.DataLossError, tf.errors.OutOfRangeError):
      return path
  return None


def damaged_records_error(error, graph):
  """The cli.UserError of a DataLossError that a session running `graph`
  raised: it names the record file (when the graph read several, the one
  that fails to read again) and what to do.

  A file with a sidecar is one a script made and reuses (a feature cache,
  runner/feature_cache.py): deleting it has the next run make it anew (its
  sidecar may vouch for a file that was written damaged). Any other is the
  user's, to make or copy again.
  """
  paths = list(graph.get_collection(RECORD_FILES))
  found = _READER_WORDS.search(error.message)
  tensorflow_said = (found.group(0) if found else
                     error.message.strip().splitlines()[-1])
  path = paths[0] if len(paths) == 1 else _damaged_file(paths)
  if path is None:
    return cli.UserError(
        "A record of one of %s is cut short or damaged (TensorFlow said: "
        "%s). Make or copy those files again." % (", ".join(paths) or
                                                   "the input files",
                                                   tensorflow_said))
  if sidecars.read(path) is not None:
    fix = ("It is a file this program made for reuse: delete it (and %s) "
           "and run the same command again to make it anew." %
           os.path.basename(sidecars.sidecar_path(path)))
  else:
    fix = "Make or copy that file again."
  return cli.UserError("%s: a record is cut short or damaged (TensorFlow "
                       "said: %s). %s" % (path, tensorflow_said, fix))
