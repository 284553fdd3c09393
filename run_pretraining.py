# coding=utf-8
"""Pre-trains BERT on the masked LM and next-sentence objectives.

Reads the TFRecord files of create_pretraining_data.py (Google's format),
trains the encoder with Google's two heads (cls/predictions, whose output
projection is the word embedding table, and cls/seq_relationship) and
evaluates the masked-LM and next-sentence accuracy and loss into
eval_results.txt. The flags, variable names, losses and metrics are those
of Google's run_pretraining.py; the runner adds what the fine-tuning
scripts have (accumulation, mixed precision, LAMB, data parallelism, XLA,
resuming killed runs).
"""

import os

from absl import flags
from absl import logging

from userio import cli
from startup import shared_flags

FLAGS = flags.FLAGS

# Files read at once by the training input (Google's num_cpu_threads).
NUM_CPU_THREADS = 4
# Added to the sum of the masked-LM weights, as in Google's loss, so that a
# batch without any masked position divides by a nonzero number.
WEIGHT_EPSILON = 1e-5


def define_flags(flag_values=flags.FLAGS):
  """Defines the script's flags: Google's names and defaults, then the
  shared ones.

  Called from `__main__` rather than at import, so that tests and other
  scripts can import this module next to one defining the shared flags.
  """
  flags.DEFINE_string(
      "input_file", None,
      "The TFRecord files of create_pretraining_data.py: comma-separated "
      "paths or glob patterns. Evaluation reads the same files.",
      flag_values=flag_values)
  shared_flags.define_model_flags(128, flag_values)
  flags.DEFINE_string(
      "vocab_file", None,
      "Optional: the vocab.txt (or SentencePiece .model) the records were "
      "made with. Checked against the config's vocab_size and against the "
      "vocabulary the records' sidecars name, and copied into --output_dir "
      "(run_info.json names it), so that fine-tuning can take it from "
      "there.", flag_values=flag_values)
  flags.DEFINE_integer(
      "max_predictions_per_seq", 20,
      "Masked positions per sequence in the records; must be the value "
      "create_pretraining_data.py was run with (as --max_seq_length).",
      flag_values=flag_values)
  shared_flags.define_training_flags(flag_values)
  flags.DEFINE_bool("do_eval", False,
                    "Evaluate on --input_file; writes eval_results.txt.",
                    flag_values=flag_values)
  flags.DEFINE_integer("eval_batch_size", 8, "Examples per eval batch.",
                       flag_values=flag_values)
  flags.DEFINE_bool(
      "eval_all_checkpoints", False,
      "With --do_eval: evaluate every checkpoint kept in --output_dir, "
      "oldest first, not only the newest. Each one's metrics go to "
      "TensorBoard (eval/) at its step and to a row of eval_history.tsv; "
      "eval_results.txt holds the newest's. Train with "
      "--keep_checkpoint_max=0 to keep them all.",
      flag_values=flag_values)
  flags.DEFINE_integer("num_train_steps", 100000,
                       "Optimizer updates to train for (across restarts).",
                       flag_values=flag_values)
  flags.DEFINE_integer(
      "num_warmup_steps", 10000,
      "Updates over which the learning rate rises linearly from 0 to "
      "--learning_rate; it then falls linearly to 0 at --num_train_steps.",
      flag_values=flag_values)
  flags.DEFINE_integer(
      "max_eval_steps", 100,
      "Eval batches to run; the files are read in order and repeated when "
      "they hold fewer.", flag_values=flag_values)
  shared_flags.define_tpu_flags(flag_values)
  shared_flags.define_memory_flags(flag_values)
  shared_flags.define_scale_flags(flag_values)
  # --help lists the shared flags with the script's own.
  flags.adopt_module_key_flags(shared_flags, flag_values=flag_values)


# --help is answered here, before TensorFlow loads (seconds).
cli.answer_help(__name__, define_flags)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Before TensorFlow: it imports TensorFlow without the CPU start-up noise.
from userio import quiet_tensorflow  # pylint: disable=unused-import,g-bad-import-order
import tensorflow as tf

