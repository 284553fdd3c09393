# coding=utf-8
"""Pre-training: the masked LM and next-sentence objectives.

The task of run_pretraining.py. It reads the TFRecord files of
create_pretraining_data.py (Google's record layout), checked before
training by their first record and their sidecars, trains the encoder with
Google's two heads (cls/predictions, whose output projection is the word
embedding table, and cls/seq_relationship) and evaluates the masked-LM and
next-sentence accuracy and loss. The variable names, losses and metrics
are those of Google's run_pretraining.py.
"""

import os

import tensorflow as tf

from checkpoints import checkpoint_checks
from checkpoints import run_info
from corpus import record_sidecars
from engine import lean_gradients
from memory import memory_model
import modeling
from runner import estimator as estimator_lib
from runner import tfrecord_input
from runner import training_graph
from tasks import task
from tasks import text_pair
from userio import cli
from userio import verbosity

TASK_NAME = "pretraining"
# Files read at once by the training input (Google's num_cpu_threads).
NUM_CPU_THREADS = 4
# Added to the sum of the masked-LM weights, as in Google's loss, so that a
# batch without any masked position divides by a nonzero number.
WEIGHT_EPSILON = 1e-5


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


def expand_input_files(input_file, flag="--input_file"):
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
          "%s: %s is a folder; pass the TFRecord files in it "
          "(e.g. %s)." % (flag, pattern, os.path.join(pattern, "*.tfrecord")))
    if not matches:
      raise cli.UserError(
          "%s: %s matches no file; pass the TFRecord files that "
          "create_pretraining_data.py wrote (comma-separated paths or "
          "globs)." % (flag, pattern))
    files.extend(matches)
  if not files:
    raise cli.UserError("%s names no file; pass the TFRecord "
                        "files that create_pretraining_data.py wrote." % flag)
  return files


def _first_record(path, flag):
  """The first serialized record of `path`, or None; UserError if the file
  is not a TFRecord file."""
  try:
    return tfrecord_input.first_record(path)
  except ValueError as e:
    raise cli.UserError(
        "%s: %s is not a TFRecord file (%s); pass the files that "
        "create_pretraining_data.py wrote." % (flag, path, e)) from None


def _length_fix(feature_name, max_seq_length, max_predictions_per_seq):
  """(flag, its value) that sets the length of `feature_name`."""
  if feature_name.startswith("masked_lm_"):
    return "max_predictions_per_seq", max_predictions_per_seq
  if feature_name == "next_sentence_labels":
    return None, 1
  return "max_seq_length", max_seq_length


def _check_feature(path, name, feature, spec, max_seq_length,
                   max_predictions_per_seq, flag):
  """One feature of a record of `flag`'s file `path` against its
  FixedLenFeature `spec`."""
  kind = "float_list" if spec.dtype == tf.float32 else "int64_list"
  if feature.WhichOneof("kind") != kind:
    raise cli.UserError(
        "%s: %s: feature %s of the first record is not a %s; "
        "these are not records of create_pretraining_data.py." % (
            flag, path, name, kind))
  found = len(getattr(feature, kind).value)
  length_flag, expected = _length_fix(name, max_seq_length,
                                      max_predictions_per_seq)
  if found == expected:
    return
  if length_flag is None:
    raise cli.UserError(
        "%s: %s: %s of the first record holds %d values, not 1; "
        "these are not records of create_pretraining_data.py." % (
            flag, path, name, found))
  raise cli.UserError(
      "%s: %s holds records with %d %s values, but --%s=%d; pass "
      "--%s=%d, the value create_pretraining_data.py was run with (or "
      "records made with %d)." % (flag, path, found, name, length_flag,
                                  expected, length_flag, found, expected))


def check_record_file(path, max_seq_length, max_predictions_per_seq,
                      vocab_size, flag="--input_file"):
  """Reads the first record of `path` and checks it against the flags.

  Its features, their types and lengths must be Google's pretraining
  record's for --max_seq_length / --max_predictions_per_seq, and its token
  ids must be below the config's vocab_size.

  Raises:
    cli.UserError naming the file and the flag or fix.
  """
  record = _first_record(path, flag)
  if record is None:
    raise cli.UserError(
        "%s: %s holds no records; rerun create_pretraining_data.py "
        "for it or leave it out." % (flag, path))
  try:
    example = tf.train.Example.FromString(record)
  except Exception:  # pylint: disable=broad-except
    # protobuf's DecodeError has no stable import path.
    raise cli.UserError(
        "%s: %s holds records that are not tf.train.Examples; pass "
        "the files that create_pretraining_data.py wrote." % (
            flag, path)) from None
  features = example.features.feature
  for name, spec in record_features(max_seq_length,
                                    max_predictions_per_seq).items():
    if name not in features:
      raise cli.UserError(
          "%s: %s: the first record has no feature %s (it has %s); "
          "pass the files that create_pretraining_data.py wrote." % (
              flag, path, name, ", ".join(sorted(features)) or "none"))
    _check_feature(path, name, features[name], spec, max_seq_length,
                   max_predictions_per_seq, flag)
  ids = (list(features["input_ids"].int64_list.value) +
         list(features["masked_lm_ids"].int64_list.value))
  if max(ids) >= vocab_size or min(ids) < 0:
    raise cli.UserError(
        "%s: %s holds token id %d, outside the vocab_size=%d of "
        "--bert_config_file; the records were made with another vocabulary "
        "than the model's." % (flag, path, max(ids) if max(ids) >= vocab_size
                               else min(ids), vocab_size))


