# coding=utf-8
"""SQuAD's questions become the model's features: one per window.

A context's words are WordPiece-tokenized and cut into overlapping windows
("doc spans", tasks/windows.py) of at most max_seq_length - len(question)
- 3 tokens, started every doc_stride tokens; each window is one
InputFeatures, [CLS] question [SEP] window [SEP], with the map from its
tokens to the context's words and where it gives a token the most context.
For training, the answer's sub-token span (`_improve_answer_span`) becomes
start and end positions inside the window ([CLS] when it is not fully in
it). `convert_examples_to_features` streams the features to a callback;
`FeatureWriter` and `write_features` write them to a TFRecord file,
`write_eval_features` keeping only their FeatureMetadata for the answer
search; `input_fn_builder` reads such a file back in batches.
"""

import collections

from absl import logging
import tensorflow as tf

from runner import feature_cache
from runner import tfrecord_input
from tasks import windows
import tokenization
from userio import progress
from userio import verbosity

# The first id given to a feature, as in the original.
_FIRST_UNIQUE_ID = 1000000000
# Features logged in full at the start of a conversion, as in the original.
_NUM_LOGGED_EXAMPLES = 20


class InputFeatures(object):
  """One window of one example, ready for the model.

  `token_to_orig_map` maps a position in `tokens` to the index of its word
  in the example's `doc_tokens`; `token_is_max_context` tells whether this
  window is the best one for the token at that position. For training,
  `start_position`/`end_position` are positions in `tokens` (0, the [CLS]
  token, when the answer is not fully inside this window).
  """

  def __init__(self, unique_id, example_index, doc_span_index, tokens,
               token_to_orig_map, token_is_max_context, input_ids, input_mask,
               segment_ids, start_position=None, end_position=None,
               is_impossible=None):
    self.unique_id = unique_id
    self.example_index = example_index
    self.doc_span_index = doc_span_index
    self.tokens = tokens
    self.token_to_orig_map = token_to_orig_map
    self.token_is_max_context = token_is_max_context
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible


# What write_predictions needs of a feature: InputFeatures without the id,
# mask and segment arrays (those go to the TFRecord file only).
FeatureMetadata = collections.namedtuple("FeatureMetadata", [
    "unique_id", "example_index", "doc_span_index", "tokens",
    "token_to_orig_map", "token_is_max_context"])


def feature_metadata(feature):
  """The FeatureMetadata of an InputFeatures."""
  return FeatureMetadata(feature.unique_id, feature.example_index,
                         feature.doc_span_index, feature.tokens,
                         feature.token_to_orig_map,
                         feature.token_is_max_context)


# ----------------------------------------------------- feature conversion --


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer,
                         orig_answer_text):
  """The sub-token span that matches the tokenized answer exactly.

  The word positions cover whole words, but an answer may be part of one,
  e.g. "1895" in "(1895-1943).": the tightest span inside
  [input_start, input_end] whose tokens equal the answer's tokens wins.
  """
  tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
  for new_start in range(input_start, input_end + 1):
    for new_end in range(input_end, new_start - 1, -1):
      text_span = " ".join(doc_tokens[new_start:(new_end + 1)])
      if text_span == tok_answer_text:
        return new_start, new_end
  return input_start, input_end


def _tokenize_document(doc_tokens, tokenizer):
  """(all_doc_tokens, tok_to_orig_index, orig_to_tok_index) of the words."""
  tok_to_orig_index = []
  orig_to_tok_index = []
  all_doc_tokens = []
  for i, token in enumerate(doc_tokens):
    orig_to_tok_index.append(len(all_doc_tokens))
    for sub_token in tokenizer.tokenize(token):
      tok_to_orig_index.append(i)
      all_doc_tokens.append(sub_token)
  return all_doc_tokens, tok_to_orig_index, orig_to_tok_index