from checkpoints import checkpoint_checks
from corpus import record_sidecars
from runner import estimator as estimator_lib
from engine import lean_gradients
from memory import memory_model
import modeling
from userio import output_files
from checkpoints import run_info
from startup import run_setup
from tasks import text_pair
from runner import tfrecord_input
from runner import training_graph
from userio import verbosity
# pylint: enable=g-import-not-at-top,wrong-import-position


# ------------------------------------------------------------------ records


def record_features(max_seq_length, max_predictions_per_seq):
  """Google's pretraining record: feature name -> tf.io.FixedLenFeature."""
  ids = tf.io.FixedLenFeature([max_seq_length], tf.int64)
  predictions = tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64)
  return {
      "input_ids": ids,
      "input_mask": ids,
      "segment_ids": ids,
      "masked_lm_positions": predictions,
      "masked_lm_ids": predictions,
      "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq],
                                                 tf.float32),
      "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
  }


def expand_input_files(input_file):
  """The files of --input_file (comma-separated paths or globs), in order.

  Each pattern's matches are sorted, so that the order (which evaluation
  follows and training's seeded shuffle starts from) does not depend on
  the file system. The sidecars create_pretraining_data.py writes beside
  its records (<file>.meta.json), which a pattern such as records* also
  matches, are left out.

  Raises:
    cli.UserError naming a pattern that matches no file.
  """
  files = []
  for pattern in (input_file or "").split(","):
    pattern = pattern.strip()
    if not pattern:
      continue
    matches = sorted(path for path in tf.io.gfile.glob(pattern)
                     if not tf.io.gfile.isdir(path) and
                     not record_sidecars.is_sidecar(path))
    if not matches and tf.io.gfile.isdir(pattern):
      raise cli.UserError(
          "--input_file: %s is a folder; pass the TFRecord files in it "
          "(e.g. %s)." % (pattern, os.path.join(pattern, "*.tfrecord")))
    if not matches:
      raise cli.UserError(
          "--input_file: %s matches no file; pass the TFRecord files that "
          "create_pretraining_data.py wrote (comma-separated paths or "
          "globs)." % pattern)
    files.extend(matches)
  if not files:
    raise cli.UserError("--input_file names no file; pass the TFRecord "
                        "files that create_pretraining_data.py wrote.")
  return files


def _first_record(path):
  """The first serialized record of `path`, or None; UserError if the file
  is not a TFRecord file."""
  try:
    return tfrecord_input.first_record(path)
  except ValueError as e:
    raise cli.UserError(
        "--input_file: %s is not a TFRecord file (%s); pass the files that "
        "create_pretraining_data.py wrote." % (path, e)) from None


def _length_fix(feature_name, max_seq_length, max_predictions_per_seq):
  """(flag, its value) that sets the length of `feature_name`."""
  if feature_name.startswith("masked_lm_"):
    return "max_predictions_per_seq", max_predictions_per_seq
  if feature_name == "next_sentence_labels":
    return None, 1
  return "max_seq_length", max_seq_length


def _check_feature(path, name, feature, spec, max_seq_length,
                   max_predictions_per_seq):
  """One feature of a record against its FixedLenFeature `spec`."""
  kind = "float_list" if spec.dtype == tf.float32 else "int64_list"
  if feature.WhichOneof("kind") != kind:
    raise cli.UserError(
        "--input_file: %s: feature %s of the first record is not a %s; "
        "these are not records of create_pretraining_data.py." % (
            path, name, kind))
  found = len(getattr(feature, kind).value)
  flag, expected = _length_fix(name, max_seq_length, max_predictions_per_seq)
  if found == expected:
    return
  if flag is None:
    raise cli.UserError(
        "--input_file: %s: %s of the first record holds %d values, not 1; "
        "these are not records of create_pretraining_data.py." % (
            path, name, found))
  raise cli.UserError(
      "--input_file: %s holds records with %d %s values, but --%s=%d; pass "
      "--%s=%d, the value create_pretraining_data.py was run with (or "
      "records made with %d)." % (path, found, name, flag, expected, flag,
                                  found, expected))


