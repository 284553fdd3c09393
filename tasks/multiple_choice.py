# coding=utf-8
"""Multiple choice: SWAG, as the BERT paper ran it (Section 4.4).

The task of run_swag.py. Each question of SWAG's CSV files (tasks/swag.py)
becomes one sequence per candidate continuation: the given sentence
(segment A) and the continuation (segment B), laid out as a sentence pair
is. The only new parameters score each sequence's pooled [CLS] vector:
`cls/multiple_choice/output_weights` [1, hidden] and
`cls/multiple_choice/output_bias` [1], the layout of Hugging Face's
BertForMultipleChoice (its `classifier`); a softmax over a question's
scores gives its choices' probabilities. The bias adds the same number to
every score of a question, so it changes no probability; it is kept so
that conversion to and from BertForMultipleChoice is exact.

Evaluation reports accuracy and loss on val.csv; prediction writes
test_results.tsv (each question's probabilities) and predictions.csv (its
id, the probabilities and the chosen ending).
"""

import csv
import io

from absl import logging
import tensorflow as tf

from memory import memory_model
import modeling
from runner import estimator as estimator_lib
from runner import feature_cache
from runner import serving_input
from runner import tfrecord_input
from runner import training_graph
from serving import text_inputs
from tasks import classifier_metrics
from tasks import swag
from tasks import task
from tasks import text_pair
from userio import progress
from userio import verbosity

TASK_NAME = "swag"
OUTPUT_WEIGHTS = "cls/multiple_choice/output_weights"
OUTPUT_BIAS = "cls/multiple_choice/output_bias"
PREDICTIONS_FILE = "predictions.csv"
# The model's output: each question's probabilities, one per choice.
PROBABILITIES = "probabilities"
# Bumped whenever the TFRecord layout written here changes, so feature files
# of an older layout are rebuilt instead of reused.
RECORD_FORMAT_VERSION = 1


def head_shapes(bert_config):
  """(name, shape) of the variables the multiple-choice head adds to BERT."""
  return ((OUTPUT_WEIGHTS, [1, bert_config.hidden_size]),
          (OUTPUT_BIAS, [1]))


# ----------------------------------------------------------------- features