def check_input_files(input_file, max_seq_length, max_predictions_per_seq,
                      bert_config, bert_config_file=None, vocab_file=None,
                      flag="--input_file"):
  """The files of --input_file, each checked by its first record against
  --max_seq_length, --max_predictions_per_seq and the config's vocabulary,
  and by its sidecar (corpus/record_sidecars.py) against the config's
  vocab_size and --vocab_file.

  Returns:
    (list of paths, sha256 of the vocabulary the records' sidecars name, or
    None when they name none).
  """
  input_files = expand_input_files(input_file, flag)
  # The sidecars first: they say which vocabulary, where a token id out of
  # range only says that it is another one.
  records_vocab = record_sidecars.vocabulary_of(
      input_files, bert_config.vocab_size, bert_config_file, vocab_file)
  for path in input_files:
    check_record_file(path, max_seq_length, max_predictions_per_seq,
                      bert_config.vocab_size, flag)
  return input_files, records_vocab


def input_lines(input_files):
  """The lines that name the records a run reads: all of them (as Google's
  script listed them) with -v 1, else how many and the first."""
  if verbosity.details():
    return ["*** Input Files ***"] + ["  %s" % path for path in input_files]
  return ["Input: %d file(s): %s%s" % (
      len(input_files), input_files[0],
      ", ..." if len(input_files) > 1 else "")]


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


def pretraining_head(bert_config, features, mode, settings):
  """Google's model_fn body as runner/training_graph.model_fn_builder calls
  a head: the encoder and masked-LM matmuls in the compute dtype, the
  next-sentence head, the softmaxes and the losses in float32; TRAIN and
  EVAL (`metric_ops`) only."""
  if mode == estimator_lib.ModeKeys.PREDICT:
    raise ValueError("Pre-training trains and evaluates only; got mode %r."
                     % mode)
  model = modeling.BertModel(
      config=bert_config,
      is_training=mode == estimator_lib.ModeKeys.TRAIN,
      input_ids=features["input_ids"],
      input_mask=features["input_mask"],
      token_type_ids=features["segment_ids"],
      use_one_hot_embeddings=settings.use_one_hot_embeddings,
      gradient_checkpointing=settings.gradient_checkpointing,
      compute_dtype=settings.compute_dtype)
  (masked_lm_loss, masked_lm_example_loss,
   masked_lm_log_probs) = get_masked_lm_output(
       bert_config, model.get_sequence_output(), model.get_embedding_table(),
       features["masked_lm_positions"], features["masked_lm_ids"],
       features["masked_lm_weights"])
  (next_sentence_loss, next_sentence_example_loss,
   next_sentence_log_probs) = get_next_sentence_output(
       bert_config, model.get_pooled_output(),
       features["next_sentence_labels"])
  total_loss = masked_lm_loss + next_sentence_loss
  if mode == estimator_lib.ModeKeys.TRAIN:
    return training_graph.ModelOutputs(total_loss)
  return training_graph.ModelOutputs(total_loss, eval_metric_ops=metric_ops(
      masked_lm_example_loss, masked_lm_log_probs, features["masked_lm_ids"],
      features["masked_lm_weights"], next_sentence_example_loss,
      next_sentence_log_probs, features["next_sentence_labels"]))


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, use_tpu,
                     use_one_hot_embeddings, *, optimizer="adamw",
                     gradient_checkpointing=False,
                     compute_dtype=tf.float32):
  """Builds the model_fn(features, labels, mode, params) the runner calls:
  `pretraining_head` in runner/training_graph.py's model_fn. float16
  trains with dynamic loss scaling."""
  return training_graph.model_fn_builder(
      lambda features, mode, settings: pretraining_head(
          bert_config, features, mode, settings),
      training_graph.ModelSettings(
          bert_config, init_checkpoint, learning_rate, num_train_steps,
          num_warmup_steps, use_tpu, use_one_hot_embeddings, optimizer,
          gradient_checkpointing, compute_dtype))


