# coding=utf-8
"""Named-entity recognition on CoNLL-2003, as the BERT paper ran it
(Section 5.3 and Table 7), and on any tag set in the same file format.

The task of run_ner.py.

  * The data are CoNLL-2003's files, or files of other names in its format
    (tasks/conll.py), with IOB1, IOB2 or BIOES tags of any entity types.
  * Each word is WordPiece tokenized; its first sub-token carries its
    label and is what the token-level softmax classifies (no CRF). The
    other sub-tokens, [CLS], [SEP] and padding take no part in the loss.
  * "Maximal document context" (the default): all sentences of a document
    are read as one text, cut into windows of max_seq_length tokens
    ([CLS] window [SEP]) started every doc_stride tokens; a word is
    predicted from the window where its first sub-token has the most
    context (tasks/windows.py, the rule of run_squad.py). Training reads
    every window with all of its words labeled. Sentence context reads
    each sentence alone.
  * The head: `cls/ner/output_weights` [num_labels, width] and
    `cls/ner/output_bias` [num_labels] on BERT's sequence output (what
    Hugging Face's BertForTokenClassification calls `classifier`); the
    loss averages the labeled words' cross-entropies per window and then
    over the windows of the batch, or over all labeled words of the batch
    (tasks/token_loss.py).
  * A feature mode (tasks/feature_modes.py): the paper's feature-based
    rows of Table 7. BERT is frozen (no BERT variable is trained or given
    optimizer slots) and some of its layers feed a randomly initialized
    two-layer BiLSTM under the same classifier.
  * Scores are conlleval's (entity-level precision, recall and F1,
    overall and per type), with the predictions in CoNLL format (token,
    gold tag, predicted tag per line) for the official script.
"""

import collections
import os

from absl import logging
import tensorflow as tf

from checkpoints import run_info
import modeling
from runner import estimator as estimator_lib
from runner import feature_cache
from runner import serving_input
from runner import tfrecord_input
from runner import training_graph
from serving import word_inputs
from tasks import conll
from tasks import feature_modes
from tasks import task
from tasks import text_pair
from tasks import token_loss
from tasks import windows
from userio import cli
from userio import progress

TASK_NAME = "ner"
HEAD_SCOPE = "cls/ner"
# "a randomly initialized two-layer 768-dimensional BiLSTM".
LSTM_LAYERS = 2
# Dropout before the classifier (and, feature-based, before the BiLSTM), as
# the classifier's head.
HEAD_DROPOUT = 0.1
# Names of the model's outputs: the predicted label id of every position and
# the probabilities of the labels there.
TAG_IDS = "tag_ids"
TAG_PROBABILITIES = "tag_probabilities"
# Bumped whenever the TFRecord layout written here changes, so feature files
# of an older layout are written again instead of reused.
RECORD_FORMAT_VERSION = 1


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
  for words in conll.texts_of(documents, context):
    label_ids = [label_map.get(word.tag, 0) for word in words]
    for window in text_windows([word.text for word in words], tokenizer,
                               max_seq_length, doc_stride,
                               label_ids=label_ids, is_training=is_training):
      result.append((window, first_word))
    first_word += len(words)
  return result


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
      writer.write(feature_cache.serialized_example({
          "input_ids": feature_cache.int64_feature(
              tokenizer.convert_tokens_to_ids(window.tokens) + padding),
          "input_mask": feature_cache.int64_feature(
              [1] * len(window.tokens) + padding),
          "segment_ids": feature_cache.int64_feature([0] * max_seq_length),
          "label_ids": feature_cache.int64_feature(window.label_ids +
                                                   padding),
          "label_mask": feature_cache.int64_feature(window.label_mask +
                                                    padding)}))
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
  indices, how = feature_modes.layer_choice(
      len(model.get_all_encoder_layers()), feature_mode)
  all_layers = [model.get_embedding_output()] + model.get_all_encoder_layers()
  layers = [tf.stop_gradient(tf.cast(all_layers[i], tf.float32))
            for i in indices]
  if how == feature_modes.ONE:
    return layers[0]
  if how == feature_modes.CONCAT:
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


