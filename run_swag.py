# coding=utf-8
"""BERT fine-tuning runner for multiple choice: SWAG, as the paper ran it.

Google's repository has no multiple-choice script; this one follows the
BERT paper's Section 4.4 and reads like run_classifier.py, with its flags,
feature files, checkpoints, precision, memory planning, distribution,
export and outputs. Each question of SWAG's CSV files (tasks/swag.py)
becomes four sequences, the given sentence (segment A) paired with one
candidate continuation (segment B). The only new parameters score each
sequence's pooled [CLS] vector: `cls/multiple_choice/output_weights`
[1, hidden] and `cls/multiple_choice/output_bias` [1], the layout of Hugging
Face's BertForMultipleChoice (its `classifier`), and a softmax over the
four scores gives the choice's probability. The bias adds the same number
to every score of a question, so it changes no probability; it is kept so
that conversion to and from BertForMultipleChoice is exact.

The defaults are the paper's recipe: 3 epochs, learning rate 2e-5, batch
16. --do_eval writes eval_results.txt (accuracy and loss on val.csv);
--do_predict writes test_results.tsv (the four probabilities of each
question of test.csv) and predictions.csv (its id, the probabilities and
the chosen ending).
"""

import collections
import csv
import io
import os
import random

from absl import flags
from absl import logging

from userio import cli
from startup import shared_flags

FLAGS = flags.FLAGS

TASK_NAME = "swag"
# The paper's recipe (Section 4.4), where the shared flags default to
# run_classifier.py's values.
RECIPE_DEFAULTS = {"train_batch_size": 16, "learning_rate": 2e-5,
                   "num_train_epochs": 3.0}
OUTPUT_WEIGHTS = "cls/multiple_choice/output_weights"
OUTPUT_BIAS = "cls/multiple_choice/output_bias"
PREDICTIONS_FILE = "predictions.csv"

