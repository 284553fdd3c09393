# coding=utf-8
"""A classifier's examples become the model's features.

`convert_single_example` lays one example out as [CLS] a [SEP] (b [SEP])
(tasks/text_pair.py, `example_tokens`), cut to max_seq_length and padded,
with its label as a class index, a regression's score or a multi-label
example's multi-hot floats. With --long_text=windows, `example_windows`
cuts a long first text into overlapping windows (tasks/windows.py), each a
WindowExample of the text's label (`expand_windows` for a whole set).
`file_based_convert_examples_to_features` writes the features to a
TFRecord file, which `file_based_input_fn_builder` reads back in batches.
"""

from absl import logging
import tensorflow as tf

from runner import feature_cache
from runner import tfrecord_input
from tasks import glue
from tasks import task
from tasks import text_pair
from tasks import windows
from userio import progress
from userio import verbosity

# Bumped whenever the TFRecord layout written here changes, so feature files
# of an older layout are rebuilt instead of reused.
RECORD_FORMAT_VERSION = 1


class WindowExample(glue.InputExample):
  """One window of a long example (--long_text=windows): its tokens and
  segment ids, already laid out, and the example's guid and label."""

  def __init__(self, example, tokens, segment_ids):
    super().__init__(example.guid, example.text_a, example.text_b,
                     example.label)
    self.tokens = tokens
    self.segment_ids = segment_ids


