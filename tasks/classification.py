# coding=utf-8
"""Sentence (pair) classification and regression: GLUE, XNLI and their kind.

The task of run_classifier.py. An example (tasks/glue.py) is one text or a
pair laid out as [CLS] a [SEP] (b [SEP]) (tasks/text_pair.py) and cut to
--max_seq_length; the head is a softmax classifier (or, for a regression
task such as STS-B, one linear output) on BERT's pooled [CLS] vector, with
Google's variable names `output_weights` and `output_bias`. Evaluation
reports accuracy and loss with the task's official GLUE metrics (F1,
Matthews correlation, Pearson and Spearman); prediction writes
test_results.tsv and the GLUE submission file.

--long_text=windows reads a first text longer than the sequence in
overlapping windows, --doc_stride tokens apart (tasks/windows.py), each
window an example of the text's label; evaluation and prediction combine a
text's windows: the mean of their log-probabilities, renormalized, or the
mean of their scores.
"""

import functools
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from checkpoints import problem_types
from checkpoints import run_info
import modeling
from runner import estimator as estimator_lib
from runner import feature_cache
from runner import serving_input
from runner import tfrecord_input
from runner import training_graph
from serving import text_inputs
from tasks import classifier_metrics
from tasks import glue
from tasks import labeled_files
from tasks import task
from tasks import text_pair
from tasks import windows
from userio import cli
from userio import progress
from userio import verbosity

# Bumped whenever the TFRecord layout written here changes, so feature files
# of an older layout are rebuilt instead of reused.
RECORD_FORMAT_VERSION = 1
# The smallest probability the windows' combination takes the log of.
_MIN_PROBABILITY = 1e-30

InputExample = glue.InputExample
PaddingInputExample = task.PaddingInputExample


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
  if isinstance(example, PaddingInputExample):
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


def combine_windows(outputs, counts, is_regression, multi_label=False):
  """Each example's output from its windows' (in order): the mean of the
  regression scores; with `multi_label`, each label's highest probability
  (a label an example has shows in one window of it at least); else the
  probabilities of the mean log-probabilities
  (tasks/windows.mean_log_probabilities)."""
  combined, start = [], 0
  for count in counts:
    part = np.asarray(outputs[start:start + count], np.float64)
    start += count
    if is_regression:
      combined.append(float(part.mean()))
    elif multi_label:
      combined.append(part.max(axis=0))
    else:
      # float32 probabilities: a floor keeps log() finite.
      combined.append(np.exp(windows.mean_log_probabilities(
          np.log(np.maximum(part, _MIN_PROBABILITY)))))
  return combined


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