def _answer_token_span(example, all_doc_tokens, orig_to_tok_index, tokenizer):
  """Sub-token (start, end) of a training answer; (-1, -1) if impossible."""
  if example.is_impossible:
    return -1, -1
  tok_start_position = orig_to_tok_index[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
  else:
    tok_end_position = len(all_doc_tokens) - 1
  return _improve_answer_span(all_doc_tokens, tok_start_position,
                              tok_end_position, tokenizer,
                              example.orig_answer_text)


def _window_tokens(query_tokens, all_doc_tokens, tok_to_orig_index,
                   doc_spans, doc_span_index):
  """(tokens, segment_ids, token_to_orig_map, token_is_max_context)."""
  doc_span = doc_spans[doc_span_index]
  tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  token_to_orig_map = {}
  token_is_max_context = {}
  for i in range(doc_span.length):
    split_token_index = doc_span.start + i
    token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
    token_is_max_context[len(tokens)] = windows.check_is_max_context(
        doc_spans, doc_span_index, split_token_index)
    tokens.append(all_doc_tokens[split_token_index])
    segment_ids.append(1)
  tokens.append("[SEP]")
  segment_ids.append(1)
  return tokens, segment_ids, token_to_orig_map, token_is_max_context


def _window_answer(example, doc_span, tok_span, num_query_tokens):
  """Training (start, end) positions of the answer inside one window.

  An impossible question, or an answer not fully inside the window, points
  at [CLS] (0, 0).
  """
  if example.is_impossible:
    return 0, 0
  doc_start = doc_span.start
  doc_end = doc_span.start + doc_span.length - 1
  if not (tok_span[0] >= doc_start and tok_span[1] <= doc_end):
    return 0, 0
  doc_offset = num_query_tokens + 2
  return (tok_span[0] - doc_start + doc_offset,
          tok_span[1] - doc_start + doc_offset)


def _log_feature(feature, example, is_training):
  logging.info("*** Example ***")
  logging.info("unique_id: %s", feature.unique_id)
  logging.info("example_index: %s", feature.example_index)
  logging.info("doc_span_index: %s", feature.doc_span_index)
  logging.info("tokens: %s", " ".join(
      tokenization.printable_text(x) for x in feature.tokens))
  logging.info("token_to_orig_map: %s", " ".join(
      "%d:%d" % (x, y) for x, y in feature.token_to_orig_map.items()))
  logging.info("token_is_max_context: %s", " ".join(
      "%d:%s" % (x, y) for x, y in feature.token_is_max_context.items()))
  logging.info("input_ids: %s", " ".join(str(x) for x in feature.input_ids))
  logging.info("input_mask: %s", " ".join(str(x) for x in feature.input_mask))
  logging.info("segment_ids: %s",
               " ".join(str(x) for x in feature.segment_ids))
  if is_training and example.is_impossible:
    logging.info("impossible example")
  if is_training and not example.is_impossible:
    answer_text = " ".join(
        feature.tokens[feature.start_position:(feature.end_position + 1)])
    logging.info("start_position: %d", feature.start_position)
    logging.info("end_position: %d", feature.end_position)
    logging.info("answer: %s", tokenization.printable_text(answer_text))


def example_features(example, tokenizer, max_seq_length, doc_stride,
                     max_query_length, is_training, *, example_index=0,
                     first_unique_id=_FIRST_UNIQUE_ID, pad=True):
  """The features of one example, one per window.

  Args:
    example: a SquadExample.
    tokenizer, max_seq_length, doc_stride, max_query_length, is_training:
      as `convert_examples_to_features`.
    example_index: the example's index, stored in its features.
    first_unique_id: the unique_id of the first window; the others follow.
    pad: whether to pad the id arrays with 0 to max_seq_length; without
      padding each window's arrays have its own length (at most
      max_seq_length), as a served request may.

  Returns:
    list of InputFeatures, in window order.
  """
  query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
  all_doc_tokens, tok_to_orig_index, orig_to_tok_index = (
      _tokenize_document(example.doc_tokens, tokenizer))
  tok_span = None
  if is_training:
    tok_span = _answer_token_span(example, all_doc_tokens, orig_to_tok_index,
                                  tokenizer)
  # [CLS], [SEP] and [SEP] take 3 positions.
  max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
  doc_spans = windows.doc_spans(
      len(all_doc_tokens), max_tokens_for_doc, doc_stride,
      fix="The room is --max_seq_length - query tokens - 3; raise "
      "--max_seq_length or lower --max_query_length, and keep --doc_stride "
      "at least 1.")
  features = []
  for doc_span_index, doc_span in enumerate(doc_spans):
    tokens, segment_ids, token_to_orig_map, token_is_max_context = (
        _window_tokens(query_tokens, all_doc_tokens, tok_to_orig_index,
                       doc_spans, doc_span_index))
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    padding = [0] * (max_seq_length - len(input_ids)) if pad else []
    start_position = end_position = None
    if is_training:
      start_position, end_position = _window_answer(
          example, doc_span, tok_span, len(query_tokens))
    features.append(InputFeatures(
        unique_id=first_unique_id + doc_span_index,
        example_index=example_index, doc_span_index=doc_span_index,
        tokens=tokens, token_to_orig_map=token_to_orig_map,
        token_is_max_context=token_is_max_context,
        input_ids=input_ids + padding, input_mask=input_mask + padding,
        segment_ids=segment_ids + padding, start_position=start_position,
        end_position=end_position, is_impossible=example.is_impossible))
  return features


def convert_examples_to_features(examples, tokenizer, max_seq_length,
                                 doc_stride, max_query_length, is_training,
                                 output_fn):
  """Cuts every example into windows and passes each feature to `output_fn`.

  Features are handed over one at a time so a caller can stream them to a
  file instead of holding them all.

  Args:
    examples: list of SquadExample.
    tokenizer: a tokenization.FullTokenizer.
    max_seq_length: int, tokens per feature (padded with id 0).
    doc_stride: int, tokens between the starts of consecutive windows.
    max_query_length: int, questions are cut to this many tokens.
    is_training: whether to compute start/end positions.
    output_fn: callable(InputFeatures).
  """
  unique_id = _FIRST_UNIQUE_ID
  for example_index, example in enumerate(examples):
    for feature in example_features(
        example, tokenizer, max_seq_length, doc_stride, max_query_length,
        is_training, example_index=example_index, first_unique_id=unique_id):
      if example_index < _NUM_LOGGED_EXAMPLES and verbosity.details():
        _log_feature(feature, example, is_training)
      output_fn(feature)
      unique_id += 1


class FeatureWriter(object):
  """Writes InputFeatures to a TFRecord file of tf.train.Examples.

  `writer`, when given, takes the serialized records instead of a file
  opened at `filename` (any object with write(bytes) and close(), e.g. a
  feature_cache.FeatureFile, which is closed by its own context).
  """

  def __init__(self, filename, is_training, writer=None):
    self.filename = filename
    self.is_training = is_training
    self.num_features = 0
    self._writer = writer or tf.io.TFRecordWriter(filename)
    self._owns_writer = writer is None

  def process_feature(self, feature):
    """Writes one InputFeatures."""
    self.num_features += 1
    ints = feature_cache.int64_feature
    features = collections.OrderedDict()
    features["unique_ids"] = ints([feature.unique_id])
    features["input_ids"] = ints(feature.input_ids)
    features["input_mask"] = ints(feature.input_mask)
    features["segment_ids"] = ints(feature.segment_ids)
    if self.is_training:
      features["start_positions"] = ints([feature.start_position])
      features["end_positions"] = ints([feature.end_position])
      features["is_impossible"] = ints([1 if feature.is_impossible else 0])
    self._writer.write(feature_cache.serialized_example(features))

  def close(self):
    if self._owns_writer:
      self._writer.close()


def write_features(examples, tokenizer, output_file, max_seq_length,
                   doc_stride, max_query_length, is_training, on_feature=None):
  """Converts `examples` and writes their features to `output_file`.

  The file is written under a temporary name and renamed when complete (a
  failure leaves no temporary file; a full disk ends in one line with about
  the space the file needs, runner/feature_cache.py); progress is logged
  every 10 seconds.

  Args:
    on_feature: optional callable(InputFeatures), called for each feature
      before it is written.

  Returns:
    The number of features written.
  """
  meter = progress.Progress("Writing features to %s" % output_file,
                            len(examples))
  with feature_cache.FeatureFile(output_file, len(examples),
                                 examples_done=lambda: meter.done) as out:
    writer = FeatureWriter(filename=output_file, is_training=is_training,
                           writer=out)

    def write(feature):
      if on_feature is not None:
        on_feature(feature)
      writer.process_feature(feature)
      # An example yields one or more features, in example order.
      meter.advance(feature.example_index + 1 - meter.done)

    try:
      convert_examples_to_features(
          examples=examples, tokenizer=tokenizer,
          max_seq_length=max_seq_length, doc_stride=doc_stride,
          max_query_length=max_query_length, is_training=is_training,
          output_fn=write)
    finally:
      writer.close()
  meter.advance(len(examples) - meter.done)
  meter.finish()
  return writer.num_features


def write_eval_features(examples, tokenizer, output_file, max_seq_length,
                        doc_stride, max_query_length):
  """Streams the prediction features of `examples` to `output_file`.

  Each feature's id arrays go to the TFRecord file at once; only its
  FeatureMetadata (tokens and maps, which write_predictions needs) is kept.

  Returns:
    list of FeatureMetadata, one per feature written, in file order.
  """
  metadata = []
  write_features(examples, tokenizer, output_file, max_seq_length,
                 doc_stride, max_query_length, is_training=False,
                 on_feature=lambda f: metadata.append(feature_metadata(f)))
  return metadata


def input_fn_builder(input_file, seq_length, is_training, drop_remainder, *,
                     seed=None):
  """An `input_fn(params)` reading a FeatureWriter file.

  Training repeats the data forever and shuffles it (buffer 100, `seed`);
  all int64 features are cast to int32.
  """
  name_to_features = {
      "unique_ids": tf.io.FixedLenFeature([], tf.int64),
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
  }
  if is_training:
    name_to_features["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
    name_to_features["end_positions"] = tf.io.FixedLenFeature([], tf.int64)

  return tfrecord_input.tfrecord_input_fn(input_file, name_to_features,
                                          is_training, drop_remainder, seed)