class InputFeatures(object):
  """Model inputs of one question: one row per choice.

  input_ids, input_mask, segment_ids: lists of NUM_CHOICES int lists of
  max_seq_length each; label_id: the true ending's index (0 for a test
  question or padding).
  """

  def __init__(self, input_ids, input_mask, segment_ids, label_id,
               is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


def convert_single_example(ex_index, example, max_seq_length, tokenizer):
  """Tokenizes one question into fixed-length inputs, one row per choice."""
  if isinstance(example, task.PaddingInputExample):
    zeros = [[0] * max_seq_length for _ in range(swag.NUM_CHOICES)]
    return InputFeatures(zeros, zeros, zeros, 0, is_real_example=False)
  input_ids, input_mask, segment_ids = [], [], []
  layouts = swag.choice_layouts(example.context, example.continuations(),
                                max_seq_length, tokenizer)
  for tokens, segments in layouts:
    ids = tokenizer.convert_tokens_to_ids(tokens)
    padding = [0] * (max_seq_length - len(ids))
    input_ids.append(ids + padding)
    input_mask.append([1] * len(ids) + padding)
    segment_ids.append(segments + padding)
  label_id = example.label or 0
  if ex_index < 5 and verbosity.details():
    logging.info("*** Example ***")
    logging.info("guid: %s (id %s)", example.guid, example.example_id)
    for choice, (tokens, _) in enumerate(layouts):
      logging.info("choice %d: %s", choice, " ".join(tokens))
    logging.info("label: %s", example.label)
  return InputFeatures(input_ids, input_mask, segment_ids, label_id)


def _flat(rows):
  return [value for row in rows for value in row]


def file_based_convert_examples_to_features(examples, max_seq_length,
                                            tokenizer, output_file, *,
                                            fingerprint=None):
  """Writes the features of `examples` to a TFRecord file.

  Features: input_ids, input_mask, segment_ids (int64 [NUM_CHOICES *
  max_seq_length], choice-major), label_ids and is_real_example (int64
  [1]). Written whole or not at all (runner/feature_cache.py); then
  `fingerprint` goes to the file's sidecar, which vouches for it to a later
  run.
  """
  meter = progress.Progress("Writing features to %s" % output_file,
                            len(examples), unit="questions")
  with feature_cache.FeatureFile(output_file, len(examples),
                                 depends_on=fingerprint) as writer:
    for (ex_index, example) in enumerate(examples):
      feature = convert_single_example(ex_index, example, max_seq_length,
                                       tokenizer)
      writer.write(feature_cache.serialized_example({
          "input_ids": feature_cache.int64_feature(_flat(feature.input_ids)),
          "input_mask": feature_cache.int64_feature(
              _flat(feature.input_mask)),
          "segment_ids": feature_cache.int64_feature(
              _flat(feature.segment_ids)),
          "label_ids": feature_cache.int64_feature([feature.label_id]),
          "is_real_example": feature_cache.int64_feature(
              [int(feature.is_real_example)])}))
      meter.advance()
  meter.finish()


def file_based_input_fn_builder(input_file, seq_length, is_training,
                                drop_remainder, *, seed=None):
  """Returns input_fn(params): batches of [batch, NUM_CHOICES, seq_length]
  inputs, [batch] labels; training repeats and shuffles with `seed`."""
  shape = [swag.NUM_CHOICES, seq_length]
  name_to_features = {
      "input_ids": tf.io.FixedLenFeature(shape, tf.int64),
      "input_mask": tf.io.FixedLenFeature(shape, tf.int64),
      "segment_ids": tf.io.FixedLenFeature(shape, tf.int64),
      "label_ids": tf.io.FixedLenFeature([], tf.int64),
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }
  return tfrecord_input.tfrecord_input_fn(input_file, name_to_features,
                                          is_training, drop_remainder, seed)


# -------------------------------------------------------------------- model


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, use_one_hot_embeddings, *,
                 gradient_checkpointing=False, compute_dtype=tf.float32,
                 skip_padding=False):
  """The paper's multiple-choice head on BertModel's pooled [CLS] vectors.

  The choices of all questions go through BERT as one batch of sequences;
  the head scores each pooled vector (after dropout at the config's
  hidden_dropout_prob when training, as BertForMultipleChoice does) and a
  softmax over each question's scores gives its probabilities.

  Args:
    input_ids, input_mask, segment_ids: int32 Tensors [batch, num_choices,
      seq_length]; num_choices may be unknown until run time.
    labels: int32 Tensor [batch], the true choice of each question.

  Returns:
    (loss, per_example_loss [batch], logits [batch, num_choices] float32,
     probabilities [batch, num_choices]).
  """
  _, num_choices, seq_length = modeling.get_shape_list(input_ids,
                                                       expected_rank=3)

  def sequences(tensor):
    return tf.reshape(tensor, [-1, seq_length])

  model = modeling.BertModel(
      config=bert_config,
      is_training=is_training,
      input_ids=sequences(input_ids),
      input_mask=sequences(input_mask),
      token_type_ids=sequences(segment_ids),
      use_one_hot_embeddings=use_one_hot_embeddings,
      gradient_checkpointing=gradient_checkpointing,
      compute_dtype=compute_dtype,
      skip_padding=skip_padding)

  # float32 keeps the softmax and the loss exact under half precision.
  output_layer = tf.cast(model.get_pooled_output(), tf.float32)
  hidden_size = output_layer.shape[-1]
  output_weights = tf.compat.v1.get_variable(
      OUTPUT_WEIGHTS, [1, hidden_size],
      initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.compat.v1.get_variable(
      OUTPUT_BIAS, [1], initializer=tf.compat.v1.zeros_initializer())

  with tf.compat.v1.variable_scope("loss"):
    if is_training:
      output_layer = modeling.dropout(output_layer,
                                      bert_config.hidden_dropout_prob)
    scores = tf.nn.bias_add(
        tf.matmul(output_layer, output_weights, transpose_b=True),
        output_bias)
    logits = tf.reshape(scores, [-1, num_choices])
    probabilities = tf.nn.softmax(logits, axis=-1)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(labels, depth=num_choices, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    loss = tf.reduce_mean(per_example_loss)
    return loss, per_example_loss, logits, probabilities


def multiple_choice_head(features, mode, settings):
  """`create_model` on a batch of `file_based_input_fn_builder`'s
  features, as runner/training_graph.model_fn_builder calls a head: EVAL's
  metrics are accuracy and loss; PREDICT gives PROBABILITIES [batch,
  num_choices]."""
  label_ids = features["label_ids"]
  (total_loss, per_example_loss, logits, probabilities) = create_model(
      settings.bert_config, mode == estimator_lib.ModeKeys.TRAIN,
      features["input_ids"], features["input_mask"], features["segment_ids"],
      label_ids, **settings.encoder_options())
  if mode != estimator_lib.ModeKeys.EVAL:
    return training_graph.ModelOutputs(
        total_loss, predictions={PROBABILITIES: probabilities})
  return training_graph.ModelOutputs(
      total_loss, eval_metric_ops=classifier_metrics.classification_metric_ops(
          label_ids, tf.argmax(logits, axis=-1, output_type=tf.int32),
          per_example_loss, tf.cast(features["is_real_example"], tf.float32),
          ()))


def serving_input_receiver_fn_builder(seq_length, text_signature=None):
  """The serving input of an exported model (runner/serving_input.py): int32
  input_ids, input_mask and segment_ids of [batch, choices, length], any
  number of choices, as `convert_single_example` makes them; with a
  `text_signature` (`text_signature_of`), the "text" signature takes the
  texts instead."""
  return serving_input.receiver_fn_builder(
      seq_length, {"label_ids": tf.int32, "is_real_example": tf.int32},
      choices=True, text_signature=text_signature)


def text_signature_of(tokenizer_fn, seq_length):
  """The signature from raw text (runner/serving_input.py).

  Inputs: "sentence" tf.string [batch] (segment A) and "endings" tf.string
  [batch, choices] (each choice's segment B: for SWAG, sent2 and the
  ending joined by a space), laid out as `swag.choice_layouts` lays them
  out, padded to the batch's longest choice. Outputs: "probabilities"
  [batch, choices], "choice" int32 [batch] (the likeliest) and its
  "ending" tf.string [batch].

  Args:
    tokenizer_fn: callable () -> a serving.graph_tokenizer tokenizer,
      called in the export graph.
  """
  def inputs_fn():
    texts = {
        "sentence": tf.compat.v1.placeholder(tf.string, [None], "sentence"),
        "endings": tf.compat.v1.placeholder(tf.string, [None, None],
                                            "endings")}
    shape = tf.shape(texts["endings"])
    sentences = tf.reshape(tf.tile(texts["sentence"][:, None], [1, shape[1]]),
                           [-1])
    flat = text_inputs.model_inputs(tokenizer_fn(), seq_length, sentences,
                                    tf.reshape(texts["endings"], [-1]))
    return texts, {name: tf.reshape(value, tf.concat([shape, [-1]], 0))
                   for name, value in flat.items()}

  def outputs_fn(predictions, texts):
    probabilities = predictions[PROBABILITIES]
    choice = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
    return {"probabilities": probabilities, "choice": choice,
            "ending": tf.gather(texts["endings"], choice, batch_dims=1)}

  return serving_input.TextSignature(inputs_fn, outputs_fn)


# -------------------------------------------------------------- predictions


def prediction_files(examples, probabilities):
  """(test_results.tsv, predictions.csv) texts for the real questions.

  test_results.tsv: per question, its choices' probabilities separated by
  tabs (run_classifier.py's layout). predictions.csv: a header "id,
  ending0, ..., pred", then per question its id, the probabilities and
  the index of the most probable ending.
  """
  results = io.StringIO()
  table = io.StringIO()
  writer = csv.writer(table, lineterminator="\n")
  writer.writerow(["id"] + list(swag.ENDING_COLUMNS) + ["pred"])
  for example, row in zip(examples, probabilities):
    row = [float(p) for p in row]
    results.write("\t".join(str(p) for p in row) + "\n")
    writer.writerow([example.example_id] + [repr(p) for p in row] +
                    [max(range(len(row)), key=row.__getitem__)])
  return results.getvalue(), table.getvalue()


class MultipleChoiceTask(task.Task):
  """SWAG's files in `data_dir`, the multiple-choice head, accuracy and
  the prediction files."""

  name = TASK_NAME
  min_seq_length = text_pair.MIN_SEQ_LENGTH_PAIR
  serves_text = True

  def __init__(self, data_dir, *,
               train_example_order=feature_cache.SHUFFLED):
    """Args:
      data_dir: the folder of SWAG's train.csv, val.csv and test.csv.
      train_example_order: "shuffled" (the questions permuted with --seed
        before their features are written) or "file".
    """
    super().__init__()
    self.data_dir = data_dir
    self.train_example_order = train_example_order
    self.examples = {}
    # (padded examples, feature file) once evaluation made them.
    self._eval_features = None

  def record(self):
    """No labels; the number of choices."""
    return self.make_record(None, num_choices=swag.NUM_CHOICES)

  def read_data(self):
    task.check_data_dir(self.data_dir,
                        "point it at the folder holding SWAG's CSV files.")
    for set_type in self.sets_to_read():
      path = swag.data_file(self.data_dir, set_type)
      self.examples[set_type] = swag.read_examples(
          path, set_type, needs_label=set_type != task.TEST)
      if not self.examples[set_type]:
        raise task.no_examples_error(
            path, set_type, "Point --data_dir at the folder that holds "
            "SWAG's files.", unit="questions")

  def num_train_examples(self):
    return (len(self.examples[task.TRAIN]),
            swag.data_file(self.data_dir, task.TRAIN))

  def step_memory(self):
    return memory_model.BertMemory(
        self.bert_config, self.flags.max_seq_length, self.flags.optimizer,
        sequences_per_example=swag.NUM_CHOICES)

  def head_shapes(self):
    return head_shapes(self.bert_config)

  def head(self, features, mode, settings):
    return multiple_choice_head(features, mode, settings)

  def train_input_fn(self):
    examples, order = self.training_order(self.examples[task.TRAIN],
                                          self.train_example_order)
    path = self._prepare_features(task.TRAIN, examples, "train.tf_record",
                                  **order)
    return (file_based_input_fn_builder(
        path, self.flags.max_seq_length, is_training=True,
        drop_remainder=True, seed=self.flags.seed),
            ["Num questions = %d (%d sequences each)" % (
                len(examples), swag.NUM_CHOICES)])

  def evaluate(self, estimator, checkpoint_path=None):
    """Accuracy and loss on val.csv."""
    if self._eval_features is None:
      self._eval_features = self._padded_features(
          task.DEV, "eval.tf_record", self.flags.eval_batch_size,
          "Running evaluation")
    padded, path = self._eval_features
    return task.Metrics(estimator.evaluate(
        input_fn=self._input_fn(path), steps=None,
        checkpoint_path=checkpoint_path,
        num_batches=len(padded) // self.flags.eval_batch_size),
                        task.EVAL_RESULTS_FILE, summaries=None)

  def eval_metric_names(self):
    return ["eval_accuracy", "eval_loss", "loss"]

  def predict(self, estimator, checkpoint_path=None):
    """test_results.tsv and predictions.csv of test.csv."""
    examples = self.examples[task.TEST]
    padded, path = self._padded_features(task.TEST, "predict.tf_record",
                                         self.flags.predict_batch_size,
                                         "Running prediction")
    probabilities = [result[PROBABILITIES] for result in estimator.predict(
        self._input_fn(path), checkpoint_path=checkpoint_path,
        num_batches=len(padded) // self.flags.predict_batch_size)]
    probabilities = probabilities[:len(examples)]
    if len(probabilities) != len(examples):
      raise RuntimeError("Got %d predictions for %d test questions."
                         % (len(probabilities), len(examples)))
    tsv, table = prediction_files(examples, probabilities)
    self.write_output("test_results.tsv", tsv)
    self.write_output(PREDICTIONS_FILE, table)
    return None

  def serving_input_receiver_fn(self):
    text_signature = None
    if self.exports_text():
      text_signature = text_signature_of(self.graph_tokenizer_fn(),
                                         self.flags.max_seq_length)
    return serving_input_receiver_fn_builder(self.flags.max_seq_length,
                                             text_signature)

  def _prepare_features(self, set_type, examples, file_name, **order):
    return self.prepare_features(
        file_name, [swag.data_file(self.data_dir, set_type)], len(examples),
        lambda path, fingerprint: file_based_convert_examples_to_features(
            examples, self.flags.max_seq_length, self.tokenizer, path,
            fingerprint=fingerprint),
        record_format=RECORD_FORMAT_VERSION, **order)

  def _padded_features(self, set_type, file_name, batch_size, title):
    return self.padded_features(
        self.examples[set_type], batch_size,
        lambda padded: self._prepare_features(set_type, padded, file_name),
        title, unit="questions")

  def _input_fn(self, path):
    return file_based_input_fn_builder(path, self.flags.max_seq_length,
                                       is_training=False, drop_remainder=True)
