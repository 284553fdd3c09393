"""tfrecord_input.tfrecord_input_fn: batches, order, types, repetition."""
import numpy as np
import pytest
import tensorflow as tf

from runner import tfrecord_input

FEATURES = {"input_ids": tf.io.FixedLenFeature([4], tf.int64),
            "score": tf.io.FixedLenFeature([], tf.float32)}


def _write(path, count):
  """Record k holds input_ids [k, k+1, k+2, k+3] and score k / 2."""
  with tf.io.TFRecordWriter(str(path)) as writer:
    for k in range(count):
      example = tf.train.Example(features=tf.train.Features(feature={
          "input_ids": tf.train.Feature(
              int64_list=tf.train.Int64List(value=range(k, k + 4))),
          "score": tf.train.Feature(
              float_list=tf.train.FloatList(value=[k / 2.0])),
      }))
      writer.write(example.SerializeToString())


def _batches(input_fn, batch_size, count):
  dataset = input_fn({"batch_size": batch_size}).take(count)
  return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


def test_eval_batches_keep_file_order_and_cast_ids(tmp_path):
  path = tmp_path / "eval.tf_record"
  _write(path, 7)
  input_fn = tfrecord_input.tfrecord_input_fn(
      str(path), FEATURES, is_training=False, drop_remainder=False)
  batches = _batches(input_fn, 3, 10)
  assert [len(b["score"]) for b in batches] == [3, 3, 1]
  ids = np.concatenate([b["input_ids"] for b in batches])
  assert ids.dtype == np.int32
  np.testing.assert_array_equal(ids, np.arange(7)[:, None] + np.arange(4))
  scores = np.concatenate([b["score"] for b in batches])
  assert scores.dtype == np.float32
  np.testing.assert_array_equal(scores, np.arange(7) / 2.0)
  dropped = tfrecord_input.tfrecord_input_fn(
      str(path), FEATURES, is_training=False, drop_remainder=True)
  assert [len(b["score"]) for b in _batches(dropped, 3, 10)] == [3, 3]


def test_training_shuffles_reproducibly_and_repeats(tmp_path):
  path = tmp_path / "train.tf_record"
  _write(path, 7)

  def first_ids(seed):
    input_fn = tfrecord_input.tfrecord_input_fn(
        str(path), FEATURES, is_training=True, drop_remainder=True,
        seed=seed)
    return np.concatenate(
        [b["input_ids"][:, 0] for b in _batches(input_fn, 3, 7)])

  order = first_ids(3)
  assert len(order) == 21  # More batches than one pass holds.
  np.testing.assert_array_equal(order, first_ids(3))
  assert set(order) <= set(range(7))
  assert list(order[:7]) != list(range(7))  # Shuffled.
  assert not np.array_equal(order, first_ids(4))


def test_first_record_reads_what_tensorflow_wrote(tmp_path):
  path = str(tmp_path / "a.tfrecord")
  records = [b"first record \x00\xff", b"second"]
  with tf.io.TFRecordWriter(path) as writer:
    for record in records:
      writer.write(record)
  assert tfrecord_input.first_record(path) == records[0]
  empty = str(tmp_path / "empty.tfrecord")
  with tf.io.TFRecordWriter(empty):
    pass
  assert tfrecord_input.first_record(empty) is None


def test_first_record_refuses_damaged_files(tmp_path):
  path = str(tmp_path / "a.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    writer.write(b"0123456789")
  data = open(path, "rb").read()
  damaged = str(tmp_path / "damaged.tfrecord")
  with open(damaged, "wb") as f:
    f.write(data[:14] + b"X" + data[15:])  # A byte of the record's data.
  with pytest.raises(ValueError, match="damaged"):
    tfrecord_input.first_record(damaged)
  text = str(tmp_path / "text.tfrecord")
  with open(text, "wb") as f:
    f.write(b"this is not a TFRecord file")
  with pytest.raises(ValueError, match="header"):
    tfrecord_input.first_record(text)
