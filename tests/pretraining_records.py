"""Small files of Google's pretraining records, made by hand for the tests.

The layout is the one create_pretraining_data.py writes: input_ids,
input_mask, segment_ids (int64 [seq_length]); masked_lm_positions,
masked_lm_ids (int64 [max_predictions]); masked_lm_weights (float
[max_predictions], 1 for a real prediction, 0 for padding);
next_sentence_labels (int64 [1]).
"""
import numpy as np

CLS_ID = 2
SEP_ID = 3
MASK_ID = 4
FIRST_WORD_ID = 5


def random_examples(count, seq_length, max_predictions, vocab_size, seed,
                    all_predictions=False):
  """`count` examples as dicts of numpy arrays.

  Each has 60-100% real tokens ([CLS] first, two segments), 1 to
  `max_predictions` masked positions (exactly `max_predictions` with
  `all_predictions`; their input id replaced by MASK_ID, the original kept
  as the label) and padding slots with position 0, label 0 and weight 0.
  """
  rng = np.random.RandomState(seed)
  examples = []
  for _ in range(count):
    length = rng.randint(max(3, int(0.6 * seq_length)), seq_length + 1)
    original = np.zeros(seq_length, np.int64)
    original[:length] = rng.randint(FIRST_WORD_ID, vocab_size, length)
    original[0] = CLS_ID
    segment_ids = np.zeros(seq_length, np.int64)
    segment_ids[length // 2:length] = 1
    num_predictions = rng.randint(1, min(max_predictions, length - 1) + 1)
    if all_predictions:
      num_predictions = max_predictions
    positions = np.zeros(max_predictions, np.int64)
    positions[:num_predictions] = np.sort(rng.choice(
        np.arange(1, length), num_predictions, replace=False))
    labels = np.zeros(max_predictions, np.int64)
    labels[:num_predictions] = original[positions[:num_predictions]]
    weights = np.zeros(max_predictions, np.float32)
    weights[:num_predictions] = 1.0
    input_ids = original.copy()
    input_ids[positions[:num_predictions]] = MASK_ID
    examples.append({
        "input_ids": input_ids,
        "input_mask": (np.arange(seq_length) < length).astype(np.int64),
        "segment_ids": segment_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": labels,
        "masked_lm_weights": weights,
        "next_sentence_labels": np.array([rng.randint(0, 2)], np.int64),
    })
  return examples


def write_records(path, examples):
  """Writes `examples` (dicts of name -> 1-D array) as tf.train.Examples;
  float arrays become float_list features, the rest int64_list."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  with tf.io.TFRecordWriter(str(path)) as writer:
    for example in examples:
      features = {}
      for name, values in example.items():
        values = np.asarray(values)
        if values.dtype.kind == "f":
          features[name] = tf.train.Feature(
              float_list=tf.train.FloatList(value=values.tolist()))
        else:
          features[name] = tf.train.Feature(
              int64_list=tf.train.Int64List(value=values.tolist()))
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=features)).SerializeToString())
