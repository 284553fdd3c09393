# coding=utf-8
"""Fine-tunes BERT for named-entity recognition on CoNLL-2003, as the paper
ran it (Devlin et al. 2019, Section 5.3 and Table 7).

  * The data are CoNLL-2003's files as distributed (train.txt, valid.txt,
    test.txt, or eng.train, eng.testa, eng.testb) in --data_dir, with IOB1
    tags (the original release) or IOB2 (--tag_scheme); see tasks/conll.py.
  * Each word is WordPiece tokenized; its first sub-token carries its label
    and is what the token-level softmax classifies (no CRF). The other
    sub-tokens, [CLS], [SEP] and padding take no part in the loss.
  * "Maximal document context" (--context=document, the default): all
    sentences of a document are read as one text, cut into windows of
    --max_seq_length tokens ([CLS] window [SEP]) started every --doc_stride
    tokens; a word is predicted from the window where its first sub-token
    has the most context (tasks/windows.py, the rule of run_squad.py).
    Training reads every window with all of its words labeled.
    --context=sentence reads each sentence alone, for comparison.
  * The head: `cls/ner/output_weights` [num_labels, width] and
    `cls/ner/output_bias` [num_labels] on BERT's sequence output (what
    Hugging Face's BertForTokenClassification calls `classifier`); the loss
    is each window's mean cross-entropy over its labeled words, averaged
    over the windows of the batch.
  * --feature_mode: the paper's feature-based rows of Table 7. BERT is
    frozen (no BERT variable is trained or given optimizer slots) and one of
    its layer combinations feeds a randomly initialized two-layer BiLSTM
    (--lstm_size units per direction) under the same classifier.
  * Scores are conlleval's (entity-level precision, recall and F1, overall
    and per type): eval_results.txt and eval_conlleval.txt for --do_eval on
    the dev file, test_results.txt and test_conlleval.txt for --do_predict
    on the test file when it has tags (also TensorBoard scalars in
    output_dir/eval and output_dir/test); the predictions in CoNLL format
    (token, gold tag, predicted tag per line) in eval_predictions.txt /
    test_predictions.txt, for the official script.

Training, checkpoints, resuming, precision, memory planning, distribution,
export and the output folder's run_info.json (with the label list, the tag
scheme and the feature mode) are the other scripts'.
"""

import collections
import os
import random

from absl import flags
from absl import logging

from startup import shared_flags
from tasks import conll
from userio import cli

FLAGS = flags.FLAGS

TASK_NAME = "ner"
CONTEXTS = ("document", "sentence")
# Fine-tuning, then the feature-based rows of Table 7.
FINE_TUNING = "none"
FEATURE_MODES = (FINE_TUNING, "embeddings", "second_to_last", "last",
                 "sum_last_four", "concat_last_four", "sum_all")