def check_record_file(path, max_seq_length, max_predictions_per_seq,
                      vocab_size):
  """Reads the first record of `path` and checks it against the flags.

  Its features, their types and lengths must be Google's pretraining
  record's for --max_seq_length / --max_predictions_per_seq, and its token
  ids must be below the config's vocab_size.

  Raises:
    cli.UserError naming the file and the flag or fix.
  """
  record = _first_record(path)
  if record is None:
    raise cli.UserError(
        "--input_file: %s holds no records; rerun create_pretraining_data.py "
        "for it or leave it out." % path)
  try:
    example = tf.train.Example.FromString(record)
  except Exception:  # pylint: disable=broad-except
    # protobuf's DecodeError has no stable import path.
    raise cli.UserError(
        "--input_file: %s holds records that are not tf.train.Examples; pass "
        "the files that create_pretraining_data.py wrote." % path) from None
  features = example.features.feature
  for name, spec in record_features(max_seq_length,
                                    max_predictions_per_seq).items():
    if name not in features:
      raise cli.UserError(
          "--input_file: %s: the first record has no feature %s (it has %s); "
          "pass the files that create_pretraining_data.py wrote." % (
              path, name, ", ".join(sorted(features)) or "none"))
    _check_feature(path, name, features[name], spec, max_seq_length,
                   max_predictions_per_seq)
  ids = (list(features["input_ids"].int64_list.value) +
         list(features["masked_lm_ids"].int64_list.value))
  if max(ids) >= vocab_size or min(ids) < 0:
    raise cli.UserError(
        "--input_file: %s holds token id %d, outside the vocab_size=%d of "
        "--bert_config_file; the records were made with another vocabulary "
        "than the model's." % (path, max(ids) if max(ids) >= vocab_size
                               else min(ids), vocab_size))


def check_input_files(input_file, max_seq_length, max_predictions_per_seq,
                      bert_config, bert_config_file=None, vocab_file=None):
  """The files of --input_file, each checked by its first record against
  --max_seq_length, --max_predictions_per_seq and the config's vocabulary,
  and by its sidecar (corpus/record_sidecars.py) against the config's
  vocab_size and --vocab_file.

  Returns:
    (list of paths, sha256 of the vocabulary the records' sidecars name, or
    None when they name none).
  """
  input_files = expand_input_files(input_file)
  # The sidecars first: they say which vocabulary, where a token id out of
  # range only says that it is another one.
  records_vocab = record_sidecars.vocabulary_of(
      input_files, bert_config.vocab_size, bert_config_file, vocab_file)
  for path in input_files:
    check_record_file(path, max_seq_length, max_predictions_per_seq,
                      bert_config.vocab_size)
  if verbosity.details():
    logging.info("*** Input Files ***")
    for path in input_files:
      logging.info("  %s", path)
  else:
    logging.info("Input: %d file(s): %s%s", len(input_files),
                 input_files[0], ", ..." if len(input_files) > 1 else "")
  return input_files, records_vocab


def input_fn_builder(input_files, max_seq_length, max_predictions_per_seq,
                     is_training, num_cpu_threads=NUM_CPU_THREADS, *,
                     seed=None):
  """Returns input_fn(params): batches of params["batch_size"] records.

  Training repeats the files forever, shuffles their order, reads up to
  `num_cpu_threads` of them at once taking one record from each in turn,
  and shuffles the records in a buffer of 100, as Google's input does; with
  a fixed `seed` the order is the same in every run (Google's interleave
  was nondeterministic), which resuming a run relies on. Evaluation reads
  the files in order, repeated, so that any number of batches can be run.
  Every batch is full.

  Returns:
    callable(params) -> tf.data.Dataset of feature dicts, int64 features
    as int32 [batch, ...].
  """
  name_to_features = record_features(max_seq_length, max_predictions_per_seq)

  def input_fn(params):
    tfrecord_input.note_record_files(input_files)
    if is_training:
      files = tf.data.Dataset.from_tensor_slices(tf.constant(input_files))
      files = files.repeat().shuffle(len(input_files), seed=seed)
      cycle_length = min(num_cpu_threads, len(input_files))
      records = files.interleave(
          tf.data.TFRecordDataset, cycle_length=cycle_length,
          num_parallel_calls=cycle_length, deterministic=True)
      records = records.shuffle(tfrecord_input.SHUFFLE_BUFFER, seed=seed)
    else:
      records = tf.data.TFRecordDataset(input_files).repeat()
    return tfrecord_input.parse_batches(records, name_to_features,
                                        params["batch_size"],
                                        drop_remainder=True)

  return input_fn