def head_shapes(bert_config, num_labels):
  """(name, shape) of the variables the classifier adds to BERT (one
  output for regression)."""
  return (("output_weights", [num_labels, bert_config.hidden_size]),
          ("output_bias", [num_labels]))


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings, *,
                 gradient_checkpointing=False, compute_dtype=tf.float32,
                 skip_padding=False, multi_label=False, pos_weight=None):
  """A classifier (or regressor) head on BertModel's pooled [CLS] vector.

  With `skip_padding`, the encoder's feed-forward layers run on the
  non-padding tokens only (`modeling.BertModel`); the head reads the pooled
  vector alone, so the results are the same.

  Args:
    input_ids, input_mask, segment_ids: int32 Tensors [batch, seq_length].
    labels: int32 Tensor [batch] of class ids, or float32 [batch] scores
      when num_labels == 1 (regression), or with `multi_label` float32
      [batch, num_labels], 1 for each label an example has.
    num_labels: number of classes; 1 means regression.
    multi_label: one sigmoid per label instead of a softmax over them; the
      loss is the binary cross-entropy, averaged over labels and examples.
    pos_weight: with `multi_label`, a number (or one per label) that
      weighs the loss of a label's positive examples; None: 1.

  Returns:
    (loss, per_example_loss [batch], logits [batch, num_labels] float32,
     outputs): outputs are the probabilities [batch, num_labels] (each
     label's own with `multi_label`), or the predicted scores [batch] for
     regression.
  """
  model = modeling.BertModel(
      config=bert_config,
      is_training=is_training,
      input_ids=input_ids,
      input_mask=input_mask,
      token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings,
      gradient_checkpointing=gradient_checkpointing,
      compute_dtype=compute_dtype,
      skip_padding=skip_padding)

  # The head is tiny; float32 keeps its softmax and loss exact when the
  # encoder runs in half precision.
  output_layer = tf.cast(model.get_pooled_output(), tf.float32)
  hidden_size = output_layer.shape[-1]

  output_weights = tf.compat.v1.get_variable(
      "output_weights", [num_labels, hidden_size],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.compat.v1.get_variable(
      "output_bias", [num_labels], initializer=tf.compat.v1.zeros_initializer())

  with tf.compat.v1.variable_scope("loss"):
    if is_training:
      output_layer = modeling.dropout(output_layer, 0.1)
    logits = tf.matmul(output_layer, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    if multi_label:
      return _multi_label_loss(logits, labels, pos_weight)
    if num_labels == 1:
      predictions = tf.squeeze(logits, axis=-1)
      per_example_loss = tf.square(predictions - tf.cast(labels, tf.float32))
      return (tf.reduce_mean(per_example_loss), per_example_loss, logits,
              predictions)
    probabilities = tf.nn.softmax(logits, axis=-1)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    return (loss, per_example_loss, logits, probabilities)


def _multi_label_loss(logits, labels, pos_weight):
  """create_model's outputs for float32 `logits` and multi-hot `labels`
  [batch, labels]: the mean binary cross-entropy (as Hugging Face's
  BCEWithLogitsLoss, `pos_weight` included) and the sigmoids."""
  labels = tf.cast(labels, tf.float32)
  if pos_weight is None:
    per_label = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels,
                                                        logits=logits)
  else:
    per_label = tf.nn.weighted_cross_entropy_with_logits(
        labels=labels, logits=logits,
        pos_weight=tf.constant(pos_weight, tf.float32))
  per_example_loss = tf.reduce_mean(per_label, axis=-1)
  return (tf.reduce_mean(per_example_loss), per_example_loss, logits,
          tf.sigmoid(logits))


def classifier_head(features, mode, settings, *, num_labels, is_regression,
                    official_metrics, multi_label=False, pos_weight=None):
  """`create_model` on a batch of `file_based_input_fn_builder`'s features,
  as runner/training_graph.model_fn_builder calls a head: EVAL's metrics
  are accuracy and loss with `official_metrics` ("f1", "mcc"), for
  regression the mean squared error, Pearson and Spearman, for
  `multi_label` the loss alone (its metrics need every prediction:
  `multi_label_metrics`); PREDICT gives "probabilities" [batch,
  num_labels] or, for regression, "predictions" [batch]. A served
  multi-label request has no labels: they stand in as zeros."""
  label_ids = features.get("label_ids")
  if label_ids is None:
    label_ids = tf.zeros([tf.shape(features["input_ids"])[0], num_labels])
  (total_loss, per_example_loss, logits, outputs) = create_model(
      settings.bert_config, mode == estimator_lib.ModeKeys.TRAIN,
      features["input_ids"], features["input_mask"], features["segment_ids"],
      label_ids, 1 if is_regression else num_labels,
      multi_label=multi_label, pos_weight=pos_weight,
      **settings.encoder_options())
  if mode != estimator_lib.ModeKeys.EVAL:
    key = "predictions" if is_regression else "probabilities"
    return training_graph.ModelOutputs(total_loss, predictions={key: outputs})
  is_real_example = tf.cast(features["is_real_example"], tf.float32)
  if multi_label:
    metric_ops = {"eval_loss": tf.compat.v1.metrics.mean(
        per_example_loss, weights=is_real_example)}
  elif is_regression:
    metric_ops = classifier_metrics.regression_metric_ops(
        label_ids, outputs, per_example_loss, is_real_example)
  else:
    metric_ops = classifier_metrics.classification_metric_ops(
        label_ids, tf.argmax(logits, axis=-1, output_type=tf.int32),
        per_example_loss, is_real_example, official_metrics)
  return training_graph.ModelOutputs(total_loss, eval_metric_ops=metric_ops)


def serving_input_receiver_fn_builder(seq_length, is_regression=False,
                                      multi_label=False, text_signature=None):
  """The serving input of an exported classifier (runner/serving_input.py).

  A request feeds int32 "input_ids", "input_mask" and "segment_ids" of shape
  [batch, seq_length], as `convert_single_example` makes them; with a
  `text_signature` (`text_signature_of`), the "text" signature takes the
  texts instead.
  """
  stand_ins = {"is_real_example": tf.int32}
  if not multi_label:  # classifier_head makes a multi-label model's own.
    stand_ins["label_ids"] = tf.float32 if is_regression else tf.int32
  return serving_input.receiver_fn_builder(seq_length, stand_ins,
                                           text_signature=text_signature)


def text_signature_of(tokenizer_fn, seq_length, text_pairs, labels,
                      problem_type, threshold=0.5, *, long_text=windows.TRUNCATE,
                      doc_stride=None):
  """A classifier's signature from raw text (runner/serving_input.py).

  Inputs: "text_a" (and, for a pair task, "text_b"), tf.string [batch];
  they become the model's inputs in the graph as `convert_single_example`
  makes them, padded to the batch's longest (serving/text_inputs.py), or
  with long_text=windows in `example_windows`' windows, combined per
  example as `combine_windows` combines them.
  Outputs, as `answer` gives them: "score" [batch] (regression), else
  "probabilities" [batch, labels] and "label_names" [batch, labels] (the
  label of each column), with "label" [batch] (the likeliest) or, for
  multi-label, "predicted" [batch, labels] (bool: above `threshold`).

  Args:
    tokenizer_fn: callable () -> a serving.graph_tokenizer tokenizer,
      called in the export graph.
  """
  example_of_window = []

  def inputs_fn():
    names = ["text_a", "text_b"] if text_pairs else ["text_a"]
    texts = {name: tf.compat.v1.placeholder(tf.string, [None], name=name)
             for name in names}
    if long_text != windows.WINDOWS:
      return texts, text_inputs.model_inputs(
          tokenizer_fn(), seq_length, texts["text_a"], texts.get("text_b"))
    inputs, example = text_inputs.window_inputs(
        tokenizer_fn(), seq_length, texts["text_a"], texts.get("text_b"),
        doc_stride)
    example_of_window.append(example)
    return texts, inputs

  def combined(values, texts):
    """The examples' outputs from their windows' (combine_windows)."""
    if not example_of_window:
      return values
    example = example_of_window[0]
    count = tf.shape(texts["text_a"], out_type=tf.int64)[0]
    if problem_type == problem_types.REGRESSION:
      return tf.math.unsorted_segment_mean(values, example, count)
    if problem_type == problem_types.MULTI_LABEL:
      return tf.math.unsorted_segment_max(values, example, count)
    log_probabilities = tf.math.log(tf.maximum(
        tf.cast(values, tf.float64), _MIN_PROBABILITY))
    mean = tf.math.unsorted_segment_mean(log_probabilities, example, count)
    return tf.cast(tf.nn.softmax(mean, axis=-1), values.dtype)

  def outputs_fn(predictions, texts):
    if problem_type == problem_types.REGRESSION:
      return {"score": combined(predictions["predictions"], texts)}
    probabilities = combined(predictions["probabilities"], texts)
    names = tf.constant([str(label) for label in labels])
    outputs = {"probabilities": probabilities,
               "label_names": tf.tile(names[None, :],
                                      [tf.shape(probabilities)[0], 1])}
    if problem_type == problem_types.MULTI_LABEL:
      outputs["predicted"] = probabilities > threshold
    else:
      outputs["label"] = tf.gather(names, tf.argmax(probabilities, axis=-1))
    return outputs

  return serving_input.TextSignature(inputs_fn, outputs_fn)


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     is_regression=False, official_metrics=(),
                     gradient_checkpointing=False,
                     compute_dtype=tf.float32, skip_padding=False):
  """Builds the model_fn(features, labels, mode, params) the runner calls:
  `classifier_head` in runner/training_graph.py's model_fn. float16
  activations train with dynamic loss scaling."""
  return training_graph.model_fn_builder(
      functools.partial(classifier_head, num_labels=num_labels,
                        is_regression=is_regression,
                        official_metrics=official_metrics),
      training_graph.ModelSettings(
          bert_config, init_checkpoint, learning_rate, num_train_steps,
          num_warmup_steps, use_tpu, use_one_hot_embeddings, optimizer,
          gradient_checkpointing, compute_dtype, skip_padding))