def head_variable_shapes(bert_config, num_labels,
                         feature_mode=feature_modes.FINE_TUNING,
                         lstm_size=768):
  """(name, shape) of every variable the model adds to BERT."""
  width = bert_config.hidden_size
  shapes = []
  if feature_mode != feature_modes.FINE_TUNING:
    layers, how = feature_modes.layer_choice(bert_config.num_hidden_layers,
                                             feature_mode)
    if how == feature_modes.SUM:
      shapes += [(HEAD_SCOPE + "/layer_weights", [len(layers)]),
                 (HEAD_SCOPE + "/layer_scale", [])]
    depth = width * (len(layers) if how == feature_modes.CONCAT else 1)
    for layer in range(LSTM_LAYERS):
      for direction in ("forward", "backward"):
        scope = "%s/lstm_%d/%s/" % (HEAD_SCOPE, layer, direction)
        shapes += [(scope + "kernel", [depth + lstm_size, 4 * lstm_size]),
                   (scope + "bias", [4 * lstm_size])]
      depth = 2 * lstm_size
    width = depth
  return shapes + [(HEAD_SCOPE + "/output_weights", [num_labels, width]),
                   (HEAD_SCOPE + "/output_bias", [num_labels])]


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 label_ids, label_mask, num_labels, use_one_hot_embeddings,
                 *, feature_mode=feature_modes.FINE_TUNING, lstm_size=768,
                 loss_average=token_loss.DEFAULT,
                 gradient_checkpointing=False, compute_dtype=tf.float32,
                 skip_padding=False):
  """BERT and the token classifier.

  Args:
    input_ids, input_mask, segment_ids: int32 [B, S].
    label_ids: int32 [B, S], the label of the word starting at a position.
    label_mask: int32 [B, S], 1 at the positions the loss reads.
    num_labels: classes of the softmax.
    feature_mode: feature_modes.FINE_TUNING, or another of its modes: frozen
      BERT (no dropout in it) under a BiLSTM of `lstm_size` units per
      direction.
    loss_average: one of token_loss.LOSS_AVERAGES, how `loss` averages the
      labeled positions' cross-entropies.
    skip_padding: the encoder's feed-forward layers run on the real tokens
      only (modeling.BertModel). The values at real positions are the same,
      and nothing reads a padding position: the loss and the predictions
      read labeled positions, the forward LSTM runs left to right and the
      backward one starts at each window's last real token.

  Returns:
    (loss, per_example_loss [B], logits [B, S, num_labels] float32,
     probabilities [B, S, num_labels]). A window's loss is the mean
    cross-entropy over its labeled positions (0 without any); `loss` is the
    mean over the windows (token_loss.WINDOW) or over all labeled positions
    of the batch (token_loss.WORD; 0 without any).
  """
  frozen = feature_mode != feature_modes.FINE_TUNING
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
  word_losses = -tf.reduce_sum(
      tf.one_hot(label_ids, depth=num_labels, dtype=tf.float32) * log_probs,
      axis=-1)
  mask = tf.cast(label_mask, tf.float32)
  window_sums = tf.reduce_sum(word_losses * mask, axis=1)
  window_words = tf.reduce_sum(mask, axis=1)
  per_example_loss = window_sums / tf.maximum(window_words, 1.0)
  if loss_average == token_loss.WORD:
    loss = tf.reduce_sum(window_sums) / tf.maximum(
        tf.reduce_sum(window_words), 1.0)
  else:
    loss = tf.reduce_mean(per_example_loss)
  return loss, per_example_loss, logits, tf.exp(log_probs)


def head_variables(variables):
  """The variables of `variables` outside BERT (the feature-based modes
  train these alone)."""
  return [v for v in variables if not v.name.startswith("bert/")]