# -------------------------------------------------------------------- heads


def gather_indexes(sequence_tensor, positions):
  """The rows of each example's masked positions.

  Args:
    sequence_tensor: [batch, seq_length, width].
    positions: int32 [batch, num_positions], indices into seq_length.

  Returns:
    [batch * num_positions, width], example by example.
  """
  width = modeling.get_shape_list(sequence_tensor, expected_rank=3)[2]
  rows = tf.gather(sequence_tensor, positions, batch_dims=1)
  return tf.reshape(rows, [-1, width])


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions,
                         label_ids, label_weights):
  """Google's masked-LM head and loss.

  The rows at `positions` go through a dense layer with the config's
  activation and a LayerNorm ("cls/predictions/transform"), then through
  the transposed word embedding table plus a bias of its own
  ("cls/predictions/output_bias") to logits over the vocabulary. The loss
  is the cross-entropy of each position, weighted by `label_weights` (0 for
  the padding positions of a record with fewer masked tokens), summed and
  divided by the sum of the weights plus 1e-5.

  The matmuls run in the dtype of `input_tensor` (the encoder's compute
  dtype), as the encoder's do: in bf16 or fp16 the output layer is the
  largest matmul of a small model's step, and float32 would make it cost
  more than its FLOPs. LayerNorm statistics, the logits' bias, the softmax
  and the loss are float32.

  Args:
    bert_config: modeling.BertConfig.
    input_tensor: [batch, seq_length, hidden] sequence output (float32,
      bfloat16 or float16).
    output_weights: the float32 [vocab_size, hidden] word embedding table.
    positions, label_ids: int32 [batch, max_predictions_per_seq].
    label_weights: float32 [batch, max_predictions_per_seq].

  Returns:
    (loss scalar, per-position loss [batch * max_predictions_per_seq],
     log-probabilities [batch * max_predictions_per_seq, vocab_size]).
  """
  rows = gather_indexes(input_tensor, positions)
  with tf.compat.v1.variable_scope("cls/predictions"):
    with tf.compat.v1.variable_scope("transform"):
      rows = modeling.dense(
          rows, bert_config.hidden_size, "dense",
          activation=modeling.get_activation(bert_config.hidden_act),
          kernel_initializer=modeling.create_initializer(
              bert_config.initializer_range))
      rows = modeling.layer_norm(rows)
    output_bias = tf.compat.v1.get_variable(
        "output_bias", shape=[bert_config.vocab_size],
        initializer=tf.compat.v1.zeros_initializer())
    # Without the bias, in the compute dtype: the loss adds the bias itself.
    unbiased_logits = tf.matmul(rows, tf.cast(output_weights, rows.dtype),
                                transpose_b=True)
    # Only evaluation reads these; a training step never computes them.
    log_probs = tf.nn.log_softmax(
        tf.nn.bias_add(tf.cast(unbiased_logits, tf.float32), output_bias),
        axis=-1)
    label_ids = tf.reshape(label_ids, [-1])
    label_weights = tf.reshape(label_weights, [-1])
    # -log_softmax(logits)[label], as Google's one-hot sum computes it,
    # without a [positions, vocab_size] one-hot matrix and its product.
    per_example_loss = lean_gradients.softmax_cross_entropy(
        unbiased_logits, output_bias, label_ids)
    numerator = tf.reduce_sum(label_weights * per_example_loss)
    denominator = tf.reduce_sum(label_weights) + WEIGHT_EPSILON
    loss = numerator / denominator
  return loss, per_example_loss, log_probs