def prediction_lines(outputs, label_list, is_regression):
  """(test_results.tsv lines, GLUE submission lines) of the examples'
  `outputs` in order: probability vectors (softmax, or a multi-label
  model's sigmoids), or a regression's scores."""
  result_lines = []
  submission_lines = ["index\tprediction\n"]
  for (i, output) in enumerate(outputs):
    if is_regression:
      score = float(output)
      result_lines.append("%s\n" % score)
      submission_lines.append("%d\t%.3f\n" % (i, score))
    else:
      probabilities = [float(p) for p in output]
      result_lines.append("\t".join(str(p) for p in probabilities) + "\n")
      best = max(range(len(probabilities)), key=probabilities.__getitem__)
      submission_lines.append("%d\t%s\n" % (i, label_list[best]))
  return result_lines, submission_lines


class ClassificationTask(task.Task):
  """A GLUE-style task of run_classifier.py: the data files a
  glue.DataProcessor reads from `data_dir`, the classifier head, GLUE's
  metrics and prediction files."""

  # A multi-label model predicts the labels whose probability is above it.
  threshold = 0.5
  serves_text = True

  def __init__(self, processor, data_dir, task_name, *,
               long_text=windows.TRUNCATE, doc_stride=None,
               train_example_order=feature_cache.SHUFFLED, pos_weight=None):
    """Args:
      processor: the glue.DataProcessor of the task's files.
      data_dir: the folder of its files (--data_dir).
      task_name: --task_name, recorded (lower case) in run_info.json.
      long_text: one of windows.LONG_TEXT_MODES (--long_text).
      doc_stride: with windows, tokens between window starts (None: half
        a window's room).
      train_example_order: "shuffled" (the training set permuted with
        --seed before its features are written) or "file" (Google's).
      pos_weight: a multi-label task's weight of positive labels in the
        loss (create_model), or None.
    """
    super().__init__()
    self.name = task_name.lower()
    self.processor = processor
    self.data_dir = data_dir
    self.long_text = long_text
    self.doc_stride = doc_stride
    self.train_example_order = train_example_order
    self.pos_weight = pos_weight
    self.labels = None
    self.min_seq_length = (text_pair.MIN_SEQ_LENGTH_PAIR
                           if processor.text_pairs else
                           text_pair.MIN_SEQ_LENGTH_ONE_TEXT)
    self.examples = {}
    self.window_counts = {}
    # Per set: (padded examples, feature file) once evaluation made them.
    self._eval_features = {}

  @property
  def multi_label(self):
    return self.processor.multi_label

  def start(self, flags, bert_config, tokenizer):
    super().start(flags, bert_config, tokenizer)
    self.labels = self.processor.get_labels()

  def read_data(self):
    self._check_sources()
    readers = {task.TRAIN: self.processor.get_train_examples,
               task.DEV: self.processor.get_dev_examples,
               task.TEST: self.processor.get_test_examples}
    for set_type in self.sets_to_read():
      examples = readers[set_type](self.data_dir)
      if not examples:
        raise task.no_examples_error(self._data_file(set_type), set_type,
                                     self._no_examples_fix)
      if self.long_text == windows.WINDOWS:
        examples, self.window_counts[set_type] = expand_windows(
            examples, self.flags.max_seq_length, self.tokenizer,
            self.doc_stride)
      self.examples[set_type] = examples

  def record(self):
    """A run with --long_text=windows records it and its --doc_stride, so
    that predictor.py reads long texts in the same windows."""
    if self.long_text != windows.WINDOWS:
      return self.make_record(self.labels)
    return self.make_record(self.labels, long_text=self.long_text,
                            doc_stride=self.doc_stride)

  def num_train_examples(self):
    return len(self.examples[task.TRAIN]), self._data_file(task.TRAIN)

  def head_shapes(self):
    return head_shapes(self.bert_config, len(self.labels))

  def head(self, features, mode, settings):
    return classifier_head(
        features, mode, settings, num_labels=len(self.labels),
        is_regression=self.processor.is_regression,
        official_metrics=self.processor.official_metrics,
        multi_label=self.multi_label, pos_weight=self.pos_weight)

  def train_input_fn(self):
    examples, order = self.training_order(self.examples[task.TRAIN],
                                          self.train_example_order)
    path = self._prepare_features(task.TRAIN, examples, "train.tf_record",
                                  **order)
    return (self._input_fn(path, is_training=True, drop_remainder=True),
            ["Num examples = %d" % len(examples)])

  def evaluate(self, estimator, checkpoint_path=None):
    """Accuracy, loss and the official metrics on the dev set (a
    multi-label task's: `multi_label_metrics`). With windows, the metrics
    of the examples' combined outputs (eval_loss is then their mean
    cross-entropy, or squared error)."""
    counts = self.window_counts.get(task.DEV)
    if task.DEV not in self._eval_features:
      self._eval_features[task.DEV] = self._padded_features(
          task.DEV, "eval.tf_record", self.flags.eval_batch_size,
          "Running evaluation")
    examples, path = self._eval_features[task.DEV]
    input_fn = self._input_fn(path, is_training=False,
                              drop_remainder=not self._scored_here)
    if not self._scored_here:
      return task.Metrics(estimator.evaluate(
          input_fn=input_fn, steps=None, checkpoint_path=checkpoint_path,
          num_batches=len(examples) // self.flags.eval_batch_size),
                          task.EVAL_RESULTS_FILE, summaries=None)
    outputs = self._outputs(estimator.predict(
        input_fn, checkpoint_path=checkpoint_path, for_evaluation=True),
                            task.DEV)
    values = self.outputs_metrics(self._gold_labels(examples, counts),
                                  outputs)
    values.update(task.checkpoint_step(estimator, checkpoint_path))
    return task.Metrics(values, task.EVAL_RESULTS_FILE, summaries="eval")

  @property
  def _scored_here(self):
    """Whether evaluation scores the model's outputs in NumPy (windows
    combined, multi-label) rather than with the graph's streaming
    metrics."""
    return self.long_text == windows.WINDOWS or self.multi_label

  def eval_metric_names(self):
    """The headline first: micro-averaged F1 (multi-label), Pearson's r
    (regression), the task's official GLUE metric, else accuracy."""
    if self.multi_label:
      kinds = ("precision", "recall", "f1")
      names = (["micro_f1", "macro_f1", "exact_match", "loss", "lrap"] +
               ["micro_" + k for k in kinds[:2]] +
               ["macro_" + k for k in kinds[:2]] +
               ["%s_%s" % (k, label) for label in self.labels
                for k in kinds])
      return ["eval_" + name for name in names]
    if self.processor.is_regression:
      names = ["eval_pearson", "eval_spearman", "eval_loss"]
    else:
      names = (["eval_" + m for m in self.processor.official_metrics] +
               ["eval_accuracy", "eval_loss"])
    return names if self._scored_here else names + ["loss"]

  def outputs_metrics(self, labels, outputs):
    """eval_results.txt's metrics of the examples' gold `labels` (label
    strings, scores' texts, or tuples of labels) and their `outputs`:
    probabilities, or the scores of a regression."""
    if self.multi_label:
      truth = [[label in names for label in self.labels] for names in labels]
      return classifier_metrics.multi_label_metrics(
          truth, outputs, self.threshold, self.labels)
    if self.processor.is_regression:
      scores = np.array(labels, np.float64)
      predictions = np.array(outputs)
      return {"eval_loss": float(np.mean((predictions - scores) ** 2)),
              "eval_pearson": classifier_metrics.pearson(predictions,
                                                         scores),
              "eval_spearman": classifier_metrics.spearman(predictions,
                                                           scores)}
    label_ids = np.array([self.labels.index(label) for label in labels])
    probabilities = np.array(outputs)
    predictions = probabilities.argmax(axis=1)
    values = {"eval_accuracy": classifier_metrics.accuracy(label_ids,
                                                           predictions),
              "eval_loss": float(-np.mean(np.log(probabilities[
                  np.arange(len(label_ids)), label_ids])))}
    numpy_metrics = {"f1": classifier_metrics.f1_score,
                     "mcc": classifier_metrics.matthews_corrcoef}
    for metric in self.processor.official_metrics:
      values["eval_" + metric] = numpy_metrics[metric](label_ids, predictions)
    return values

  def predict(self, estimator, checkpoint_path=None):
    """test_results.tsv (each example's probabilities, or score) and the
    GLUE submission file of the test set."""
    examples, path = self._padded_features(
        task.TEST, "predict.tf_record", self.flags.predict_batch_size,
        "Running prediction")
    outputs = self._outputs(estimator.predict(
        self._input_fn(path, is_training=False, drop_remainder=True),
        checkpoint_path=checkpoint_path,
        num_batches=len(examples) // self.flags.predict_batch_size),
                            task.TEST)
    result_lines, submission_lines = prediction_lines(
        outputs, self.labels, self.processor.is_regression)
    self.write_output("test_results.tsv", "".join(result_lines))
    self.write_predictions(outputs, submission_lines)
    return None

  def write_predictions(self, outputs, submission_lines):
    """Writes the test set's predictions beside test_results.tsv: GLUE's
    submission file (`submission_lines`), for a task that has one.

    Args:
      outputs: per example, its probabilities [labels] or score.
      submission_lines: the lines of `prediction_lines`' submission file.
    """
    del outputs  # GLUE's submission holds the labels alone.
    if self.processor.submission_name:
      self.write_output(self.processor.submission_name + ".tsv",
                        "".join(submission_lines))

  def serving_input_receiver_fn(self):
    text_signature = None
    if self.exports_text():
      problem_type = (
          problem_types.REGRESSION if self.processor.is_regression else
          problem_types.MULTI_LABEL if self.multi_label else
          problem_types.SINGLE_LABEL)
      text_signature = text_signature_of(
          self.graph_tokenizer_fn(), self.flags.max_seq_length,
          self.processor.text_pairs, self.labels, problem_type,
          self.threshold, long_text=self.long_text,
          doc_stride=self.doc_stride)
    return serving_input_receiver_fn_builder(
        self.flags.max_seq_length, self.processor.is_regression,
        self.multi_label, text_signature)

  # What to do when a data file holds no examples.
  _no_examples_fix = ("Download the task's files again, or point --data_dir "
                      "at the folder that holds them.")

  def _check_sources(self):
    task.check_data_dir(self.data_dir, "point it at the task's data folder.")

  @property
  def _output_name(self):
    return "predictions" if self.processor.is_regression else "probabilities"

  def _data_file(self, set_type):
    return self.processor.get_data_files(self.data_dir, set_type)[0]

  def _prepare_features(self, set_type, examples, file_name, **order):
    """output_dir/file_name of `examples`, written or reused
    (Task.prepare_features); `order`: how the training set is ordered."""
    if self.long_text == windows.WINDOWS:
      order["window_stride"] = self.doc_stride or 0
    return self.prepare_features(
        file_name, self.processor.get_data_files(self.data_dir, set_type),
        len(examples),
        lambda path, fingerprint: file_based_convert_examples_to_features(
            examples, self.labels, self.flags.max_seq_length,
            self.tokenizer, path, fingerprint=fingerprint,
            multi_label=self.multi_label),
        record_format=RECORD_FORMAT_VERSION, **order)

  def _padded_features(self, set_type, file_name, batch_size, title):
    return self.padded_features(
        self.examples[set_type], batch_size,
        lambda padded: self._prepare_features(set_type, padded, file_name),
        title)

  def _input_fn(self, path, *, is_training, drop_remainder):
    return file_based_input_fn_builder(
        path, self.flags.max_seq_length, is_training=is_training,
        drop_remainder=drop_remainder,
        seed=self.flags.seed if is_training else None,
        is_regression=self.processor.is_regression,
        num_multi_labels=len(self.labels) if self.multi_label else None)

  def _outputs(self, results, set_type):
    """Each example's output of the set's prediction `results` (one per
    padded example, or window): its own, or its windows' combined."""
    outputs = [result[self._output_name] for result in results]
    counts = self.window_counts.get(set_type)
    wanted = len(self.examples[set_type]) if counts is None else sum(counts)
    if len(outputs) < wanted:
      raise RuntimeError("Got %d predictions for %d rows of the %s set."
                         % (len(outputs), wanted, set_type))
    if counts is None:
      return outputs[:wanted]
    return combine_windows(outputs[:wanted], counts,
                           self.processor.is_regression, self.multi_label)

  def _gold_labels(self, examples, counts):
    """The labels of the examples (padded, or their windows)."""
    if counts is None:
      return [example.label for example in examples
              if not isinstance(example, PaddingInputExample)]
    return [examples[i].label for i in np.cumsum([0] + list(counts[:-1]))]


# ------------------------------------------------------- the user's files


class FileProcessor(glue.DataProcessor):
  """A user's CSV, TSV or JSON Lines files (tasks/labeled_files.py) as a
  DataProcessor: their rows are the examples, and the training file tells
  the problem's type and labels unless they are given (`settle`)."""

  def __init__(self, files, columns, *, input_format=labeled_files.AUTO,
               problem_type=None, labels=None, label_separator=","):
    """Args:
      files: {set type ("train", "dev", "test"): path or None}.
      columns: labeled_files.Columns.
      input_format: one of labeled_files.FORMATS, or AUTO.
      problem_type: one of problem_types.PROBLEM_TYPES, or None (settled
        from the training file or a trained run).
      labels: the label list, or None (likewise).
      label_separator: what cuts a multi-label cell into its labels.
    """
    self.files = dict(files)
    self.columns = columns
    self.input_format = input_format
    self.problem_type = problem_type
    self.labels = tuple(labels) if labels else None
    self.label_separator = label_separator
    self.text_pairs = columns.text_b is not None
    # How the problem type and the labels were settled, for the log.
    self.source = "given"
    self._read = {}

  @property
  def is_regression(self):
    return self.problem_type == problem_types.REGRESSION

  @property
  def multi_label(self):
    return self.problem_type == problem_types.MULTI_LABEL

  def settle(self, train, recorded):
    """Fixes the problem type and the labels not given: from the training
    file when the run trains (`train`), else from `recorded`, the
    run_info.json of the trained run (None: none found).

    Raises:
      cli.UserError when nothing tells them, or the training file gives a
      classifier fewer than two labels.
    """
    if train:
      cells = [row.label for row in self._rows(task.TRAIN)]
      if self.problem_type is None:
        self.problem_type = labeled_files.problem_type_of(
            cells, self.label_separator)
        self.source = "inferred from %s" % self.files[task.TRAIN]
      if self.labels is None and not self.is_regression:
        self.labels = tuple(labeled_files.label_list(
            cells, self.problem_type, self.label_separator))
      self._check_labels()
    elif self.problem_type is None or self.labels is None:
      if not recorded or "problem_type" not in recorded:
        raise cli.UserError(
            "Cannot tell the model's labels: no --train_file, and no "
            "run_info.json of a run_classifier.py run on files in "
            "--output_dir or beside --init_checkpoint",
            fix="Add --do_train with --train_file, or point --output_dir "
            "(or --init_checkpoint) at the trained run.")
      self.problem_type = self.problem_type or recorded["problem_type"]
      self.labels = self.labels or tuple(recorded["labels"])
      self.source = "the trained run's"
    if self.is_regression:
      self.labels = (None,)

  def _check_labels(self):
    if self.is_regression or len(self.labels) >= 2 or self.multi_label:
      return
    raise cli.UserError(
        "%s has one label, %r; a classifier needs two or more" % (
            self.files[task.TRAIN], self.labels[0] if self.labels else ""),
        fix="Check --label_column, or pass --problem_type=regression for "
        "scores.")

  def get_labels(self):
    return list(self.labels)

  def get_data_files(self, data_dir, set_type):
    del data_dir  # The files are named one by one.
    return [self.files[set_type]]

  def get_train_examples(self, data_dir):
    return self._examples(task.TRAIN)

  def get_dev_examples(self, data_dir):
    return self._examples(task.DEV)

  def get_test_examples(self, data_dir):
    return self._examples(task.TEST)

  def example_ids(self, set_type):
    """The id of each example of a set (the id column's, else its line)."""
    return [row.example_id for row in self._rows(set_type)]

  def _rows(self, set_type):
    """The rows of a set's file, read once."""
    if set_type not in self._read:
      self._read[set_type] = labeled_files.read_rows(
          self.files[set_type], self.columns, self.input_format,
          needs_label=set_type != task.TEST)
    return self._read[set_type]

  def _examples(self, set_type):
    path = self.files[set_type]
    examples = []
    for row in self._rows(set_type):
      label = None
      if set_type != task.TEST:
        label = labeled_files.example_label(path, row, self.problem_type,
                                            self.labels, self.label_separator)
      elif not self.is_regression:
        # A test row's label stands in only for the features' uniform shape.
        label = () if self.multi_label else self.labels[0]
      else:
        label = "0"
      examples.append(glue.InputExample(
          guid="%s-%d" % (set_type, row.line), text_a=row.text_a,
          text_b=row.text_b, label=label))
    return examples


def answer(output, labels, problem_type, threshold=0.5):
  """One example's prediction, from a classifier's model output.

  Args:
    output: its probabilities [labels] (softmax, or sigmoids for
      multi-label), or its score (regression).
    labels: the label list ([None] for regression).
    problem_type: one of problem_types.PROBLEM_TYPES.
    threshold: multi-label: a label is predicted above it.

  Returns:
    {"score"} (regression), {"label", "probabilities"} or, multi-label,
    {"labels" (those above the threshold, in label order),
    "probabilities"}; "probabilities" is a dict by label.
  """
  if problem_type == problem_types.REGRESSION:
    return {"score": float(output)}
  probabilities = dict(zip(labels, (float(p) for p in output)))
  if problem_type == problem_types.MULTI_LABEL:
    return {"labels": [label for label in labels
                       if probabilities[label] > threshold],
            "probabilities": probabilities}
  return {"label": max(labels, key=probabilities.get),
          "probabilities": probabilities}


# The task name of run_classifier.py on a user's files.
FILE_TASK = "file"
# Where the predictions of a user's files go, one JSON object per example.
PREDICTIONS_FILE = "predictions.jsonl"


class FileClassificationTask(ClassificationTask):
  """Classification, multi-label classification or regression on a user's
  own files (FileProcessor): the problem type and the labels are recorded
  in run_info.json, so that evaluation, prediction, the export and the
  predictor need nothing else; predictions.jsonl gives each example's id
  and prediction."""

  def __init__(self, processor, *, threshold=None, tune_threshold=False,
               **options):
    """Args:
      processor: the FileProcessor of the files.
      threshold: a multi-label prediction's threshold; None: the one the
        trained run recorded (tuned), else 0.5.
      tune_threshold: evaluation picks the threshold with the best
        micro-averaged F1 on the dev set, records and uses it.
      **options: ClassificationTask's.
    """
    super().__init__(processor, None, FILE_TASK, **options)
    self.threshold_given = threshold
    self.tune_threshold = tune_threshold

  def start(self, flags, bert_config, tokenizer):
    """Every file the actions need is given; the problem type, the labels
    and the threshold are settled."""
    for set_type in self._needed_sets(flags):
      if not self.processor.files.get(set_type):
        raise cli.UserError("%s needs %s (a CSV, TSV or JSON Lines file)." % (
            task.ACTION_FLAGS[set_type], task.FILE_FLAGS[set_type]))
    if self.tune_threshold and not flags.do_eval:
      raise cli.UserError("--tune_threshold picks the threshold on the dev "
                          "set: add --do_eval and --dev_file.")
    recorded = None if flags.do_train else self._recorded(flags)
    self.processor.settle(bool(flags.do_train), recorded)
    weights = self.pos_weight
    if isinstance(weights, list) and len(weights) != len(
        self.processor.labels or ()):
      raise cli.UserError("--pos_weight gives %d weights for %d labels; give "
                          "one for all, or one per label." % (
                              len(weights), len(self.processor.labels or ())))
    if self.tune_threshold and not self.multi_label:
      raise cli.UserError("--tune_threshold applies to a multi-label "
                          "problem; this one is %s." %
                          self.processor.problem_type)
    super().start(flags, bert_config, tokenizer)
    if self.threshold_given is not None:
      self.threshold = self.threshold_given
    elif recorded and recorded.get("threshold") is not None:
      self.threshold = recorded["threshold"]

  def settings_lines(self):
    return ["Task: %s." % self.description()]

  def description(self):
    """The problem type, where it came from, and the labels."""
    problem = self.processor.problem_type
    if self.processor.is_regression:
      return "regression (%s)" % self.processor.source
    text = "%s (%s), %d labels: %s" % (problem, self.processor.source,
                                       len(self.labels),
                                       ", ".join(self.labels))
    if self.multi_label:
      text += "; threshold %s" % ("tuned on the dev set" if
                                  self.tune_threshold else self.threshold)
    return text

  def record(self):
    """The problem type, whether examples are pairs and the text columns'
    names, besides the labels, for the predictor and a run that does not
    train."""
    record = super().record()
    columns = self.processor.columns
    record.update(problem_type=self.processor.problem_type,
                  text_pairs=self.processor.text_pairs,
                  text_columns=[columns.text_a, columns.text_b])
    return record

  def outputs_metrics(self, labels, outputs):
    """ClassificationTask's; with --tune_threshold the dev set's outputs
    first pick the multi-label threshold (classifier_metrics.
    best_threshold), which run_info.json records and prediction uses."""
    if self.multi_label and self.tune_threshold:
      truth = [[label in names for label in self.labels] for names in labels]
      self.threshold = classifier_metrics.best_threshold(truth, outputs)
      run_info.add_fields(self.flags.output_dir, threshold=self.threshold)
      logging.info("Threshold %s: the best micro-averaged F1 on %s; "
                   "recorded in run_info.json.", self.threshold,
                   self.processor.files[task.DEV])
    return super().outputs_metrics(labels, outputs)

  def on_best_checkpoint(self, metrics):
    """With --tune_threshold, the best checkpoint's tuned threshold is the
    one run_info.json records and prediction uses."""
    if self.multi_label and self.tune_threshold:
      self.threshold = metrics["eval_threshold"]
      run_info.add_fields(self.flags.output_dir, threshold=self.threshold)

  def write_predictions(self, outputs, submission_lines):
    """predictions.jsonl: per example {"id", and "label" with
    "probabilities" (a dict by label), or "labels" (those above the
    threshold) with "probabilities", or "score"}."""
    del submission_lines  # Your own files have no GLUE submission.
    ids = self.processor.example_ids(task.TEST)
    self.write_output(PREDICTIONS_FILE, "".join(
        json.dumps(dict(id=example_id, **self.answer(output)),
                   ensure_ascii=False) + "\n"
        for example_id, output in zip(ids, outputs)))

  def answer(self, output):
    """One example's prediction from its model output (`answer`)."""
    return answer(output, self.labels, self.processor.problem_type,
                  self.threshold)

  _no_examples_fix = "Pass a file with examples."

  def _check_sources(self):
    """The files exist (labeled_files reads them)."""

  def _needed_sets(self, flags):
    return [set_type for set_type, action in (
        (task.TRAIN, flags.do_train), (task.DEV, flags.do_eval),
        (task.TEST, flags.do_predict)) if action]

  def _recorded(self, flags):
    """The run_info.json of the trained run: --output_dir's, else the one
    beside --init_checkpoint (None: neither has one)."""
    folders = [flags.output_dir]
    if flags.init_checkpoint:
      folders.append(os.path.dirname(flags.init_checkpoint))
    for folder in folders:
      record = run_info.read(folder)
      if record and record.get("task") == FILE_TASK:
        return record
    return None