# Bumped whenever the TFRecord layout written here changes, so feature files
# of an older layout are rebuilt instead of reused.
_RECORD_FORMAT_VERSION = 1


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags: run_classifier.py's, with the paper's SWAG
  recipe as defaults. Called from `__main__`, not at import."""
  flags.DEFINE_string(
      "data_dir", None,
      "Folder with SWAG's files as released: train.csv, val.csv, test.csv.",
      flag_values=flag_values)
  shared_flags.define_common_flags(max_seq_length_default=128,
                                   flag_values=flag_values)
  for name, value in RECIPE_DEFAULTS.items():
    flag_values.set_default(name, value)
  shared_flags.define_skip_padding_flag(flag_values)
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)
  flags.DEFINE_bool("do_eval", False,
                    "Evaluate on val.csv; writes eval_results.txt.",
                    flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Questions per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_enum(
      "train_example_order", "shuffled",
      list(shared_flags.TRAIN_EXAMPLE_ORDERS),
      "Order of the questions in train.tf_record: shuffled (permuted with "
      "--seed) or file (train.csv's order).", flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

from tasks import classifier_metrics
from runner import estimator as estimator_lib
from runner import feature_cache
from memory import memory_model
import modeling
from userio import output_files
from userio import progress
from checkpoints import run_info
from startup import run_setup
from runner import serving_input
from tasks import swag
from tasks import text_pair
from runner import tfrecord_input
from runner import training_graph
from userio import verbosity
# pylint: enable=g-import-not-at-top,wrong-import-position


def head_shapes(bert_config):
  """(name, shape) of the variables the multiple-choice head adds to BERT."""
  return ((OUTPUT_WEIGHTS, [1, bert_config.hidden_size]),
          (OUTPUT_BIAS, [1]))


# ----------------------------------------------------------------- features


class PaddingInputExample(object):
  """Stand-in filling up the last eval or predict batch (all-zero features,
  is_real_example 0: the metrics and prediction files skip it)."""


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
  if isinstance(example, PaddingInputExample):
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


def _int64_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _flat(rows):
  return [value for row in rows for value in row]


def file_based_convert_examples_to_features(examples, max_seq_length,
                                            tokenizer, output_file, *,
                                            fingerprint=None):
  """Writes the features of `examples` to a TFRecord file.

  Features: input_ids, input_mask, segment_ids (int64 [NUM_CHOICES *
  max_seq_length], choice-major), label_ids and is_real_example (int64
  [1]). Written whole or not at all (runner/feature_cache.py: a temporary
  name renamed when complete, a full disk in one line); then `fingerprint`
  goes to the file's sidecar, which vouches for it to a later run.
  """
  meter = progress.Progress("Writing features to %s" % output_file,
                            len(examples), unit="questions")
  with feature_cache.FeatureFile(output_file, len(examples),
                                 depends_on=fingerprint) as writer:
    for (ex_index, example) in enumerate(examples):
      feature = convert_single_example(ex_index, example, max_seq_length,
                                       tokenizer)
      features = collections.OrderedDict()
      features["input_ids"] = _int64_feature(_flat(feature.input_ids))
      features["input_mask"] = _int64_feature(_flat(feature.input_mask))
      features["segment_ids"] = _int64_feature(_flat(feature.segment_ids))
      features["label_ids"] = _int64_feature([feature.label_id])
      features["is_real_example"] = _int64_feature(
          [int(feature.is_real_example)])
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=features)).SerializeToString())
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


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     gradient_checkpointing=False, compute_dtype=tf.float32,
                     skip_padding=False):
  """Builds the model_fn(features, labels, mode, params) the runner calls:
  TRAIN's loss and train op, EVAL's accuracy and loss, PREDICT's
  probabilities [batch, num_choices]."""

  def model_fn(features, labels, mode, params):
    """The graph of `mode`; labels arrive inside `features`, the
    accumulation steps in `params` (training_graph.train_op)."""
    del labels  # The runner's signature; unused here.
    if verbosity.details():
      logging.info("*** Features ***")
      for name in sorted(features.keys()):
        logging.info("  name = %s, shape = %s", name, features[name].shape)
    label_ids = features["label_ids"]
    is_real_example = tf.cast(features["is_real_example"], tf.float32)
    is_training = (mode == estimator_lib.ModeKeys.TRAIN)
    (total_loss, per_example_loss, logits, probabilities) = create_model(
        bert_config, is_training, features["input_ids"],
        features["input_mask"], features["segment_ids"], label_ids,
        use_one_hot_embeddings, gradient_checkpointing=gradient_checkpointing,
        compute_dtype=compute_dtype, skip_padding=skip_padding)

    training_graph.init_from_checkpoint(init_checkpoint)

    if mode == estimator_lib.ModeKeys.TRAIN:
      train_op = training_graph.train_op(
          total_loss, learning_rate, num_train_steps, num_warmup_steps,
          use_tpu, params=params, optimizer=optimizer,
          compute_dtype=compute_dtype)
      return estimator_lib.EstimatorSpec(mode=mode, loss=total_loss,
                                         train_op=train_op)
    if mode == estimator_lib.ModeKeys.EVAL:
      predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
      metric_ops = classifier_metrics.classification_metric_ops(
          label_ids, predictions, per_example_loss, is_real_example, ())
      return estimator_lib.EstimatorSpec(mode=mode, loss=total_loss,
                                         eval_metric_ops=metric_ops)
    return estimator_lib.EstimatorSpec(
        mode=mode, predictions={"probabilities": probabilities})

  return model_fn


def serving_input_receiver_fn_builder(seq_length):
  """The serving input of an exported model (runner/serving_input.py): int32
  input_ids, input_mask and segment_ids of [batch, choices, length], any
  number of choices, as `convert_single_example` makes them."""
  return serving_input.receiver_fn_builder(
      seq_length, {"label_ids": tf.int32, "is_real_example": tf.int32},
      choices=True)


# --------------------------------------------------------------------- main


def _check_flags():
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or
          FLAGS.export_dir):
    raise cli.UserError("Nothing to do: pass at least one of --do_train, "
                        "--do_eval, --do_predict and --export_dir.")
  if not os.path.isdir(FLAGS.data_dir):
    raise cli.UserError("--data_dir=%s is not a directory; point it at the "
                        "folder holding SWAG's CSV files." % FLAGS.data_dir)


# The data set each action reads: (action flag, set type).
_ACTION_SETS = (("do_train", "train"), ("do_eval", "dev"),
                ("do_predict", "test"))


def _read_examples():
  """{set type: examples} of every requested action, read and checked
  before anything slow starts."""
  examples = {}
  for action, set_type in _ACTION_SETS:
    if not FLAGS[action].value:
      continue
    path = swag.data_file(FLAGS.data_dir, set_type)
    examples[set_type] = swag.read_examples(path, set_type,
                                            needs_label=set_type != "test")
    if not examples[set_type]:
      raise cli.UserError(
          "%s holds no questions for --%s. Point --data_dir at the folder "
          "that holds SWAG's files." % (path, action))
  return examples


def _record(shared):
  """The run_info.json of this run: no labels, the number of choices."""
  return run_info.make_record(
      TASK_NAME, None, shared.do_lower_case, shared.max_seq_length,
      shared.bert_config_file, shared.vocab_file, shared.spm_model_file,
      num_choices=swag.NUM_CHOICES)


def _prepare_features(shared, set_type, examples, tokenizer, file_name,
                      **order):
  """Writes (or reuses, when its sidecar vouches for it) output_dir/file_name
  for `examples`; returns its path. `order`: feature_cache.fingerprint's
  example_order / shuffle_seed."""
  output_file = os.path.join(shared.output_dir, file_name)
  fingerprint = feature_cache.fingerprint(
      [swag.data_file(FLAGS.data_dir, set_type)],
      shared.spm_model_file or shared.vocab_file, shared.do_lower_case,
      shared.max_seq_length, TASK_NAME, len(examples),
      record_format=_RECORD_FORMAT_VERSION, **order)
  feature_cache.prepare(
      output_file, fingerprint,
      lambda: file_based_convert_examples_to_features(
          examples, shared.max_seq_length, tokenizer, output_file,
          fingerprint=fingerprint))
  return output_file


def _pad_to_batch_multiple(examples, batch_size):
  padded = list(examples)
  while len(padded) % batch_size:
    padded.append(PaddingInputExample())
  return padded


def _train(shared, estimator, train_examples, tokenizer, num_train_steps):
  order = {"example_order": FLAGS.train_example_order}
  if FLAGS.train_example_order == "shuffled":
    train_examples = list(train_examples)
    random.Random(shared.seed).shuffle(train_examples)
    order["shuffle_seed"] = shared.seed
  train_file = _prepare_features(shared, "train", train_examples, tokenizer,
                                 "train.tf_record", **order)
  logging.info("***** Running training *****")
  logging.info("  Num questions = %d (%d sequences each)",
               len(train_examples), swag.NUM_CHOICES)
  logging.info("  Batch size = %d", shared.train_batch_size)
  logging.info("  Num steps = %d", num_train_steps)
  estimator.train(
      input_fn=file_based_input_fn_builder(
          train_file, shared.max_seq_length, is_training=True,
          drop_remainder=True, seed=shared.seed),
      max_steps=num_train_steps)


def _evaluate(shared, estimator, eval_examples, tokenizer):
  """Accuracy and loss on val.csv, into eval_results.txt."""
  padded = _pad_to_batch_multiple(eval_examples, FLAGS.eval_batch_size)
  eval_file = _prepare_features(shared, "dev", padded, tokenizer,
                                "eval.tf_record")
  logging.info("***** Running evaluation *****")
  logging.info("  Num questions = %d (%d actual, %d padding)", len(padded),
               len(eval_examples), len(padded) - len(eval_examples))
  result = estimator.evaluate(
      input_fn=file_based_input_fn_builder(
          eval_file, shared.max_seq_length, is_training=False,
          drop_remainder=True),
      steps=None, num_batches=len(padded) // FLAGS.eval_batch_size)
  logging.info("***** Eval results *****")
  for key in sorted(result.keys()):
    logging.info("  %s = %s", key, str(result[key]))
  output_files.write_eval_results(
      os.path.join(shared.output_dir, "eval_results.txt"), result,
      flag="--output_dir")


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


def _predict(shared, estimator, predict_examples, tokenizer):
  """Predicts test.csv: test_results.tsv and predictions.csv."""
  padded = _pad_to_batch_multiple(predict_examples, shared.predict_batch_size)
  predict_file = _prepare_features(shared, "test", padded, tokenizer,
                                   "predict.tf_record")
  logging.info("***** Running prediction *****")
  logging.info("  Num questions = %d (%d actual, %d padding)", len(padded),
               len(predict_examples), len(padded) - len(predict_examples))
  results = estimator.predict(
      input_fn=file_based_input_fn_builder(
          predict_file, shared.max_seq_length, is_training=False,
          drop_remainder=True),
      num_batches=len(padded) // shared.predict_batch_size)
  probabilities = [result["probabilities"] for result, _ in
                   zip(results, predict_examples)]
  if len(probabilities) != len(predict_examples):
    raise RuntimeError("Got %d predictions for %d test questions."
                       % (len(probabilities), len(predict_examples)))
  tsv, table = prediction_files(predict_examples, probabilities)
  output_files.write_text(os.path.join(shared.output_dir, "test_results.tsv"),
                          tsv, flag="--output_dir")
  output_files.write_text(os.path.join(shared.output_dir, PREDICTIONS_FILE),
                          table, flag="--output_dir")


def main(_):
  _check_flags()
  shared, bert_config, tokenizer = run_setup.start(
      shared_flags.read(FLAGS), do_train=FLAGS.do_train,
      min_seq_length=text_pair.MIN_SEQ_LENGTH_PAIR)
  record = _record(shared)
  run_setup.check_output_dir(shared.output_dir, record, do_train=FLAGS.do_train)
  examples = _read_examples()
  num_train_steps = num_warmup_steps = None
  if FLAGS.do_train:
    num_train_steps, num_warmup_steps = run_setup.num_train_and_warmup_steps(
        len(examples["train"]), shared.train_batch_size,
        shared.num_train_epochs, shared.warmup_proportion,
        swag.data_file(FLAGS.data_dir, "train"))
  setup = run_setup.set_up(
      shared, bert_config, do_train=FLAGS.do_train, record=record,
      step_memory=memory_model.BertMemory(
          bert_config, shared.max_seq_length, shared.optimizer,
          sequences_per_example=swag.NUM_CHOICES),
      heads=head_shapes(bert_config))

  model_fn = model_fn_builder(
      bert_config=bert_config,
      init_checkpoint=shared.init_checkpoint,
      learning_rate=shared.learning_rate,
      num_train_steps=num_train_steps,
      num_warmup_steps=num_warmup_steps,
      use_tpu=shared.use_tpu,
      use_one_hot_embeddings=shared.use_tpu,
      optimizer=shared.optimizer,
      gradient_checkpointing=setup.gradient_checkpointing,
      compute_dtype=setup.compute_dtype,
      skip_padding=run_setup.skip_padding(FLAGS.skip_padding, shared.use_xla))
  estimator = estimator_lib.Estimator(
      model_fn=model_fn, config=setup.run_config,
      train_batch_size=shared.train_batch_size,
      eval_batch_size=FLAGS.eval_batch_size,
      predict_batch_size=shared.predict_batch_size)

  if FLAGS.do_train:
    _train(shared, estimator, examples["train"], tokenizer, num_train_steps)
  if not estimator.config.is_chief:
    logging.info("This worker's training is done; the chief writes the "
                 "evaluation and prediction outputs.")
    return
  if FLAGS.do_eval:
    _evaluate(shared, estimator, examples["dev"], tokenizer)
  if FLAGS.do_predict:
    _predict(shared, estimator, examples["test"], tokenizer)
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
