# coding=utf-8
"""The `input_fn` of the fine-tuning scripts: batches from a TFRecord file.

Shared by run_classifier.py and run_squad.py (run_pretraining.py builds its
record stream from several files and batches it with `parse_batches`).
Records are batched first and then parsed with one vectorized
`tf.io.parse_example` per batch, several batches in parallel with their
order kept, so the input pipeline costs a few ops per step rather than
several per example and never starves the step (the runner prefetches the
batches, see runner/estimator.py). `first_record` reads a file's first record in
plain Python, for checks that must not start TensorFlow's runtime.
"""

import struct

import tensorflow as tf

# The original's shuffle buffer.
SHUFFLE_BUFFER = 100


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
