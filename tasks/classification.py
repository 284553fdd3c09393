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

This module holds the tasks: ClassificationTask (GLUE's and XNLI's files)
and FileClassificationTask (a user's own files). What they are made of
lives beside it: tasks/classification_features.py (examples into
features, windows, the feature files), tasks/classification_model.py (the
head, its loss and metrics, the model_fn), tasks/classification_predictions.py
(windows combined, the prediction files' lines, a prediction's answer),
tasks/classification_serving.py (the export's inputs and text signature)
and tasks/file_processor.py (a user's files as a DataProcessor).
"""

import json
import os

from absl import logging
import numpy as np

from checkpoints import problem_types
from checkpoints import run_info
from runner import feature_cache
from tasks import classification_features
from tasks import classification_model
from tasks import classification_predictions
from tasks import classification_serving
from tasks import classifier_metrics
from tasks import glue
from tasks import task
from tasks import text_pair
from tasks import windows
from userio import cli

InputExample = glue.InputExample
PaddingInputExample = task.PaddingInputExample



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
        examples, self.window_counts[set_type] = (
            classification_features.expand_windows(
                examples, self.flags.max_seq_length, self.tokenizer,
                self.doc_stride))
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
    return classification_model.head_shapes(self.bert_config,
                                            len(self.labels))

  def head(self, features, mode, settings):
    return classification_model.classifier_head(
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
    result_lines, submission_lines = (
        classification_predictions.prediction_lines(
            outputs, self.labels, self.processor.is_regression))
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
      text_signature = classification_serving.text_signature_of(
          self.graph_tokenizer_fn(), self.flags.max_seq_length,
          self.processor.text_pairs, self.labels, problem_type,
          self.threshold, long_text=self.long_text,
          doc_stride=self.doc_stride)
    return classification_serving.serving_input_receiver_fn_builder(
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
        lambda path, fingerprint: (
            classification_features.file_based_convert_examples_to_features(
                examples, self.labels, self.flags.max_seq_length,
                self.tokenizer, path, fingerprint=fingerprint,
                multi_label=self.multi_label)),
        record_format=classification_features.RECORD_FORMAT_VERSION, **order)

  def _padded_features(self, set_type, file_name, batch_size, title):
    return self.padded_features(
        self.examples[set_type], batch_size,
        lambda padded: self._prepare_features(set_type, padded, file_name),
        title)

  def _input_fn(self, path, *, is_training, drop_remainder):
    return classification_features.file_based_input_fn_builder(
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
    return classification_predictions.combine_windows(
        outputs[:wanted], counts, self.processor.is_regression,
        self.multi_label)

  def _gold_labels(self, examples, counts):
    """The labels of the examples (padded, or their windows)."""
    if counts is None:
      return [example.label for example in examples
              if not isinstance(example, PaddingInputExample)]
    return [examples[i].label for i in np.cumsum([0] + list(counts[:-1]))]


# ------------------------------------------------------- the user's files

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
    return classification_predictions.answer(
        output, self.labels, self.processor.problem_type, self.threshold)

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