HEAD_SCOPE = "cls/ner"
# "a randomly initialized two-layer 768-dimensional BiLSTM".
LSTM_LAYERS = 2
# Dropout before the classifier (and, feature-based, before the BiLSTM), as
# run_classifier.py's head.
HEAD_DROPOUT = 0.1
# Names of the model's outputs: the predicted label id of every position and
# the probabilities of the labels there.
TAG_IDS = "tag_ids"
TAG_PROBABILITIES = "tag_probabilities"
# Bumped whenever the TFRecord layout written here changes, so feature files
# of an older layout are written again instead of reused.
_RECORD_FORMAT_VERSION = 1


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags (from `__main__`, not at import)."""
  flags.DEFINE_string(
      "data_dir", None,
      "Folder with the CoNLL-2003 files: train.txt, valid.txt (or dev.txt) "
      "and test.txt, or the original eng.train, eng.testa, eng.testb.",
      flag_values=flag_values)
  shared_flags.define_common_flags(max_seq_length_default=128,
                                   flag_values=flag_values)
  shared_flags.define_skip_padding_flag(flag_values)
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)
  flags.DEFINE_bool(
      "do_eval", False,
      "Predict the dev file and score it: eval_results.txt, "
      "eval_conlleval.txt, eval_predictions.txt.", flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Windows per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_enum(
      "tag_scheme", "iob1", list(conll.TAG_SCHEMES),
      "iob1: CoNLL-2003's original release (entities are I-<type>, B- only "
      "between two entities of one type); iob2: BIO, every entity starts "
      "with B-. The files are checked against it.", flag_values=flag_values)
  flags.DEFINE_enum(
      "context", "document", list(CONTEXTS),
      "document: a document's sentences are read together in overlapping "
      "windows, each word predicted from the window where it has the most "
      "context (the paper's maximal document context); sentence: each "
      "sentence alone.", flag_values=flag_values)
  flags.DEFINE_integer(
      "doc_stride", None,
      "Tokens between the starts of two windows of a long text; default: "
      "half of a window, (--max_seq_length - 2) // 2.",
      flag_values=flag_values)
  flags.DEFINE_enum(
      "feature_mode", FINE_TUNING, list(FEATURE_MODES),
      "none: fine-tune BERT with the token classifier on its last layer. "
      "Otherwise BERT stays frozen and a two-layer BiLSTM reads: embeddings, "
      "second_to_last or last (one layer), sum_last_four / sum_all (a "
      "learned weighted sum of the last four / all encoder layers) or "
      "concat_last_four (Table 7's feature-based rows).",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "lstm_size", 768,
      "With --feature_mode: units per direction of each BiLSTM layer (the "
      "paper: 768).", flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

from checkpoints import run_info
import modeling
from runner import estimator as estimator_lib
from runner import feature_cache
from runner import serving_input
from startup import run_setup
from runner import tfrecord_input
from runner import training_graph
from tasks import text_pair
from tasks import windows
import tokenization
from userio import disk_space
from userio import output_files
from userio import progress
# pylint: enable=g-import-not-at-top,wrong-import-position


# ----------------------------------------------------------------- windows


NerWindow = collections.namedtuple(
    "NerWindow", ["tokens", "label_ids", "label_mask", "word_positions"])
NerWindow.__doc__ = """One window of a text, unpadded.

  tokens: [CLS], the window's sub-tokens, [SEP].
  label_ids: per position, the label id of the word starting there (0
    elsewhere).
  label_mask: per position, 1 where the loss or the prediction reads it:
    training, every word's first sub-token; prediction, those of the words
    this window gives the most context.
  word_positions: (position, word index) of the 1s of label_mask.