class InputFeatures(object):
  """Model inputs of one example: token ids, mask, segments, label id."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id,
               is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


def _is_regression(label_list):
  """A label list of [None] marks a regression task (one float output)."""
  return list(label_list) == [None]


def convert_single_example(ex_index, example, label_list, max_seq_length,
                           tokenizer, *, multi_label=False):
  """Tokenizes one example into fixed-length model inputs.

  Returns:
    InputFeatures with int lists of length max_seq_length; label_id is the
    label's index in `label_list`, the float score for regression, or with
    `multi_label` (the example's label a tuple of labels) a list of
    len(label_list) floats, 1.0 for each of its labels.
  """
  if isinstance(example, task.PaddingInputExample):
    if multi_label:
      label_id = [0.0] * len(label_list)
    else:
      label_id = 0.0 if _is_regression(label_list) else 0
    return InputFeatures(
        input_ids=[0] * max_seq_length,
        input_mask=[0] * max_seq_length,
        segment_ids=[0] * max_seq_length,
        label_id=label_id,
        is_real_example=False)

  tokens, segment_ids = example_tokens(example, max_seq_length, tokenizer)

  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  # 1 marks a real token, 0 padding; attention never looks at padding.
  input_mask = [1] * len(input_ids)
  padding = [0] * (max_seq_length - len(input_ids))
  input_ids += padding
  input_mask += padding
  segment_ids += padding

  label_id = _label_id(example, label_list)
  if ex_index < 5 and verbosity.details():
    logging.info("*** Example ***")
    logging.info("guid: %s", example.guid)
    logging.info("tokens: %s", " ".join(tokens))
    logging.info("input_ids: %s", " ".join(str(x) for x in input_ids))
    logging.info("input_mask: %s", " ".join(str(x) for x in input_mask))
    logging.info("segment_ids: %s", " ".join(str(x) for x in segment_ids))
    logging.info("label: %s (id = %s)", example.label, label_id)

  return InputFeatures(
      input_ids=input_ids,
      input_mask=input_mask,
      segment_ids=segment_ids,
      label_id=label_id,
      is_real_example=True)


def example_tokens(example, max_seq_length, tokenizer):
  """The tokens of one example as the model reads them, unpadded.

  Returns:
    (tokens, segment_ids): [CLS] a [SEP] (b [SEP]), the pair cut to fit
    max_seq_length, and the segment of each token (0 up to the first [SEP],
    1 after it); see tasks/text_pair.py. The [CLS] vector is what the
    pooler, and so the classifier, reads. A WindowExample's own.
  """
  if isinstance(example, WindowExample):
    return list(example.tokens), list(example.segment_ids)
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = None
  if example.text_b:
    tokens_b = tokenizer.tokenize(example.text_b)
  return text_pair.layout(tokens_a, tokens_b, max_seq_length)


def example_windows(example, max_seq_length, tokenizer, doc_stride=None):
  """The windows of one example (--long_text=windows).

  An example that fits is one window, laid out as `example_tokens` lays it
  out. A longer one: its second text (if any) cut to at most half of the
  room, and its first text in windows of the rest of the room started every
  `doc_stride` tokens (default: half that room), tasks/windows.py's.

  Returns:
    list of WindowExample.
  """
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
  room = max_seq_length - (3 if tokens_b else 2)
  if len(tokens_a) + len(tokens_b) <= room:
    return [WindowExample(example, *text_pair.layout(tokens_a, tokens_b,
                                                     max_seq_length))]
  tokens_b = tokens_b[:room // 2]
  room_a = room - len(tokens_b)
  spans = windows.doc_spans(
      len(tokens_a), room_a, doc_stride or max(1, room_a // 2),
      fix="Raise --max_seq_length and keep --doc_stride at least 1.")
  return [WindowExample(example, *text_pair.layout(
      tokens_a[span.start:span.start + span.length], list(tokens_b),
      max_seq_length)) for span in spans]


def expand_windows(examples, max_seq_length, tokenizer, doc_stride=None):
  """(the windows of all `examples` in order, the number of each one's
  windows)."""
  expanded, counts = [], []
  for example in examples:
    parts = example_windows(example, max_seq_length, tokenizer, doc_stride)
    expanded += parts
    counts.append(len(parts))
  return expanded, counts


def _label_id(example, label_list):
  """The class index of `example.label`, its float value (regression), or
  for a tuple of labels (multi-label) their multi-hot floats."""
  if _is_regression(label_list):
    return float(example.label)
  names = (example.label if isinstance(example.label, tuple)
           else (example.label,))
  for name in names:
    if name not in label_list:
      raise ValueError("Example %s has label %r, which is not in the task's "
                       "labels %s." % (example.guid, name, label_list))
  if isinstance(example.label, tuple):
    return [1.0 if label in names else 0.0 for label in label_list]
  return label_list.index(example.label)


def file_based_convert_examples_to_features(examples, label_list,
                                            max_seq_length, tokenizer,
                                            output_file, *, fingerprint=None,
                                            multi_label=False):
  """Writes the features of `examples` to a TFRecord file.

  Features: input_ids, input_mask, segment_ids (int64 [max_seq_length]),
  label_ids (int64 [1]; float [1] for regression; with `multi_label` float
  [len(label_list)]), is_real_example (int64 [1]). The file is written
  whole or not at all, and `fingerprint` (what the records are made from)
  goes to its sidecar, which vouches for the file to a later run
  (runner/feature_cache.py). Progress is logged every 10 seconds.
  """
  meter = progress.Progress("Writing features to %s" % output_file,
                            len(examples))
  label_feature = (feature_cache.float_feature
                   if multi_label or _is_regression(label_list)
                   else feature_cache.int64_feature)
  with feature_cache.FeatureFile(output_file, len(examples),
                                 depends_on=fingerprint) as writer:
    for (ex_index, example) in enumerate(examples):
      feature = convert_single_example(ex_index, example, label_list,
                                       max_seq_length, tokenizer,
                                       multi_label=multi_label)
      label_ids = (feature.label_id if multi_label else [feature.label_id])
      writer.write(feature_cache.serialized_example({
          "input_ids": feature_cache.int64_feature(feature.input_ids),
          "input_mask": feature_cache.int64_feature(feature.input_mask),
          "segment_ids": feature_cache.int64_feature(feature.segment_ids),
          "label_ids": label_feature(label_ids),
          "is_real_example": feature_cache.int64_feature(
              [int(feature.is_real_example)])}))
      meter.advance()
  meter.finish()


def file_based_input_fn_builder(input_file, seq_length, is_training,
                                drop_remainder, *, seed=None,
                                is_regression=False, num_multi_labels=None):
  """Returns input_fn(params): the records of `input_file` in batches.

  Training repeats the file forever and shuffles it with `seed`.
  `num_multi_labels`: the labels of a multi-label file (label_ids float
  [batch, num_multi_labels]); None: one label per example.
  """
  if num_multi_labels:
    label_ids = tf.io.FixedLenFeature([num_multi_labels], tf.float32)
  else:
    label_ids = tf.io.FixedLenFeature(
        [], tf.float32 if is_regression else tf.int64)
  name_to_features = {
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "label_ids": label_ids,
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }
  return tfrecord_input.tfrecord_input_fn(input_file, name_to_features,
                                          is_training, drop_remainder, seed)