def ner_head(features, mode, settings, *, num_labels,
             feature_mode=feature_modes.FINE_TUNING, lstm_size=768,
             loss_average=token_loss.DEFAULT):
  """`create_model` on a batch of `write_windows`' features, as
  runner/training_graph.model_fn_builder calls a head (TRAIN and PREDICT;
  NER is scored by conlleval on the predictions). PREDICT gives TAG_IDS
  (int32 [B, S], the most probable label) and TAG_PROBABILITIES (float32
  [B, S, num_labels]). With a feature mode, training updates the head's
  variables only."""
  if mode == estimator_lib.ModeKeys.EVAL:
    raise ValueError("NER is evaluated from its predictions (conlleval); "
                     "its model has no EVAL mode.")
  is_training = mode == estimator_lib.ModeKeys.TRAIN
  input_ids = features["input_ids"]
  zeros = tf.zeros_like(input_ids)
  loss, _, logits, probabilities = create_model(
      settings.bert_config, is_training, input_ids, features["input_mask"],
      features["segment_ids"], features.get("label_ids", zeros),
      features.get("label_mask", zeros), num_labels,
      feature_mode=feature_mode, lstm_size=lstm_size,
      loss_average=loss_average, **settings.encoder_options())
  if not is_training:
    return training_graph.ModelOutputs(loss, predictions={
        TAG_IDS: tf.argmax(logits, axis=-1, output_type=tf.int32),
        TAG_PROBABILITIES: probabilities})
  if feature_mode == feature_modes.FINE_TUNING:
    return training_graph.ModelOutputs(loss)
  train_variables = head_variables(tf.compat.v1.trainable_variables())
  logging.info("--feature_mode=%s: BERT is frozen; training the %d "
               "variables of %s only.", feature_mode, len(train_variables),
               HEAD_SCOPE)
  return training_graph.ModelOutputs(loss, train_variables=train_variables)


def serving_input_receiver_fn_builder(seq_length, text_signature=None):
  """The serving input of an exported NER model: int32 input_ids,
  input_mask and segment_ids [batch, length <= seq_length]; the outputs
  are TAG_IDS and TAG_PROBABILITIES. With a `text_signature`
  (`text_signature_of`), the "text" signature takes raw texts instead."""
  return serving_input.receiver_fn_builder(seq_length, {},
                                           text_signature=text_signature)


def text_signature_of(tokenizer_fn, seq_length, doc_stride, labels):
  """The signature from raw text (runner/serving_input.py).

  Input: "text", tf.string [batch]. Each text is read as run_ner.py reads a
  document, in windows of seq_length started every doc_stride pieces
  (serving/word_inputs.py); all windows of the batch are one model call.
  Outputs, one row per text, padded to the batch's most words: "words"
  (tf.string, "" as padding), their code point offsets "start" and "end"
  (int64, text[start:end] is the word; -1 as padding), the predicted
  "tags" (tf.string, "" as padding) and "tag_probability" (float32, the
  tag's probability; 0 as padding).

  Args:
    tokenizer_fn: callable () -> a serving.graph_tokenizer tokenizer,
      called in the export graph.
  """
  layout = {}

  def inputs_fn():
    texts = {"text": tf.compat.v1.placeholder(tf.string, [None], "text")}
    layout["windows"] = word_inputs.word_windows(
        tokenizer_fn(), texts["text"], seq_length, doc_stride)
    return texts, layout["windows"].model_inputs

  def outputs_fn(predictions, texts):
    del texts  # Their words are in the layout.
    windows_read = layout["windows"]
    at = tf.stack([windows_read.window, windows_read.position], axis=1)
    tag_ids = tf.gather_nd(predictions[TAG_IDS], at)
    probabilities = tf.gather_nd(
        predictions[TAG_PROBABILITIES],
        tf.concat([at, tf.cast(tag_ids, tf.int64)[:, None]], axis=1))
    words = windows_read.words

    def padded(values, padding):
      return words.with_flat_values(values).to_tensor(padding)

    return {
        "words": words.to_tensor(""),
        "start": windows_read.starts.to_tensor(-1),
        "end": windows_read.ends.to_tensor(-1),
        "tags": padded(tf.gather(tf.constant(list(labels)), tag_ids), ""),
        "tag_probability": padded(probabilities, 0.0),
    }

  return serving_input.TextSignature(inputs_fn, outputs_fn)


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
DataSet.__doc__ = """A CoNLL file read: its path, its documents (lists of
sentences of conll.Word) and whether it has tags."""