"""


def split_text(text):
  """The words of raw text with their character offsets, as CoNLL's tokens
  are cut: at whitespace, with each punctuation character a word of its
  own (BasicTokenizer's rules, case and accents kept).

  Returns:
    list of (word, start, end), `text[start:end] == word`.
  """
  words = []
  start = None
  for index, char in enumerate(text + " "):
    # pylint: disable=protected-access
    space = tokenization._is_whitespace(char) or index == len(text)
    punctuation = not space and tokenization._is_punctuation(char)
    # pylint: enable=protected-access
    if start is not None and (space or punctuation):
      words.append((text[start:index], start, index))
      start = None
    if punctuation:
      words.append((char, index, index + 1))
    elif not space and start is None:
      start = index
  return words


def word_pieces(words, tokenizer):
  """(sub-tokens, index of each word's first sub-token). A word the
  tokenizer drops entirely (control characters only) becomes [UNK], so that
  every word has a first sub-token."""
  pieces, first = [], []
  for word in words:
    first.append(len(pieces))
    pieces += tokenizer.tokenize(word) or ["[UNK]"]
  return pieces, first


def text_windows(words, tokenizer, max_seq_length, doc_stride, *,
                 label_ids=None, is_training=False):
  """The windows of one text (a document, or a sentence).

  Args:
    words: the text's words (strings).
    tokenizer: a tokenization.FullTokenizer.
    max_seq_length: tokens per window, [CLS] and [SEP] included.
    doc_stride: tokens between the starts of consecutive windows.
    label_ids: the words' label ids, or None (all 0).
    is_training: label every word of each window; else only those whose
      first sub-token has its most context in the window.

  Returns:
    list of NerWindow, in text order.
  """
  pieces, first = word_pieces(words, tokenizer)
  spans = windows.doc_spans(
      len(pieces), max_seq_length - 2, doc_stride,
      fix="Raise --max_seq_length (at least %d) and keep --doc_stride at "
      "least 1." % text_pair.MIN_SEQ_LENGTH_ONE_TEXT)
  owners = windows.max_context_owners(spans, len(pieces))
  word_at = {position: index for index, position in enumerate(first)}
  result = []
  for span_index, span in enumerate(spans):
    length = span.length + 2
    ids, mask, positions = [0] * length, [0] * length, []
    for offset in range(span.length):
      word = word_at.get(span.start + offset)
      if word is None or not (is_training or
                              owners[span.start + offset] == span_index):
        continue
      ids[offset + 1] = label_ids[word] if label_ids is not None else 0
      mask[offset + 1] = 1
      positions.append((offset + 1, word))
    tokens = (["[CLS]"] + pieces[span.start:span.start + span.length] +
              ["[SEP]"])
    result.append(NerWindow(tokens, ids, mask, positions))
  return result


def texts_of(documents, context):
  """The texts to window: each document's sentences joined (document
  context) or each sentence alone; lists of conll.Word."""
  if context == "document":
    return [[word for sentence in document for word in sentence]
            for document in documents]
  return conll.sentences_of(documents)


def file_windows(documents, labels, tokenizer, max_seq_length, doc_stride,
                 context, is_training):
  """The windows of a file's texts.

  Returns:
    list of (NerWindow, index of its text's first word among all the file's
    words, in file order).
  """
  label_map = {label: index for index, label in enumerate(labels)}
  result = []
  first_word = 0
  for words in texts_of(documents, context):
    label_ids = [label_map.get(word.tag, 0) for word in words]
    for window in text_windows([word.text for word in words], tokenizer,
                               max_seq_length, doc_stride,
                               label_ids=label_ids, is_training=is_training):
      result.append((window, first_word))
    first_word += len(words)
  return result


def _int64_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_windows(path, items, tokenizer, max_seq_length, fingerprint=None):
  """Writes the windows of `items` ((NerWindow, first word) pairs) as
  TFRecord features padded to max_seq_length: input_ids, input_mask,
  segment_ids, label_ids, label_mask (int64 [max_seq_length]). The file
  is written whole or not at all (runner/feature_cache.py); `fingerprint`
  (what the windows are made from) goes to its sidecar, which vouches for
  it to a later run."""
  meter = progress.Progress("Writing features to %s" % path, len(items),
                            unit="windows")
  with feature_cache.FeatureFile(path, len(items), depends_on=fingerprint,
                                 what="windows") as writer:
    for window, _ in items:
      padding = [0] * (max_seq_length - len(window.tokens))
      features = collections.OrderedDict()
      features["input_ids"] = _int64_feature(
          tokenizer.convert_tokens_to_ids(window.tokens) + padding)
      features["input_mask"] = _int64_feature([1] * len(window.tokens) +
                                              padding)
      features["segment_ids"] = _int64_feature([0] * max_seq_length)
      features["label_ids"] = _int64_feature(window.label_ids + padding)
      features["label_mask"] = _int64_feature(window.label_mask + padding)
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=features)).SerializeToString())
      meter.advance()
  meter.finish()


def input_fn_builder(input_file, seq_length, is_training, drop_remainder, *,
                     seed=None):
  """input_fn(params) over a `write_windows` file (int32 features)."""
  name_to_features = {
      name: tf.io.FixedLenFeature([seq_length], tf.int64)
      for name in ("input_ids", "input_mask", "segment_ids", "label_ids",
                   "label_mask")}
  return tfrecord_input.tfrecord_input_fn(input_file, name_to_features,
                                          is_training, drop_remainder, seed)


# ------------------------------------------------------------------- model


def _feature_layers(model, feature_mode):
  """The layers a feature mode reads: (list of [B, S, H] tensors, how they
  combine: "one", "sum" or "concat")."""
  layers = [model.get_embedding_output()] + model.get_all_encoder_layers()
  choice = {"embeddings": (layers[:1], "one"),
            "second_to_last": (layers[-2:-1], "one"),
            "last": (layers[-1:], "one"),
            "sum_last_four": (layers[-4:], "sum"),
            "concat_last_four": (layers[-4:], "concat"),
            "sum_all": (layers[1:], "sum")}
  return choice[feature_mode]


def min_layers(feature_mode):
  """The fewest encoder layers a feature mode needs."""
  return 4 if feature_mode.endswith("_four") else (
      2 if feature_mode == "second_to_last" else 1)


def _weighted_sum(layers):
  """ELMo's scalar mix: gamma * sum_j softmax(s)_j * layer_j, with the
  weights s (starting equal) and the scale gamma (starting at 1) learned.
  The paper does not say how its weights were set; this learns them."""
  weights = tf.compat.v1.get_variable(
      "layer_weights", [len(layers)], initializer=tf.zeros_initializer())
  scale = tf.compat.v1.get_variable("layer_scale", [],
                                    initializer=tf.ones_initializer())
  mix = tf.nn.softmax(weights)
  return scale * tf.add_n([mix[i] * layer for i, layer in enumerate(layers)])


def frozen_features(model, feature_mode):
  """float32 [B, S, width] of a feature mode, with no gradient into BERT."""
  layers, how = _feature_layers(model, feature_mode)
  layers = [tf.stop_gradient(tf.cast(layer, tf.float32)) for layer in layers]
  if how == "one":
    return layers[0]
  if how == "concat":
    return tf.concat(layers, axis=-1)
  return _weighted_sum(layers)


def _lstm(inputs, units, scope):
  """A left-to-right LSTM over [B, S, D] float32 inputs: [B, S, units].

  The cell of tf.nn.rnn_cell.LSTMCell: gates i, j, f, o from one kernel
  over [input, h] and a bias; c = sigmoid(f + 1) c + sigmoid(i) tanh(j),
  h = sigmoid(o) tanh(c); zero initial state.
  """
  depth = inputs.shape[-1]
  with tf.compat.v1.variable_scope(scope):
    kernel = tf.compat.v1.get_variable(
        "kernel", [depth + units, 4 * units],
        initializer=tf.compat.v1.glorot_uniform_initializer())
    bias = tf.compat.v1.get_variable("bias", [4 * units],
                                     initializer=tf.zeros_initializer())
  # The input half of every step's product at once, one matmul.
  projected = tf.einsum("bsd,dg->sbg", inputs, kernel[:depth]) + bias
  state_kernel = kernel[depth:]
  zeros = tf.zeros([tf.shape(inputs)[0], units])

  def step(state, projected_input):
    c, h = state
    i, j, f, o = tf.split(projected_input + tf.matmul(h, state_kernel), 4,
                          axis=1)
    c = tf.sigmoid(f + 1.0) * c + tf.sigmoid(i) * tf.tanh(j)
    return c, tf.sigmoid(o) * tf.tanh(c)

  _, outputs = tf.scan(step, projected, initializer=(zeros, zeros))
  return tf.transpose(outputs, [1, 0, 2])


def bilstm(inputs, input_mask, units, num_layers=LSTM_LAYERS):
  """A stacked bidirectional LSTM: [B, S, 2 * units], 0 at padding.

  The backward direction reads each window from its last real token
  (tf.reverse_sequence), so padding never reaches a real position.
  """
  lengths = tf.reduce_sum(input_mask, axis=1)
  mask = tf.cast(input_mask, tf.float32)[:, :, None]
  outputs = inputs
  for layer in range(num_layers):
    with tf.compat.v1.variable_scope("lstm_%d" % layer):
      forward = _lstm(outputs, units, "forward")
      backward = tf.reverse_sequence(
          _lstm(tf.reverse_sequence(outputs, lengths, seq_axis=1,
                                    batch_axis=0), units, "backward"),
          lengths, seq_axis=1, batch_axis=0)
    outputs = tf.concat([forward, backward], axis=-1) * mask
  return outputs


def head_variable_shapes(bert_config, num_labels, feature_mode=FINE_TUNING,
                         lstm_size=768):
  """(name, shape) of every variable the model adds to BERT."""
  width = bert_config.hidden_size
  shapes = []
  if feature_mode != FINE_TUNING:
    layers, how = _feature_layers(_LayerCount(bert_config), feature_mode)
    if how == "sum":
      shapes += [(HEAD_SCOPE + "/layer_weights", [len(layers)]),
                 (HEAD_SCOPE + "/layer_scale", [])]
    depth = width * (len(layers) if how == "concat" else 1)
    for layer in range(LSTM_LAYERS):
      for direction in ("forward", "backward"):
        scope = "%s/lstm_%d/%s/" % (HEAD_SCOPE, layer, direction)
        shapes += [(scope + "kernel", [depth + lstm_size, 4 * lstm_size]),
                   (scope + "bias", [4 * lstm_size])]
      depth = 2 * lstm_size
    width = depth
  return shapes + [(HEAD_SCOPE + "/output_weights", [num_labels, width]),
                   (HEAD_SCOPE + "/output_bias", [num_labels])]


class _LayerCount(object):
  """Stands in for a BertModel where only the number of layers matters."""

  def __init__(self, bert_config):
    self._count = bert_config.num_hidden_layers

  def get_embedding_output(self):
    return None

  def get_all_encoder_layers(self):
    return [None] * self._count


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 label_ids, label_mask, num_labels, use_one_hot_embeddings,
                 *, feature_mode=FINE_TUNING, lstm_size=768,
                 gradient_checkpointing=False, compute_dtype=tf.float32,
                 skip_padding=False):
  """BERT and the token classifier.

  Args:
    input_ids, input_mask, segment_ids: int32 [B, S].
    label_ids: int32 [B, S], the label of the word starting at a position.
    label_mask: int32 [B, S], 1 at the positions the loss reads.
    num_labels: classes of the softmax.
    feature_mode: FINE_TUNING, or one of FEATURE_MODES: frozen BERT (no
      dropout in it) under a BiLSTM of `lstm_size` units per direction.
    skip_padding: the encoder's feed-forward layers run on the real tokens
      only (modeling.BertModel). The values at real positions are the same,
      and nothing reads a padding position: the loss and the predictions
      read labeled positions, the forward LSTM runs left to right and the
      backward one starts at each window's last real token.

  Returns:
    (loss, per_example_loss [B], logits [B, S, num_labels] float32,
     probabilities [B, S, num_labels]). A window's loss is the mean
    cross-entropy over its labeled positions (0 without any); `loss` is the
    mean over the windows.
  """
  frozen = feature_mode != FINE_TUNING
  model = modeling.BertModel(
      config=bert_config, is_training=is_training and not frozen,
      input_ids=input_ids, input_mask=input_mask, token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings,
      gradient_checkpointing=gradient_checkpointing and not frozen,
      compute_dtype=compute_dtype, skip_padding=skip_padding)
  with tf.compat.v1.variable_scope(HEAD_SCOPE):
    if frozen:
      features = frozen_features(model, feature_mode)
      if is_training:
        features = modeling.dropout(features, HEAD_DROPOUT)
      features = bilstm(features, input_mask, lstm_size)
    else:
      # The head runs in float32 whatever the encoder's precision.
      features = tf.cast(model.get_sequence_output(), tf.float32)
    if is_training:
      features = modeling.dropout(features, HEAD_DROPOUT)
    width = features.shape[-1]
    output_weights = tf.compat.v1.get_variable(
        "output_weights", [num_labels, width],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
    output_bias = tf.compat.v1.get_variable(
        "output_bias", [num_labels], initializer=tf.zeros_initializer())
  logits = tf.einsum("bsw,lw->bsl", features, output_weights) + output_bias
  log_probs = tf.nn.log_softmax(logits, axis=-1)
  token_loss = -tf.reduce_sum(
      tf.one_hot(label_ids, depth=num_labels, dtype=tf.float32) * log_probs,
      axis=-1)
  mask = tf.cast(label_mask, tf.float32)
  per_example_loss = tf.reduce_sum(token_loss * mask, axis=1) / tf.maximum(
      tf.reduce_sum(mask, axis=1), 1.0)
  return (tf.reduce_mean(per_example_loss), per_example_loss, logits,
          tf.exp(log_probs))


def head_variables(variables):
  """The variables of `variables` outside BERT (the feature-based modes
  train these alone)."""
  return [v for v in variables if not v.name.startswith("bert/")]


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     feature_mode=FINE_TUNING, lstm_size=768,
                     gradient_checkpointing=False, compute_dtype=tf.float32,
                     skip_padding=False):
  """The model_fn for estimator.Estimator (TRAIN and PREDICT).

  PREDICT returns TAG_IDS (int32 [B, S], the most probable label) and
  TAG_PROBABILITIES (float32 [B, S, num_labels]). With a feature mode the
  train op updates the head's variables only. `skip_padding`: see
  `create_model`.
  """

  def model_fn(features, labels, mode, params):
    del labels  # Labels travel in `features`.
    is_training = mode == estimator_lib.ModeKeys.TRAIN
    if mode not in (estimator_lib.ModeKeys.TRAIN,
                    estimator_lib.ModeKeys.PREDICT):
      raise ValueError("Only TRAIN and PREDICT modes are supported: %s" %
                       mode)
    input_ids = features["input_ids"]
    zeros = tf.zeros_like(input_ids)
    loss, _, logits, probabilities = create_model(
        bert_config, is_training, input_ids, features["input_mask"],
        features["segment_ids"], features.get("label_ids", zeros),
        features.get("label_mask", zeros), num_labels,
        use_one_hot_embeddings, feature_mode=feature_mode,
        lstm_size=lstm_size, gradient_checkpointing=gradient_checkpointing,
        compute_dtype=compute_dtype, skip_padding=skip_padding)
    training_graph.init_from_checkpoint(init_checkpoint)
    if is_training:
      tvars = tf.compat.v1.trainable_variables()
      if feature_mode != FINE_TUNING:
        tvars = head_variables(tvars)
        logging.info("--feature_mode=%s: BERT is frozen; training the %d "
                     "variables of %s only.", feature_mode, len(tvars),
                     HEAD_SCOPE)
      train_op = training_graph.train_op(
          loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
          params=params, optimizer=optimizer, compute_dtype=compute_dtype,
          tvars=tvars)
      return estimator_lib.EstimatorSpec(mode=mode, loss=loss,
                                         train_op=train_op)
    return estimator_lib.EstimatorSpec(mode=mode, predictions={
        TAG_IDS: tf.argmax(logits, axis=-1, output_type=tf.int32),
        TAG_PROBABILITIES: probabilities})

  return model_fn


def serving_input_receiver_fn_builder(seq_length):
  """The serving input of an exported NER model: int32 input_ids,
  input_mask and segment_ids [batch, length <= seq_length]; the outputs
  are TAG_IDS and TAG_PROBABILITIES."""
  return serving_input.receiver_fn_builder(seq_length, {})


# ------------------------------------------------------------ predictions


def predicted_tags(items, results, labels, sentences):
  """The predicted tag of every word, per sentence.

  Args:
    items: the (NerWindow, first word) pairs of `file_windows`, in the
      order of `results`.
    results: per window, the model's TAG_IDS.
    labels: the label list.
    sentences: the file's sentences (lists of conll.Word), in order.

  Returns:
    list per sentence of tag strings.

  Raises:
    RuntimeError when a word got no prediction or two (a bug).
  """
  tags = {}
  for (window, first_word), tag_ids in zip(items, results):
    for position, word in window.word_positions:
      if first_word + word in tags:
        raise RuntimeError("Word %d was predicted twice." % (first_word +
                                                            word))
      tags[first_word + word] = labels[int(tag_ids[position])]
  num_words = sum(len(sentence) for sentence in sentences)
  if sorted(tags) != list(range(num_words)):
    raise RuntimeError("Got predictions for %d of %d words." % (
        len(tags), num_words))
  per_sentence, start = [], 0
  for sentence in sentences:
    per_sentence.append([tags[start + i] for i in range(len(sentence))])
    start += len(sentence)
  return per_sentence


DataSet = collections.namedtuple("DataSet", ["path", "documents", "tagged"])


def _read_sets(data_dir, tag_scheme, actions):
  """{set type: DataSet} of the requested actions' files, read and checked
  before anything slow starts."""
  sets = {}
  for action, set_type in actions:
    if not action:
      continue
    path = conll.find_data_file(data_dir, set_type)
    documents, tagged = conll.read_file(path, tag_scheme)
    if set_type != "test" and not tagged:
      raise cli.UserError(
          "%s has no tags (one field per line); --do_%s needs the gold "
          "tags" % (path, "train" if set_type == "train" else "eval"),
          fix="Pass the file as distributed (token ... tag per line).")
    sets[set_type] = DataSet(path, documents, tagged)
  return sets


def _labels(sets, output_dir, init_checkpoint):
  """The label list: the training file's types, else the one recorded in
  --output_dir or beside --init_checkpoint (run_info.json)."""
  if "train" in sets:
    return conll.label_list(conll.entity_types(sets["train"].documents))
  folders = [output_dir] + ([os.path.dirname(init_checkpoint)]
                            if init_checkpoint else [])
  for folder in folders:
    record = run_info.read(folder) or {}
    if record.get("task") == TASK_NAME and record.get("labels"):
      return list(record["labels"])
  raise cli.UserError(
      "Cannot tell the model's labels: --output_dir=%s and the folder of "
      "--init_checkpoint hold no run_info.json of a NER run" % output_dir,
      fix="Add --do_train, or point --output_dir (or --init_checkpoint) at a "
      "trained NER run.")


class _Settings(collections.namedtuple(
    "_Settings", ["shared", "tokenizer", "labels", "doc_stride"])):
  """What the data conversion needs: the shared flags, the tokenizer, the
  label list and the resolved --doc_stride."""


def _windows(settings, data_set, is_training):
  return file_windows(data_set.documents, settings.labels,
                      settings.tokenizer, settings.shared.max_seq_length,
                      settings.doc_stride, FLAGS.context, is_training)


def _prepare_windows(settings, data_set, items, file_name, is_training,
                     **order):
  """Writes output_dir/file_name for the windows `items` of `data_set`, or
  reuses it when its sidecar vouches for it (the same data file,
  vocabulary, casing, length, windows, labels and order); returns its
  path. `order`: feature_cache.fingerprint's example_order and
  shuffle_seed."""
  shared = settings.shared
  path = os.path.join(shared.output_dir, file_name)
  fingerprint = feature_cache.fingerprint(
      [data_set.path], shared.spm_model_file or shared.vocab_file,
      shared.do_lower_case, shared.max_seq_length, TASK_NAME, len(items),
      record_format=_RECORD_FORMAT_VERSION, window_stride=settings.doc_stride,
      context=FLAGS.context, tag_scheme=FLAGS.tag_scheme,
      labels=list(settings.labels), label_every_word=bool(is_training),
      **order)
  feature_cache.prepare(
      path, fingerprint,
      lambda: write_windows(path, items, settings.tokenizer,
                            shared.max_seq_length, fingerprint),
      what="windows")
  return path


def _train(settings, estimator, data_set, items, num_train_steps):
  """Shuffles the training windows with --seed, writes and trains."""
  shared = settings.shared
  items = list(items)
  # Windows of one document are neighbours; the input's 100-window shuffle
  # buffer alone would not mix documents.
  random.Random(shared.seed).shuffle(items)
  path = _prepare_windows(settings, data_set, items, "train.tf_record", True,
                          example_order="shuffled", shuffle_seed=shared.seed)
  logging.info("***** Running training *****")
  logging.info("  Num windows = %d", len(items))
  logging.info("  Batch size = %d", shared.train_batch_size)
  logging.info("  Num steps = %d", num_train_steps)
  estimator.train(input_fn=input_fn_builder(
      path, shared.max_seq_length, is_training=True, drop_remainder=True,
      seed=shared.seed), max_steps=num_train_steps)


def _predict_set(settings, estimator, data_set, name, batch_size):
  """Predicts one file and writes <name>_predictions.txt; with gold tags
  also <name>_results.txt and <name>_conlleval.txt. Returns the metrics
  (or None)."""
  shared = settings.shared
  items = _windows(settings, data_set, is_training=False)
  path = _prepare_windows(settings, data_set, items, name + ".tf_record",
                          False)
  logging.info("***** Predicting %s: %d windows *****", data_set.path,
               len(items))
  results = [result[TAG_IDS] for result in estimator.predict(
      input_fn_builder(path, shared.max_seq_length, is_training=False,
                       drop_remainder=False),
      num_batches=-(-len(items) // batch_size))]
  sentences = conll.sentences_of(data_set.documents)
  tags = predicted_tags(items, results, settings.labels, sentences)
  output_files.write_text(
      os.path.join(shared.output_dir, name + "_predictions.txt"),
      conll.predictions_text(data_set.documents, tags), flag="--output_dir")
  if not data_set.tagged:
    return None
  counts = conll.count([list(zip([w.tag for w in sentence], predicted))
                        for sentence, predicted in zip(sentences, tags)])
  metrics = conll.metrics(counts, prefix=name + "_")
  checkpoint = estimator.latest_checkpoint()
  if checkpoint:
    metrics["global_step"] = int(checkpoint.rsplit("-", 1)[1])
    _write_summaries(os.path.join(shared.output_dir, name), metrics)
  output_files.write_eval_results(
      os.path.join(shared.output_dir, name + "_results.txt"), metrics,
      flag="--output_dir")
  report = conll.report(counts)
  output_files.write_text(
      os.path.join(shared.output_dir, name + "_conlleval.txt"), report,
      flag="--output_dir")
  logging.info("***** %s results (conlleval) *****\n%s", name, report)
  return metrics


def _write_summaries(folder, metrics):
  """The metrics as TensorBoard scalars at their global step, in `folder`
  (output_dir/eval beside the training summaries, as the classifier's)."""
  with disk_space.writing(folder, "TensorBoard summaries",
                          flag="--output_dir"), tf.Graph().as_default():
    writer = tf.compat.v1.summary.FileWriter(folder)
    writer.add_summary(tf.compat.v1.Summary(value=[
        tf.compat.v1.Summary.Value(tag=tag, simple_value=float(value))
        for tag, value in sorted(metrics.items()) if tag != "global_step"]),
                       metrics["global_step"])
    writer.close()


def _check_flags():
  """The script's own flags, before anything is read; returns the resolved
  --doc_stride."""
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or
          FLAGS.export_dir):
    raise cli.UserError("Nothing to do: pass at least one of --do_train, "
                        "--do_eval, --do_predict and --export_dir.")
  if not os.path.isdir(FLAGS.data_dir):
    raise cli.UserError("--data_dir=%s is not a directory; point it at the "
                        "folder with the CoNLL-2003 files." % FLAGS.data_dir)
  if FLAGS.eval_batch_size < 1:
    raise cli.UserError("--eval_batch_size=%d must be at least 1." %
                        FLAGS.eval_batch_size)
  if FLAGS.feature_mode != FINE_TUNING and FLAGS.lstm_size < 1:
    raise cli.UserError("--lstm_size=%d must be at least 1 (the paper: 768)."
                        % FLAGS.lstm_size)
  stride = FLAGS.doc_stride
  if stride is None:
    stride = max(1, (FLAGS.max_seq_length - 2) // 2)
  if stride < 1:
    raise cli.UserError("--doc_stride=%d must be at least 1." % stride)
  return stride


def _check_feature_mode(feature_mode, bert_config, bert_config_file):
  """A feature mode's layers exist in the model."""
  if feature_mode == FINE_TUNING:
    return
  needed = min_layers(feature_mode)
  if bert_config.num_hidden_layers < needed:
    raise cli.UserError(
        "--feature_mode=%s reads %d encoder layers, but --bert_config_file=%s "
        "has %d; choose another mode or model." % (
            feature_mode, needed, bert_config_file,
            bert_config.num_hidden_layers))


def _record(labels, shared, doc_stride):
  """The run_info.json of this run. The context and stride of training are
  recorded too (a resumed run must keep them; evaluation may use others);
  the BiLSTM's size only for a feature mode, whose variables it shapes."""
  extra = {"tag_scheme": FLAGS.tag_scheme, "feature_mode": FLAGS.feature_mode}
  if FLAGS.feature_mode != FINE_TUNING:
    extra["lstm_size"] = FLAGS.lstm_size
  if FLAGS.do_train:
    extra.update(context=FLAGS.context, doc_stride=doc_stride)
  return run_info.make_record(
      TASK_NAME, labels, shared.do_lower_case, shared.max_seq_length,
      shared.bert_config_file, shared.vocab_file, shared.spm_model_file,
      **extra)


def main(_):
  doc_stride = _check_flags()
  shared, bert_config, tokenizer = run_setup.start(
      shared_flags.read(FLAGS), do_train=FLAGS.do_train,
      min_seq_length=text_pair.MIN_SEQ_LENGTH_ONE_TEXT)
  _check_feature_mode(FLAGS.feature_mode, bert_config,
                      shared.bert_config_file)
  sets = _read_sets(FLAGS.data_dir, FLAGS.tag_scheme, (
      (FLAGS.do_train, "train"), (FLAGS.do_eval, "dev"),
      (FLAGS.do_predict, "test")))
  labels = _labels(sets, shared.output_dir, shared.init_checkpoint)
  for data_set in sets.values():
    if data_set.tagged:
      conll.check_known_tags(data_set.documents, labels, data_set.path)
  record = _record(labels, shared, doc_stride)
  run_setup.check_output_dir(shared.output_dir, record, do_train=FLAGS.do_train)
  settings = _Settings(shared, tokenizer, labels, doc_stride)
  num_train_steps = num_warmup_steps = None
  train_items = None
  if FLAGS.do_train:
    train_items = _windows(settings, sets["train"], is_training=True)
    num_train_steps, num_warmup_steps = run_setup.num_train_and_warmup_steps(
        len(train_items), shared.train_batch_size, shared.num_train_epochs,
        shared.warmup_proportion, sets["train"].path)
  setup = run_setup.set_up(
      shared, bert_config, do_train=FLAGS.do_train, record=record,
      heads=head_variable_shapes(bert_config, len(labels), FLAGS.feature_mode,
                                 FLAGS.lstm_size))
  model_fn = model_fn_builder(
      bert_config=bert_config, num_labels=len(labels),
      init_checkpoint=shared.init_checkpoint,
      learning_rate=shared.learning_rate, num_train_steps=num_train_steps,
      num_warmup_steps=num_warmup_steps, use_tpu=shared.use_tpu,
      use_one_hot_embeddings=shared.use_tpu, optimizer=shared.optimizer,
      feature_mode=FLAGS.feature_mode, lstm_size=FLAGS.lstm_size,
      gradient_checkpointing=setup.gradient_checkpointing,
      compute_dtype=setup.compute_dtype,
      skip_padding=run_setup.skip_padding(FLAGS.skip_padding, shared.use_xla))

  def make_estimator(predict_batch_size):
    return estimator_lib.Estimator(
        model_fn=model_fn, config=setup.run_config,
        train_batch_size=shared.train_batch_size,
        predict_batch_size=predict_batch_size)

  estimator = make_estimator(shared.predict_batch_size)
  if FLAGS.do_train:
    _train(settings, estimator, sets["train"], train_items, num_train_steps)
  if not estimator.config.is_chief:
    logging.info("This worker's training is done; the chief writes the "
                 "evaluation and prediction outputs.")
    return
  if FLAGS.do_eval:
    _predict_set(settings, make_estimator(FLAGS.eval_batch_size),
                 sets["dev"], "eval", FLAGS.eval_batch_size)
  if FLAGS.do_predict:
    _predict_set(settings, estimator, sets["test"], "test",
                 shared.predict_batch_size)
  if shared.export_dir:
    estimator.export_saved_model(
        shared.export_dir,
        serving_input_receiver_fn_builder(shared.max_seq_length),
        assets=run_info.assets(shared.output_dir))


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("data_dir")
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
