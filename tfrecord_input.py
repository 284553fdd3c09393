# coding=utf-8
"""The `input_fn` of the fine-tuning scripts: batches from a TFRecord file.

Shared by run_classifier.py and run_squad.py (run_pretraining.py builds its
record stream from several files and batches it with `parse_batches`).
Records are batched first and then parsed with one vectorized
`tf.io.parse_example` per batch, several batches in parallel with their
order kept, so the input pipeline costs a few ops per step rather than
several per example and never starves the step (the runner prefetches the
batches, see estimator.py).
"""

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