class NerTask(task.Task):
  """CoNLL files (CoNLL-2003's folder, or files of your own), windows over
  their texts, the token classifier (or a frozen BERT under a BiLSTM),
  conlleval's scores."""

  name = TASK_NAME
  serves_text = True

  def __init__(self, data_dir=None, *, data_files=None, tag_scheme="iob1",
               context="document", doc_stride=None,
               feature_mode=feature_modes.FINE_TUNING, lstm_size=768,
               loss_average=token_loss.DEFAULT):
    """Args:
      data_dir: the folder of the CoNLL-2003 files (conll.DATA_FILES), or
        None with `data_files`.
      data_files: {set type (task.TRAIN, DEV, TEST): path or None}, files
        of any names, instead of `data_dir`.
      tag_scheme: one of conll.TAG_SCHEMES.
      context: one of conll.CONTEXTS.
      doc_stride: tokens between window starts; None: half a window.
      feature_mode: one of feature_modes.FEATURE_MODES.
      lstm_size: units per direction of each BiLSTM layer (feature modes).
      loss_average: one of token_loss.LOSS_AVERAGES.

    Raises:
      cli.UserError for a stride or BiLSTM size below 1, or for both or
      neither of `data_dir` and `data_files`.
    """
    super().__init__()
    if doc_stride is not None and doc_stride < 1:
      raise cli.UserError("--doc_stride=%d must be at least 1." % doc_stride)
    if feature_mode != feature_modes.FINE_TUNING and lstm_size < 1:
      raise cli.UserError("--lstm_size=%d must be at least 1 (the paper: "
                          "768)." % lstm_size)
    if bool(data_dir) == any((data_files or {}).values()):
      raise cli.UserError(
          "Pass --data_dir (CoNLL-2003's folder) or --train_file / "
          "--dev_file / --predict_file (your own CoNLL files), not %s." % (
              "both" if data_dir else "neither"))
    self.data_dir = data_dir
    self.data_files = dict(data_files or {})
    self.tag_scheme = tag_scheme
    self.context = context
    self.doc_stride = doc_stride
    self.feature_mode = feature_mode
    self.lstm_size = lstm_size
    self.loss_average = loss_average
    self.labels = None
    self.sets = None
    self.train_items = None
    # Per set name ("eval", "test"): (windows, their feature file).
    self._window_files = {}

  def start(self, flags, bert_config, tokenizer):
    """Resolves the stride and checks that a feature mode's layers exist in
    the model."""
    super().start(flags, bert_config, tokenizer)
    if self.doc_stride is None:
      self.doc_stride = max(1, (flags.max_seq_length - 2) // 2)
    if self.feature_mode == feature_modes.FINE_TUNING:
      return
    needed = feature_modes.min_layers(self.feature_mode)
    if bert_config.num_hidden_layers < needed:
      raise cli.UserError(
          "--feature_mode=%s reads %d encoder layers, but "
          "--bert_config_file=%s has %d; choose another mode or model." % (
              self.feature_mode, needed, flags.bert_config_file,
              bert_config.num_hidden_layers))

  def record(self):
    """The labels, the tag scheme and the feature mode; the context and
    stride of training too (a resumed run must keep them; evaluation may
    use others); the BiLSTM's size only for a feature mode, whose
    variables it shapes."""
    extra = {"tag_scheme": self.tag_scheme, "feature_mode": self.feature_mode}
    if self.feature_mode != feature_modes.FINE_TUNING:
      extra["lstm_size"] = self.lstm_size
    if self.flags.do_train:
      extra.update(context=self.context, doc_stride=self.doc_stride)
    return self.make_record(self._labels(), **extra)

  def read_data(self):
    """Every requested file, its tags checked against the scheme and the
    labels; the training windows."""
    for data_set in self._read_sets().values():
      if data_set.tagged:
        conll.check_known_tags(data_set.documents, self._labels(),
                               data_set.path)
    if task.TRAIN in self.sets:
      self.train_items = self._windows(self.sets[task.TRAIN], True)

  def num_train_examples(self):
    return len(self.train_items), self.sets[task.TRAIN].path

  def head_shapes(self):
    return head_variable_shapes(self.bert_config, len(self.labels),
                                self.feature_mode, self.lstm_size)

  def head(self, features, mode, settings):
    return ner_head(features, mode, settings, num_labels=len(self.labels),
                    feature_mode=self.feature_mode, lstm_size=self.lstm_size,
                    loss_average=self.loss_average)

  def train_input_fn(self):
    """The training windows permuted with --seed: the windows of one
    document are neighbours, and the input's shuffle buffer alone would
    not mix documents."""
    items, order = self.training_order(self.train_items,
                                       feature_cache.SHUFFLED)
    path = self._prepare_windows(self.sets[task.TRAIN], items,
                                 "train.tf_record", True, **order)
    return (input_fn_builder(path, self.flags.max_seq_length,
                             is_training=True, drop_remainder=True,
                             seed=self.flags.seed),
            ["Num windows = %d" % len(items)])

  def evaluate(self, estimator, checkpoint_path=None):
    """conlleval's scores of the dev file (eval_results.txt,
    eval_conlleval.txt), and its predictions (eval_predictions.txt)."""
    return self._predict_set(estimator, self.sets[task.DEV], "eval",
                             self.flags.eval_batch_size, checkpoint_path,
                             for_evaluation=True)

  def eval_metric_names(self):
    """Entity-level F1 first, then precision, recall, token accuracy and
    each entity type's scores."""
    types = sorted({conll.split_tag(label)[1] for label in self._labels()
                    if label != conll.OUTSIDE})
    return ["eval_" + name for name in (
        ["f1", "precision", "recall", "accuracy"] +
        ["%s_%s" % (kind, entity_type) for entity_type in types
         for kind in ("f1", "precision", "recall", "gold", "predicted")])]

  def predict(self, estimator, checkpoint_path=None):
    """test_predictions.txt; with gold tags in the test file also its
    scores (test_results.txt, test_conlleval.txt)."""
    return self._predict_set(estimator, self.sets[task.TEST], "test",
                             self.flags.predict_batch_size, checkpoint_path)

  def serving_input_receiver_fn(self):
    text_signature = None
    if self.exports_text():
      text_signature = text_signature_of(
          self.graph_tokenizer_fn(), self.flags.max_seq_length,
          self.doc_stride, self._labels())
    return serving_input_receiver_fn_builder(self.flags.max_seq_length,
                                             text_signature)

  def _read_sets(self):
    """{set type: DataSet} of the requested files, read once."""
    if self.sets is not None:
      return self.sets
    self.sets = {}
    for set_type in self.sets_to_read():
      path = self._data_file(set_type)
      documents, tagged = conll.read_file(path, self.tag_scheme)
      if set_type != task.TEST and not tagged:
        raise cli.UserError(
            "%s has no tags (one field per line); %s needs the gold tags" % (
                path, task.ACTION_FLAGS[set_type]),
            fix="Pass the file as distributed (token ... tag per line).")
      self.sets[set_type] = DataSet(path, documents, tagged)
    return self.sets

  def _data_file(self, set_type):
    """The path of a set's file: --train_file and the like, else found in
    --data_dir.

    Raises:
      cli.UserError naming the flag the run's action needs.
    """
    if not self.data_dir:
      if not self.data_files.get(set_type):
        raise cli.UserError("%s needs %s (a CoNLL file)." % (
            task.ACTION_FLAGS[set_type], task.FILE_FLAGS[set_type]))
      return self.data_files[set_type]
    task.check_data_dir(self.data_dir,
                        "point it at the folder with the CoNLL-2003 files.")
    return conll.find_data_file(self.data_dir, set_type)

  def _labels(self):
    """The label list: the training file's types, else the one recorded in
    --output_dir or beside --init_checkpoint (run_info.json)."""
    if self.labels is None:
      sets = self._read_sets()
      if task.TRAIN in sets:
        self.labels = conll.label_list(
            conll.entity_types(sets[task.TRAIN].documents), self.tag_scheme)
      else:
        self.labels = self.recorded_labels()
    return self.labels

  def recorded_labels(self):
    """The labels of a trained NER run: --output_dir's run_info.json, else
    the one beside --init_checkpoint."""
    folders = [self.flags.output_dir]
    if self.flags.init_checkpoint:
      folders.append(os.path.dirname(self.flags.init_checkpoint))
    for folder in folders:
      record = run_info.read(folder) or {}
      if record.get("task") == TASK_NAME and record.get("labels"):
        return list(record["labels"])
    raise cli.UserError(
        "Cannot tell the model's labels: --output_dir=%s and the folder of "
        "--init_checkpoint hold no run_info.json of a NER run" %
        self.flags.output_dir,
        fix="Add --do_train, or point --output_dir (or --init_checkpoint) "
        "at a trained NER run.")

  def _windows(self, data_set, is_training):
    return file_windows(data_set.documents, self.labels, self.tokenizer,
                        self.flags.max_seq_length, self.doc_stride,
                        self.context, is_training)

  def _prepare_windows(self, data_set, items, file_name, is_training,
                       **order):
    """output_dir/file_name of the windows `items` of `data_set`, reused
    when its sidecar vouches for it (the same data file, vocabulary,
    casing, length, windows, labels and order)."""
    return self.prepare_features(
        file_name, [data_set.path], len(items),
        lambda path, fingerprint: write_windows(
            path, items, self.tokenizer, self.flags.max_seq_length,
            fingerprint),
        record_format=RECORD_FORMAT_VERSION, what="windows",
        window_stride=self.doc_stride, context=self.context,
        tag_scheme=self.tag_scheme, labels=list(self.labels),
        label_every_word=bool(is_training), **order)

  def _predict_set(self, estimator, data_set, name, batch_size,
                   checkpoint_path, for_evaluation=False):
    """Predicts one file with `checkpoint_path` and writes
    <name>_predictions.txt; with gold tags also <name>_conlleval.txt, and
    returns the Metrics (<name>_results.txt) or None. The file's windows
    are made once per run."""
    if name not in self._window_files:
      items = self._windows(data_set, is_training=False)
      self._window_files[name] = items, self._prepare_windows(
          data_set, items, name + ".tf_record", False)
    items, path = self._window_files[name]
    logging.info("***** Predicting %s: %d windows *****", data_set.path,
                 len(items))
    results = [result[TAG_IDS] for result in estimator.predict(
        input_fn_builder(path, self.flags.max_seq_length, is_training=False,
                         drop_remainder=False),
        checkpoint_path=checkpoint_path,
        num_batches=-(-len(items) // batch_size),
        for_evaluation=for_evaluation)]
    sentences = conll.sentences_of(data_set.documents)
    tags = predicted_tags(items, results, self.labels, sentences)
    self.write_output(name + "_predictions.txt",
                      conll.predictions_text(data_set.documents, tags))
    if not data_set.tagged:
      return None
    counts = conll.count([list(zip([w.tag for w in sentence], predicted))
                          for sentence, predicted in zip(sentences, tags)])
    values = conll.metrics(counts, prefix=name + "_")
    values.update(task.checkpoint_step(estimator, checkpoint_path))
    report = conll.report(counts)
    self.write_output(name + "_conlleval.txt", report)
    return task.Metrics(values, name + "_results.txt", summaries=name,
                        report="***** %s results (conlleval) *****\n%s" % (
                            name, report))