def get_next_sentence_output(bert_config, input_tensor, labels):
  """Google's next-sentence head and loss, in float32.

  A two-way classifier on the pooled output ("cls/seq_relationship"); label
  0 means sentence B follows A in the text, 1 that B is a random sentence.

  Args:
    bert_config: modeling.BertConfig.
    input_tensor: [batch, hidden] pooled output (any float dtype).
    labels: int32 [batch, 1] or [batch].

  Returns:
    (mean loss, per-example loss [batch], log-probabilities [batch, 2]).
  """
  input_tensor = tf.cast(input_tensor, tf.float32)
  with tf.compat.v1.variable_scope("cls/seq_relationship"):
    output_weights = tf.compat.v1.get_variable(
        "output_weights", shape=[2, bert_config.hidden_size],
        initializer=modeling.create_initializer(
            bert_config.initializer_range))
    output_bias = tf.compat.v1.get_variable(
        "output_bias", shape=[2], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.nn.bias_add(
        tf.matmul(input_tensor, output_weights, transpose_b=True),
        output_bias)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot_labels = tf.one_hot(tf.reshape(labels, [-1]), depth=2,
                                dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
    return tf.reduce_mean(per_example_loss), per_example_loss, log_probs


def metric_ops(masked_lm_example_loss, masked_lm_log_probs, masked_lm_ids,
               masked_lm_weights, next_sentence_example_loss,
               next_sentence_log_probs, next_sentence_labels):
  """Google's streaming eval metrics: name -> (value, update op).

  Masked-LM accuracy and mean loss are weighted by `masked_lm_weights`
  (padding positions do not count); the next-sentence ones count every
  example.
  """
  masked_lm_predictions = tf.argmax(
      tf.reshape(masked_lm_log_probs, [-1, masked_lm_log_probs.shape[-1]]),
      axis=-1, output_type=tf.int32)
  masked_lm_weights = tf.reshape(masked_lm_weights, [-1])
  next_sentence_predictions = tf.argmax(
      tf.reshape(next_sentence_log_probs,
                 [-1, next_sentence_log_probs.shape[-1]]),
      axis=-1, output_type=tf.int32)
  metrics = tf.compat.v1.metrics
  return {
      "masked_lm_accuracy": metrics.accuracy(
          labels=tf.reshape(masked_lm_ids, [-1]),
          predictions=masked_lm_predictions, weights=masked_lm_weights),
      "masked_lm_loss": metrics.mean(
          values=tf.reshape(masked_lm_example_loss, [-1]),
          weights=masked_lm_weights),
      "next_sentence_accuracy": metrics.accuracy(
          labels=tf.reshape(next_sentence_labels, [-1]),
          predictions=next_sentence_predictions),
      "next_sentence_loss": metrics.mean(values=next_sentence_example_loss),
  }


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     gradient_checkpointing=False,
                     compute_dtype=tf.float32):
  """Builds the model_fn(features, labels, mode, params) the runner calls.

  The encoder and the masked-LM head's matmuls run in `compute_dtype`; the
  next-sentence head, the softmaxes and the losses in float32. float16
  trains with dynamic loss scaling.
  """

  def model_fn(features, labels, mode, params):
    """The TRAIN or EVAL graph of BERT with both pretraining heads; the
    accumulation steps come in `params` (training_graph.train_op)."""
    del labels  # The runner's signature; labels travel in `features`.
    if verbosity.details():
      logging.info("*** Features ***")
      for name in sorted(features.keys()):
        logging.info("  name = %s, shape = %s", name, features[name].shape)

    is_training = (mode == estimator_lib.ModeKeys.TRAIN)
    model = modeling.BertModel(
        config=bert_config,
        is_training=is_training,
        input_ids=features["input_ids"],
        input_mask=features["input_mask"],
        token_type_ids=features["segment_ids"],
        use_one_hot_embeddings=use_one_hot_embeddings,
        gradient_checkpointing=gradient_checkpointing,
        compute_dtype=compute_dtype)
    (masked_lm_loss, masked_lm_example_loss,
     masked_lm_log_probs) = get_masked_lm_output(
         bert_config, model.get_sequence_output(),
         model.get_embedding_table(), features["masked_lm_positions"],
         features["masked_lm_ids"], features["masked_lm_weights"])
    (next_sentence_loss, next_sentence_example_loss,
     next_sentence_log_probs) = get_next_sentence_output(
         bert_config, model.get_pooled_output(),
         features["next_sentence_labels"])
    total_loss = masked_lm_loss + next_sentence_loss

    training_graph.init_from_checkpoint(init_checkpoint)

    if mode == estimator_lib.ModeKeys.TRAIN:
      train_op = training_graph.train_op(
          total_loss, learning_rate, num_train_steps, num_warmup_steps,
          use_tpu, params=params,
          optimizer=optimizer, compute_dtype=compute_dtype)
      return estimator_lib.EstimatorSpec(mode=mode, loss=total_loss,
                                         train_op=train_op)
    if mode == estimator_lib.ModeKeys.EVAL:
      return estimator_lib.EstimatorSpec(
          mode=mode, loss=total_loss, eval_metric_ops=metric_ops(
              masked_lm_example_loss, masked_lm_log_probs,
              features["masked_lm_ids"], features["masked_lm_weights"],
              next_sentence_example_loss, next_sentence_log_probs,
              features["next_sentence_labels"]))
    raise ValueError("run_pretraining's model_fn trains and evaluates only; "
                     "got mode %r." % mode)

  return model_fn


# --------------------------------------------------------------------- main


def _check_flags():
  """The script's own flags, before anything is read."""
  if not (FLAGS.do_train or FLAGS.do_eval):
    raise cli.UserError("Nothing to do: pass --do_train, --do_eval or both.")
  if not 1 <= FLAGS.max_predictions_per_seq <= FLAGS.max_seq_length:
    raise cli.UserError(
        "--max_predictions_per_seq=%d must be between 1 and --max_seq_length"
        "=%d; pass the value create_pretraining_data.py was run with (20 at "
        "128 tokens, 80 at 512)." % (FLAGS.max_predictions_per_seq,
                                     FLAGS.max_seq_length))
  if FLAGS.do_train:
    if FLAGS.num_train_steps < 1:
      raise cli.UserError("--num_train_steps=%d must be at least 1." %
                          FLAGS.num_train_steps)
    if not 0 <= FLAGS.num_warmup_steps <= FLAGS.num_train_steps:
      raise cli.UserError(
          "--num_warmup_steps=%d must be between 0 and --num_train_steps=%d "
          "(Google's recipe warms up over the first 10%%)." % (
              FLAGS.num_warmup_steps, FLAGS.num_train_steps))
  if FLAGS.eval_all_checkpoints and not FLAGS.do_eval:
    raise cli.UserError("--eval_all_checkpoints evaluates only with "
                        "--do_eval; add --do_eval.")
  if FLAGS.do_eval and FLAGS.max_eval_steps < 1:
    raise cli.UserError("--max_eval_steps=%d must be at least 1." %
                        FLAGS.max_eval_steps)


def _record(shared, records_vocab):
  """The run_info.json of this run (checkpoints/run_info.py): no casing
  (the records hold token ids), the record layout's two lengths, and the
  vocabulary: --vocab_file's (copied beside the checkpoints), else the
  sha256 the records' sidecars name, so that resuming on records of
  another vocabulary is refused."""
  extra = {}
  if records_vocab and not shared.vocab_file:
    extra["vocab_sha256"] = records_vocab
  return run_info.make_record(
      "pretraining", None, None, shared.max_seq_length,
      shared.bert_config_file, shared.vocab_file,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq, **extra)


def _evaluate(shared, estimator, input_files):
  """Runs --max_eval_steps eval batches on the newest checkpoint (or, with
  --eval_all_checkpoints, on each kept one) and writes eval_results.txt."""
  checkpoints = [None]  # None: the newest, or the initial values
  if FLAGS.eval_all_checkpoints:
    checkpoints = checkpoint_checks.checkpoints_in(
        shared.output_dir, include_unlisted=True) or [None]
  logging.info("***** Running evaluation *****")
  logging.info("  Batch size = %d, checkpoints = %d", FLAGS.eval_batch_size,
               len(checkpoints))
  history = []
  for checkpoint in checkpoints:
    history.append(estimator.evaluate(
        input_fn=input_fn_builder(input_files, shared.max_seq_length,
                                  FLAGS.max_predictions_per_seq,
                                  is_training=False),
        steps=FLAGS.max_eval_steps, checkpoint_path=checkpoint))
  result = history[-1]
  logging.info("***** Eval results *****")
  for key in sorted(result):
    logging.info("  %s = %s", key, str(result[key]))
  output_files.write_eval_results(
      os.path.join(shared.output_dir, "eval_results.txt"), result,
      flag="--output_dir")
  if FLAGS.eval_all_checkpoints:
    _write_eval_history(os.path.join(shared.output_dir, "eval_history.tsv"),
                        history)


def _write_eval_history(path, history):
  """One tab-separated row per evaluated checkpoint: global_step first,
  then the metrics in eval_results.txt's (sorted) order."""
  keys = ["global_step"] + sorted(k for k in history[0] if k != "global_step")
  rows = ["\t".join(keys)] + ["\t".join(str(r[k]) for k in keys)
                              for r in history]
  output_files.write_text(path, "\n".join(rows) + "\n", flag="--output_dir")


def main(_):
  _check_flags()
  shared, bert_config, _ = run_setup.start(
      shared_flags.read(FLAGS), do_train=FLAGS.do_train,
      min_seq_length=text_pair.MIN_SEQ_LENGTH_PAIR, vocab_required=False)
  input_files, records_vocab = check_input_files(
      FLAGS.input_file, shared.max_seq_length, FLAGS.max_predictions_per_seq,
      bert_config, shared.bert_config_file, shared.vocab_file)
  record = _record(shared, records_vocab)
  run_setup.check_output_dir(shared.output_dir, record, do_train=FLAGS.do_train)
  setup = run_setup.set_up(
      shared, bert_config, do_train=FLAGS.do_train, record=record,
      step_memory=memory_model.BertMemory(
          bert_config, shared.max_seq_length, shared.optimizer,
          max_predictions_per_seq=FLAGS.max_predictions_per_seq),
      heads=checkpoint_checks.pretraining_head_shapes(bert_config))

  model_fn = model_fn_builder(
      bert_config=bert_config,
      init_checkpoint=shared.init_checkpoint,
      learning_rate=shared.learning_rate,
      num_train_steps=FLAGS.num_train_steps,
      num_warmup_steps=FLAGS.num_warmup_steps,
      use_tpu=shared.use_tpu,
      use_one_hot_embeddings=shared.use_tpu,
      optimizer=shared.optimizer,
      gradient_checkpointing=setup.gradient_checkpointing,
      compute_dtype=setup.compute_dtype)
  estimator = estimator_lib.Estimator(
      model_fn=model_fn, config=setup.run_config,
      train_batch_size=shared.train_batch_size,
      eval_batch_size=FLAGS.eval_batch_size)

  if FLAGS.do_train:
    logging.info("***** Running training *****")
    logging.info("  Batch size = %d", shared.train_batch_size)
    estimator.train(
        input_fn=input_fn_builder(input_files, shared.max_seq_length,
                                  FLAGS.max_predictions_per_seq,
                                  is_training=True, seed=shared.seed),
        max_steps=FLAGS.num_train_steps)
  if not estimator.config.is_chief:
    logging.info("This worker's training is done; the chief evaluates.")
    return
  if FLAGS.do_eval:
    _evaluate(shared, estimator, input_files)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("output_dir")
  cli.run(main)
