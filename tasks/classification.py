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

from absl import logging
import numpy as np
import tensorflow as tf

import modeling
from runner import estimator as estimator_lib
from runner import feature_cache
from runner import serving_input
from runner import tfrecord_input
from runner import training_graph
from tasks import classifier_metrics
from tasks import glue
from tasks import task
from tasks import text_pair
from tasks import windows
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
                           tokenizer):
  """Tokenizes one example into fixed-length model inputs.

  Returns:
    InputFeatures with int lists of length max_seq_length; label_id is the
    label's index in `label_list`, or the float score for regression.
  """
  if isinstance(example, PaddingInputExample):
    return InputFeatures(
        input_ids=[0] * max_seq_length,
        input_mask=[0] * max_seq_length,
        segment_ids=[0] * max_seq_length,
        label_id=0.0 if _is_regression(label_list) else 0,
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


def combine_windows(outputs, counts, is_regression):
  """Each example's output from its windows' (in order): the mean of the
  regression scores, or the probabilities of the mean log-probabilities
  (tasks/windows.mean_log_probabilities)."""
  combined, start = [], 0
  for count in counts:
    part = np.asarray(outputs[start:start + count], np.float64)
    start += count
    if is_regression:
      combined.append(float(part.mean()))
    else:
      # float32 probabilities: a floor keeps log() finite.
      combined.append(np.exp(windows.mean_log_probabilities(
          np.log(np.maximum(part, _MIN_PROBABILITY)))))
  return combined


def _label_id(example, label_list):
  """The class index of `example.label`, or its float value (regression)."""
  if _is_regression(label_list):
    return float(example.label)
  if example.label not in label_list:
    raise ValueError("Example %s has label %r, which is not in the task's "
                     "labels %s." % (example.guid, example.label, label_list))
  return label_list.index(example.label)


def file_based_convert_examples_to_features(examples, label_list,
                                            max_seq_length, tokenizer,
                                            output_file, *, fingerprint=None):
  """Writes the features of `examples` to a TFRecord file.

  Features: input_ids, input_mask, segment_ids (int64 [max_seq_length]),
  label_ids (int64 [1], float [1] for regression), is_real_example (int64
  [1]). The file is written whole or not at all, and `fingerprint` (what
  the records are made from) goes to its sidecar, which vouches for the
  file to a later run (runner/feature_cache.py). Progress is logged every
  10 seconds.
  """
  meter = progress.Progress("Writing features to %s" % output_file,
                            len(examples))
  label_feature = (feature_cache.float_feature if _is_regression(label_list)
                   else feature_cache.int64_feature)
  with feature_cache.FeatureFile(output_file, len(examples),
                                 depends_on=fingerprint) as writer:
    for (ex_index, example) in enumerate(examples):
      feature = convert_single_example(ex_index, example, label_list,
                                       max_seq_length, tokenizer)
      writer.write(feature_cache.serialized_example({
          "input_ids": feature_cache.int64_feature(feature.input_ids),
          "input_mask": feature_cache.int64_feature(feature.input_mask),
          "segment_ids": feature_cache.int64_feature(feature.segment_ids),
          "label_ids": label_feature([feature.label_id]),
          "is_real_example": feature_cache.int64_feature(
              [int(feature.is_real_example)])}))
      meter.advance()
  meter.finish()


def file_based_input_fn_builder(input_file, seq_length, is_training,
                                drop_remainder, *, seed=None,
                                is_regression=False):
  """Returns input_fn(params): the records of `input_file` in batches.

  Training repeats the file forever and shuffles it with `seed`.
  """
  name_to_features = {
      "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
      "label_ids": tf.io.FixedLenFeature(
          [], tf.float32 if is_regression else tf.int64),
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
                 skip_padding=False):
  """A classifier (or regressor) head on BertModel's pooled [CLS] vector.

  With `skip_padding`, the encoder's feed-forward layers run on the
  non-padding tokens only (`modeling.BertModel`); the head reads the pooled
  vector alone, so the results are the same.

  Args:
    input_ids, input_mask, segment_ids: int32 Tensors [batch, seq_length].
    labels: int32 Tensor [batch] of class ids, or float32 [batch] scores
      when num_labels == 1 (regression).
    num_labels: number of classes; 1 means regression.

  Returns:
    (loss, per_example_loss [batch], logits [batch, num_labels] float32,
     outputs): outputs are the probabilities [batch, num_labels], or the
     predicted scores [batch] for regression.
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


def classifier_head(features, mode, settings, *, num_labels, is_regression,
                    official_metrics):
  """`create_model` on a batch of `file_based_input_fn_builder`'s features,
  as runner/training_graph.model_fn_builder calls a head: EVAL's metrics
  are accuracy and loss with `official_metrics` ("f1", "mcc"), or for
  regression the mean squared error, Pearson and Spearman; PREDICT gives
  "probabilities" [batch, num_labels] or, for regression, "predictions"
  [batch]."""
  label_ids = features["label_ids"]
  (total_loss, per_example_loss, logits, outputs) = create_model(
      settings.bert_config, mode == estimator_lib.ModeKeys.TRAIN,
      features["input_ids"], features["input_mask"], features["segment_ids"],
      label_ids, 1 if is_regression else num_labels,
      **settings.encoder_options())
  if mode != estimator_lib.ModeKeys.EVAL:
    key = "predictions" if is_regression else "probabilities"
    return training_graph.ModelOutputs(total_loss, predictions={key: outputs})
  is_real_example = tf.cast(features["is_real_example"], tf.float32)
  if is_regression:
    metric_ops = classifier_metrics.regression_metric_ops(
        label_ids, outputs, per_example_loss, is_real_example)
  else:
    metric_ops = classifier_metrics.classification_metric_ops(
        label_ids, tf.argmax(logits, axis=-1, output_type=tf.int32),
        per_example_loss, is_real_example, official_metrics)
  return training_graph.ModelOutputs(total_loss, eval_metric_ops=metric_ops)


def serving_input_receiver_fn_builder(seq_length, is_regression=False):
  """The serving input of an exported classifier (runner/serving_input.py).

  A request feeds int32 "input_ids", "input_mask" and "segment_ids" of shape
  [batch, seq_length], as `convert_single_example` makes them.
  """
  return serving_input.receiver_fn_builder(seq_length, {
      "label_ids": tf.float32 if is_regression else tf.int32,
      "is_real_example": tf.int32})


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


def prediction_lines(results, label_list, is_regression):
  """(test_results.tsv lines, GLUE submission lines) of the predictions
  `results` (dicts of "probabilities" or, for regression, "predictions"),
  one per real example in order."""
  result_lines = []
  submission_lines = ["index\tprediction\n"]
  for (i, prediction) in enumerate(results):
    if is_regression:
      score = float(prediction["predictions"])
      result_lines.append("%s\n" % score)
      submission_lines.append("%d\t%.3f\n" % (i, score))
    else:
      probabilities = [float(p) for p in prediction["probabilities"]]
      result_lines.append("\t".join(str(p) for p in probabilities) + "\n")
      best = max(range(len(probabilities)), key=probabilities.__getitem__)
      submission_lines.append("%d\t%s\n" % (i, label_list[best]))
  return result_lines, submission_lines


class ClassificationTask(task.Task):
  """A GLUE-style task of run_classifier.py: the data files a
  glue.DataProcessor reads from `data_dir`, the classifier head, GLUE's
  metrics and prediction files."""

  def __init__(self, processor, data_dir, task_name, *,
               long_text=windows.TRUNCATE, doc_stride=None,
               train_example_order=feature_cache.SHUFFLED):
    """Args:
      processor: the glue.DataProcessor of the task's files.
      data_dir: the folder of its files (--data_dir).
      task_name: --task_name, recorded (lower case) in run_info.json.
      long_text: one of windows.LONG_TEXT_MODES (--long_text).
      doc_stride: with windows, tokens between window starts (None: half
        a window's room).
      train_example_order: "shuffled" (the training set permuted with
        --seed before its features are written) or "file" (Google's).
    """
    super().__init__()
    self.name = task_name.lower()
    self.processor = processor
    self.data_dir = data_dir
    self.long_text = long_text
    self.doc_stride = doc_stride
    self.train_example_order = train_example_order
    self.labels = processor.get_labels()
    self.min_seq_length = (text_pair.MIN_SEQ_LENGTH_PAIR
                           if processor.text_pairs else
                           text_pair.MIN_SEQ_LENGTH_ONE_TEXT)
    self.examples = {}
    self.window_counts = {}

  def read_data(self):
    task.check_data_dir(self.data_dir, "point it at the task's data folder.")
    readers = {task.TRAIN: self.processor.get_train_examples,
               task.DEV: self.processor.get_dev_examples,
               task.TEST: self.processor.get_test_examples}
    for set_type in self.sets_to_read():
      examples = readers[set_type](self.data_dir)
      if not examples:
        raise task.no_examples_error(self._data_file(set_type), set_type,
                                     "Download the task's files again, or "
                                     "point --data_dir at the folder that "
                                     "holds them.")
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
        official_metrics=self.processor.official_metrics)

  def train_input_fn(self):
    examples, order = self.training_order(self.examples[task.TRAIN],
                                          self.train_example_order)
    path = self._prepare_features(task.TRAIN, examples, "train.tf_record",
                                  **order)
    return (self._input_fn(path, is_training=True, drop_remainder=True),
            ["Num examples = %d" % len(examples)])

  def evaluate(self, estimator):
    """Accuracy, loss and the official metrics on the dev set. With
    windows, the metrics of the examples' combined outputs (eval_loss is
    then their mean cross-entropy, or squared error)."""
    counts = self.window_counts.get(task.DEV)
    examples, path = self._padded_features(
        task.DEV, "eval.tf_record", self.flags.eval_batch_size,
        "Running evaluation")
    input_fn = self._input_fn(path, is_training=False,
                              drop_remainder=counts is None)
    if counts is None:
      return task.Metrics(estimator.evaluate(
          input_fn=input_fn, steps=None,
          num_batches=len(examples) // self.flags.eval_batch_size),
                          task.EVAL_RESULTS_FILE, summaries=None)
    outputs = self._combined(estimator.predict(input_fn,
                                               for_evaluation=True), counts)
    first_windows = np.cumsum([0] + list(counts[:-1]))
    values = self.window_metrics(
        [examples[i].label for i in first_windows], outputs)
    values.update(task.checkpoint_step(estimator))
    return task.Metrics(values, task.EVAL_RESULTS_FILE, summaries="eval")

  def window_metrics(self, labels, outputs):
    """eval_results.txt's metrics of examples read in windows, from their
    gold `labels` (strings) and combined `outputs`: probabilities, or the
    scores of a regression."""
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

  def predict(self, estimator):
    """test_results.tsv (each example's probabilities, or score) and the
    GLUE submission file of the test set."""
    counts = self.window_counts.get(task.TEST)
    examples, path = self._padded_features(
        task.TEST, "predict.tf_record", self.flags.predict_batch_size,
        "Running prediction")
    results = list(estimator.predict(
        self._input_fn(path, is_training=False, drop_remainder=True),
        num_batches=len(examples) // self.flags.predict_batch_size))
    num_actual = len(self.examples[task.TEST])
    if counts is None:
      results = results[:num_actual]
    else:
      results = [{self._output_name: value}
                 for value in self._combined(results, counts)]
      num_actual = len(counts)
    result_lines, submission_lines = prediction_lines(
        results, self.labels, self.processor.is_regression)
    if len(result_lines) != num_actual:
      raise RuntimeError("Got %d predictions for %d test examples."
                         % (len(result_lines), num_actual))
    self.write_output("test_results.tsv", "".join(result_lines))
    if self.processor.submission_name:
      self.write_output(self.processor.submission_name + ".tsv",
                        "".join(submission_lines))
    return None

  def serving_input_receiver_fn(self):
    return serving_input_receiver_fn_builder(self.flags.max_seq_length,
                                             self.processor.is_regression)

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
            self.tokenizer, path, fingerprint=fingerprint),
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
        is_regression=self.processor.is_regression)

  def _combined(self, results, counts):
    """The outputs of windows, `results` in order, combined per example."""
    outputs = [result[self._output_name] for result in results][:sum(counts)]
    return combine_windows(outputs, counts, self.processor.is_regression)
