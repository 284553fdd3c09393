"""Synthetic classifier inputs shared by the tests that train tiny models."""
import numpy as np


def classifier_features(num_examples, seq_length, vocab_size, seed,
                        two_segments=False):
  """The feature dict of run_classifier's input_fn, as numpy arrays.

  Random ids in [1, vocab_size) and labels in {0, 1} from `seed`; every
  position is real. With `two_segments` the second half of each sequence is
  segment 1, else everything is segment 0.
  """
  rng = np.random.RandomState(seed)
  input_ids = rng.randint(1, vocab_size, (num_examples, seq_length))
  segment = np.arange(seq_length) >= seq_length // 2 if two_segments else (
      np.zeros(seq_length, bool))
  return {
      "input_ids": input_ids.astype(np.int32),
      "input_mask": np.ones((num_examples, seq_length), np.int32),
      "segment_ids": np.tile(segment.astype(np.int32), (num_examples, 1)),
      "label_ids": rng.randint(0, 2, num_examples).astype(np.int32),
      "is_real_example": np.ones(num_examples, np.int32)}
