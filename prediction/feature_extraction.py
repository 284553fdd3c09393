# coding=utf-8
"""BERT's hidden states for lines of text, as extract_features.py computes
them: the examples, their model inputs, the model, Google's JSON record.

extract_features.py runs these in one process; prediction/embedding_jobs.py
runs them on a corpus's shards, in worker processes that each build the
model once (`FeatureModel`) and run it batch by batch.
"""

import collections
import json

from absl import logging
import tensorflow as tf

import modeling
import tokenization
from startup import run_setup
from tasks import text_pair
from userio import cli
from userio import verbosity

# Example lines logged in full, as the original does, to check the input.
_NUM_LOGGED_EXAMPLES = 5
INPUT_NAMES = ("input_ids", "input_mask", "input_type_ids")


class InputExample(object):
  """One line of the input: its id (the line's 0-based index among all
  lines of the input), text_a and text_b (or None)."""

  def __init__(self, unique_id, text_a, text_b):
    self.unique_id = unique_id
    self.text_a = text_a
    self.text_b = text_b


class InputFeatures(object):
  """The model inputs of one example, each a list of `seq_length` ints."""

  def __init__(self, unique_id, tokens, input_ids, input_mask,
               input_type_ids):
    self.unique_id = unique_id
    self.tokens = tokens
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.input_type_ids = input_type_ids


def convert_examples_to_features(examples, seq_length, tokenizer):
  """Tokenizes `examples` into `InputFeatures` padded to `seq_length`.

  Layout: [CLS] text_a [SEP] (type 0), then text_b [SEP] (type 1) if there
  is a text_b; the longer text loses tokens at its end until all fits.
  """
  features = []
  for example in examples:
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
    tokens, input_type_ids = text_pair.layout(tokens_a, tokens_b, seq_length)
    input_ids = tokenizer.convert_tokens_to_ids(tokens)
    input_mask = [1] * len(input_ids)
    padding = [0] * (seq_length - len(input_ids))

    feature = InputFeatures(
        unique_id=example.unique_id,
        tokens=tokens,
        input_ids=input_ids + padding,
        input_mask=input_mask + padding,
        input_type_ids=input_type_ids + padding)
    if example.unique_id < _NUM_LOGGED_EXAMPLES and verbosity.details():
      _log_feature(feature)
    features.append(feature)
  return features


def _log_feature(feature):
  """Logs the inputs of one example, to check the input by eye."""
  logging.info("*** Example ***")
  logging.info("unique_id: %s", feature.unique_id)
  logging.info("tokens: %s", " ".join(
      tokenization.printable_text(t) for t in feature.tokens))
  logging.info("input_ids: %s", " ".join(map(str, feature.input_ids)))
  logging.info("input_mask: %s", " ".join(map(str, feature.input_mask)))
  logging.info("input_type_ids: %s",
               " ".join(map(str, feature.input_type_ids)))


def _build_model(bert_config, seq_length, layer_indexes, init_checkpoint,
                 use_one_hot_embeddings):
  """Builds the model in the current graph, initialized from the checkpoint.

  Returns:
    (inputs, outputs): inputs maps each of INPUT_NAMES to an int32
    placeholder [batch_size, seq_length]; outputs is a list of float32
    [batch_size, seq_length, hidden_size], one per entry of
    `layer_indexes`.
  Raises:
    cli.UserError: the checkpoint lacks some of the model's variables.
  """
  inputs = {
      name: tf.compat.v1.placeholder(tf.int32, [None, seq_length], name=name)
      for name in INPUT_NAMES
  }
  # Only the real tokens' values are written, and those skip_padding leaves
  # unchanged. Its plain Session compiles nothing with XLA.
  model = modeling.BertModel(
      config=bert_config,
      is_training=False,
      input_ids=inputs["input_ids"],
      input_mask=inputs["input_mask"],
      token_type_ids=inputs["input_type_ids"],
      use_one_hot_embeddings=use_one_hot_embeddings,
      skip_padding=run_setup.skip_padding(True, use_xla=False))
  tvars = tf.compat.v1.trainable_variables()
  assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
      tvars, init_checkpoint)
  # Features from randomly initialized weights would be meaningless.
  missing = [v.name for v in tvars if v.name not in initialized]
  if missing:
    raise cli.UserError(
        "--init_checkpoint=%s lacks %d of the model's variables (e.g. %s); "
        "check that --bert_config_file belongs to this checkpoint." %
        (init_checkpoint, len(missing), missing[0]))
  tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
  all_layers = model.get_all_encoder_layers()
  outputs = [tf.cast(all_layers[i], tf.float32) for i in layer_indexes]
  return inputs, outputs


class FeatureModel(object):
  """The model of `bert_config` with the weights of `init_checkpoint`, in
  its own graph and `tf.compat.v1.Session`, built once and run on batch
  after batch of InputFeatures of `seq_length` positions."""

  def __init__(self, bert_config, init_checkpoint, seq_length,
               layer_indexes, use_one_hot_embeddings=False):
    self._graph = tf.Graph()
    with self._graph.as_default():
      self._inputs, self._outputs = _build_model(
          bert_config, seq_length, layer_indexes, init_checkpoint,
          use_one_hot_embeddings)
      self._session = tf.compat.v1.Session()
      self._session.run(tf.compat.v1.global_variables_initializer())

  def layer_values(self, features, batch_size):
    """Runs the model over `features`, `batch_size` at a time from the
    first.

    Yields:
      (feature, values) per feature, in order; values is a list (one per
      layer index) of float32 arrays [len(feature.tokens), hidden_size]
      (padding positions left out).
    """
    for start in range(0, len(features), batch_size):
      batch = features[start:start + batch_size]
      feed = {self._inputs[name]: [getattr(f, name) for f in batch]
              for name in INPUT_NAMES}
      layer_values = self._session.run(self._outputs, feed_dict=feed)
      for b, feature in enumerate(batch):
        num_tokens = len(feature.tokens)
        yield feature, [v[b, :num_tokens] for v in layer_values]

  def close(self):
    self._session.close()


def compute_layer_values(features, bert_config, init_checkpoint,
                         layer_indexes, batch_size,
                         use_one_hot_embeddings=False):
  """FeatureModel.layer_values of `features` (a list of InputFeatures of
  one length) with a model built for them alone, closed at the end."""
  if not features:
    return
  model = FeatureModel(bert_config, init_checkpoint,
                       len(features[0].input_ids), layer_indexes,
                       use_one_hot_embeddings)
  try:
    yield from model.layer_values(features, batch_size)
  finally:
    model.close()


def feature_to_json(feature, layer_indexes, values):
  """The output record of one example, in the original's layout."""
  tokens = []
  for i, token in enumerate(feature.tokens):
    layers = []
    for layer_index, layer_values in zip(layer_indexes, values):
      layers.append(collections.OrderedDict([
          ("index", layer_index),
          ("values", [round(float(x), 6) for x in layer_values[i]]),
      ]))
    tokens.append(collections.OrderedDict([
        ("token", token), ("layers", layers)]))
  return collections.OrderedDict([
      ("linex_index", feature.unique_id), ("features", tokens)])


def json_line(feature, layer_indexes, values):
  """`feature_to_json` as the output's text line, "\n" included."""
  return json.dumps(feature_to_json(feature, layer_indexes, values)) + "\n"