class PretrainingTask(task.Task):
  """Google's pre-training records (--input_file) and its two heads."""

  name = TASK_NAME
  min_seq_length = text_pair.MIN_SEQ_LENGTH_PAIR
  reads_text = False
  heads_are_new = False

  def __init__(self, input_file, *, max_predictions_per_seq=20,
               num_train_steps=100000, num_warmup_steps=10000,
               max_eval_steps=100, eval_input_file=None):
    """Args:
      input_file: --input_file, comma-separated paths or globs.
      max_predictions_per_seq: the records' masked positions per sequence.
      num_train_steps, num_warmup_steps: the updates and the warm-up.
      max_eval_steps: eval batches to run.
      eval_input_file: records to evaluate on, in --input_file's form;
        None: --input_file's, as Google's script evaluates.
    """
    super().__init__()
    self.input_file = input_file
    self.max_predictions_per_seq = max_predictions_per_seq
    self.num_train_steps = num_train_steps
    self.num_warmup_steps = num_warmup_steps
    self.max_eval_steps = max_eval_steps
    self.eval_input_file = eval_input_file
    self.input_files = None
    self.eval_input_files = None
    self.records_vocab = None

  def start(self, flags, bert_config, tokenizer):
    """Checks the flags against each other, then every input file by its
    first record and its sidecar."""
    super().start(flags, bert_config, tokenizer)
    self._check_flags()
    self.input_files, self.records_vocab = check_input_files(
        self.input_file, flags.max_seq_length, self.max_predictions_per_seq,
        bert_config, flags.bert_config_file, flags.vocab_file)
    self.eval_input_files = self.input_files
    if self.eval_input_file and flags.do_eval:
      self.eval_input_files, _ = check_input_files(
          self.eval_input_file, flags.max_seq_length,
          self.max_predictions_per_seq, bert_config, flags.bert_config_file,
          flags.vocab_file, flag="--eval_input_file")

  def settings_lines(self):
    return input_lines(self.input_files)

  def record(self):
    """No casing (the records hold token ids), the record layout's two
    lengths, and the vocabulary: --vocab_file's (copied beside the
    checkpoints), else the sha256 the records' sidecars name, so that
    resuming on records of another vocabulary is refused."""
    extra = {}
    if self.records_vocab and not self.flags.vocab_file:
      extra["vocab_sha256"] = self.records_vocab
    return run_info.make_record(
        self.name, None, None, self.flags.max_seq_length,
        self.flags.bert_config_file, self.flags.vocab_file,
        max_predictions_per_seq=self.max_predictions_per_seq, **extra)

  def read_data(self):
    """The records were checked at `start`."""

  def train_steps(self):
    return self.num_train_steps, self.num_warmup_steps

  def step_memory(self):
    return memory_model.BertMemory(
        self.bert_config, self.flags.max_seq_length, self.flags.optimizer,
        max_predictions_per_seq=self.max_predictions_per_seq)

  def head_shapes(self):
    return checkpoint_checks.pretraining_head_shapes(self.bert_config)

  def head(self, features, mode, settings):
    return pretraining_head(self.bert_config, features, mode, settings)

  def train_input_fn(self):
    return self._input_fn(is_training=True), []

  def evaluate(self, estimator, checkpoint_path=None):
    """--max_eval_steps eval batches of --eval_input_file (else
    --input_file) on `checkpoint_path` (None: the newest checkpoint)."""
    task.log_block("Running evaluation", [
        "Batch size = %d, batches = %d" % (self.flags.eval_batch_size,
                                           self.max_eval_steps)])
    return task.Metrics(estimator.evaluate(
        input_fn=self._input_fn(is_training=False),
        steps=self.max_eval_steps, checkpoint_path=checkpoint_path),
                        task.EVAL_RESULTS_FILE, summaries=None)

  def eval_metric_names(self):
    return ["masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
            "next_sentence_loss", "loss"]

  def _input_fn(self, is_training):
    return input_fn_builder(self.input_files if is_training else
                            self.eval_input_files, self.flags.max_seq_length,
                            self.max_predictions_per_seq,
                            is_training=is_training,
                            seed=self.flags.seed if is_training else None)

  def _check_flags(self):
    """The task's settings against the run's flags."""
    flags = self.flags
    if not 1 <= self.max_predictions_per_seq <= flags.max_seq_length:
      raise cli.UserError(
          "--max_predictions_per_seq=%d must be between 1 and "
          "--max_seq_length=%d; pass the value create_pretraining_data.py "
          "was run with (20 at 128 tokens, 80 at 512)." % (
              self.max_predictions_per_seq, flags.max_seq_length))
    if flags.do_train:
      if self.num_train_steps < 1:
        raise cli.UserError("--num_train_steps=%d must be at least 1." %
                            self.num_train_steps)
      if not 0 <= self.num_warmup_steps <= self.num_train_steps:
        raise cli.UserError(
            "--num_warmup_steps=%d must be between 0 and --num_train_steps=%d "
            "(Google's recipe warms up over the first 10%%)." % (
                self.num_warmup_steps, self.num_train_steps))
    if self.eval_input_file and not flags.do_eval:
      raise cli.UserError("--eval_input_file holds records to evaluate on; "
                          "add --do_eval.")
    if flags.do_eval and self.max_eval_steps < 1:
      raise cli.UserError("--max_eval_steps=%d must be at least 1." %
                          self.max_eval_steps)
