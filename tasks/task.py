# coding=utf-8
"""What a training task is to the driver, and what the tasks share.

A training command is its flags and one `Task`. The driver
(driver/training.py) owns what every command does alike (start-up, the
output folder and its lock, the steps, the Estimator, training,
evaluation, prediction and export, the chief's work, the report); a task
holds what is particular to it and is called in this order:

    task.start(flags, bert_config, tokenizer)   checks needing the config
    task.record()                               the run's run_info.json
    task.settings_lines()                       logged once all checks pass
    task.read_data()                            every requested set, read
                                                and checked before anything
                                                slow starts
    task.train_steps()                          updates and warm-up updates
    task.step_memory(), task.head_shapes()      for the memory plan and the
                                                checkpoint checks
    task.head(features, mode, settings)         the model on a batch
                                                (runner/training_graph.py)
    task.train_input_fn()                       the training features
    task.eval_metric_names()                    what evaluate reports
    task.evaluate(estimator, checkpoint_path)   dev-set metrics, or None
                                                (once, or per checkpoint
                                                scored during training)
    task.on_best_checkpoint(metrics)            a new best checkpoint
    task.predict(estimator, checkpoint_path)    prediction files (metrics
                                                when the set has answers)
    task.serving_input_receiver_fn()            the export's inputs

`flags` is the run's startup.shared_flags.SharedFlags; a task's own
settings come to its constructor as named values.
"""

import collections
import os
import random

from absl import logging

from checkpoints import run_info
from memory import memory_model
from runner import feature_cache
from serving import graph_tokenizer
from tasks import text_pair
from userio import cli
from userio import file_systems
from userio import output_files

# The sets of data a run reads, and the flag of the action that reads each.
TRAIN, DEV, TEST = "train", "dev", "test"
ACTION_FLAGS = {TRAIN: "--do_train", DEV: "--do_eval", TEST: "--do_predict"}
# The flag that names each set's file, where a script takes files rather
# than a folder.
FILE_FLAGS = {TRAIN: "--train_file", DEV: "--dev_file", TEST: "--predict_file"}
# Where the metrics of the dev set go in --output_dir, as Google's scripts
# write them.
EVAL_RESULTS_FILE = "eval_results.txt"

Metrics = collections.namedtuple(
    "Metrics", ["values", "file_name", "summaries", "report"],
    defaults=(None,))
Metrics.__doc__ = """Metrics a task computed, for the driver to report.

  values: dict name -> number, with "global_step" when a checkpoint was
    evaluated.
  file_name: where in --output_dir the driver writes them
    (output_files.write_eval_results), e.g. "eval_results.txt"; None when
    the task wrote its own file.
  summaries: the folder of --output_dir for their TensorBoard scalars
    (e.g. "eval"); None when the runner's evaluate wrote them already.
  report: the text to log for them (e.g. conlleval's table); None: Google's
    "***** Eval results *****" block of every value.
"""


class PaddingInputExample(object):
  """Stand-in that fills up the last eval or predict batch.

  Every eval and predict batch holds the same number of examples (Google's
  scripts did this for TPUs; it keeps the batches uniform). A padding
  example becomes all-zero features with `is_real_example` 0: the metrics
  give it weight 0 and the prediction files leave it out.
  """


def pad_to_batch_multiple(examples, batch_size):
  """`examples` followed by PaddingInputExamples up to a multiple of
  `batch_size`."""
  padded = list(examples)
  while len(padded) % batch_size:
    padded.append(PaddingInputExample())
  return padded


def shuffled(items, seed):
  """A copy of `items` permuted with `seed`: the input's shuffle buffer
  only mixes neighbours, and the items of one source (a GLUE file's
  genres, a document's windows) would stay together without it."""
  items = list(items)
  random.Random(seed).shuffle(items)
  return items


def num_train_and_warmup_steps(num_examples, train_batch_size,
                               num_train_epochs, warmup_proportion,
                               data_file=None):
  """(num_train_steps, num_warmup_steps), computed as Google's scripts do.

  Args:
    num_examples: training examples.
    train_batch_size, num_train_epochs, warmup_proportion: the flags.
    data_file: the file the examples came from, named in the message.

  Raises:
    cli.UserError when the flags and data give no training step.
  """
  num_train_steps = int(num_examples / train_batch_size * num_train_epochs)
  if num_train_steps < 1:
    raise cli.UserError(
        "%d training examples%s / --train_batch_size=%d x "
        "--num_train_epochs=%s gives no training step; raise "
        "--num_train_epochs or lower --train_batch_size." % (
            num_examples, " in %s" % data_file if data_file else "",
            train_batch_size, num_train_epochs))
  num_warmup_steps = int(num_train_steps * warmup_proportion)
  return num_train_steps, num_warmup_steps


def check_data_dir(data_dir, fix):
  """Refuses a --data_dir that is not a folder; `fix` says what it should
  hold."""
  if not file_systems.isdir(data_dir):
    raise cli.UserError("--data_dir=%s is not a directory; %s" % (data_dir,
                                                                  fix))


def no_examples_error(path, set_type, fix, unit="examples"):
  """The cli.UserError of a data file that holds nothing for the action
  that reads it."""
  return cli.UserError("%s holds no %s for %s. %s" % (
      path, unit, ACTION_FLAGS[set_type], fix))


def checkpoint_step(estimator, checkpoint_path=None):
  """{"global_step": the step of `checkpoint_path`, else of the estimator's
  newest checkpoint}, or {} without one: what the metrics of a task's own
  evaluation report."""
  checkpoint = checkpoint_path or estimator.latest_checkpoint()
  if not checkpoint:
    return {}
  return {"global_step": int(checkpoint.rsplit("-", 1)[1])}


def log_block(title, lines):
  """Google's log block: "***** <title> *****", then "  <line>" each."""
  logging.info("***** %s *****", title)
  for line in lines:
    logging.info("  %s", line)


class Task(object):
  """The part of a training run that is particular to its task.

  Class attributes a task sets:
    name: the task's name in run_info.json.
    min_seq_length: the shortest --max_seq_length its input fits in.
    reads_text: False for a task that reads token ids, not text (no
      vocabulary needed).
    heads_are_new: whether a pre-trained checkpoint normally lacks the
      variables of `head_shapes` (a fine-tuning task's own head).

  After `start`, `flags`, `bert_config` and `tokenizer` hold the run's
  SharedFlags, modeling.BertConfig and tokenization.FullTokenizer (None
  without a vocabulary).
  """

  name = None
  min_seq_length = text_pair.MIN_SEQ_LENGTH_ONE_TEXT
  reads_text = True
  heads_are_new = True

  def __init__(self):
    self.flags = None
    self.bert_config = None
    self.tokenizer = None
    # Where the training features go: --output_dir (set by `start`), or a
    # folder of its own on a worker of a cluster that is not the chief
    # (which the driver sets after `start`).
    self.work_dir = None

  # Whether the task's export has the "text" signature (serving/), whose
  # op needs tensorflow-text.
  serves_text = False

  def start(self, flags, bert_config, tokenizer):
    """Keeps what the run starts with; a task checks here what needs the
    config (raising cli.UserError)."""
    self.flags = flags
    self.bert_config = bert_config
    self.tokenizer = tokenizer
    self.work_dir = flags.output_dir
    if self.exports_text():
      graph_tokenizer.import_tensorflow_text()  # Fails now, not at the end.

  def exports_text(self):
    """Whether this run's export gets the "text" signature: the task has
    one."""
    return bool(self.serves_text and self.flags.export_dir)

  def graph_tokenizer_fn(self):
    """callable () -> the run's tokenizer as graph ops
    (serving.graph_tokenizer.for_model: WordPiece or SentencePiece)."""
    return lambda: graph_tokenizer.for_model(
        self.flags.vocab_file, self.flags.do_lower_case,
        self.flags.spm_model_file)

  def settings_lines(self):
    """Lines saying what the task settled (its problem type, labels...),
    which the driver logs with the run's settings once every check has
    passed: a run refused for bad input prints its one line alone."""
    return []

  def record(self):
    """The run_info.json record of this run (checkpoints/run_info.py)."""
    raise NotImplementedError()

  def read_data(self):
    """Reads and checks the data of every set the run asks for
    (`sets_to_read`), so that a bad file ends the run before anything
    slow."""
    raise NotImplementedError()

  def sets_to_read(self):
    """The sets (TRAIN, DEV, TEST) of the run's actions, in that order."""
    return [set_type for set_type, action in (
        (TRAIN, self.flags.do_train), (DEV, self.flags.do_eval),
        (TEST, self.flags.do_predict)) if action]

  def make_record(self, labels, **extra):
    """run_info.make_record of this task's name, `labels` (None: none),
    the run's casing, length, config and vocabulary, and `extra`."""
    return run_info.make_record(
        self.name, labels, self.flags.do_lower_case,
        self.flags.max_seq_length, self.flags.bert_config_file,
        self.flags.vocab_file, self.flags.spm_model_file, **extra)

  def num_train_examples(self):
    """(number of training examples, the file they came from)."""
    raise NotImplementedError()

  def train_steps(self):
    """(num_train_steps, num_warmup_steps) of a training run: the epochs
    over the training examples."""
    num_examples, data_file = self.num_train_examples()
    return num_train_and_warmup_steps(
        num_examples, self.flags.train_batch_size,
        self.flags.num_train_epochs, self.flags.warmup_proportion, data_file)

  def step_memory(self):
    """What a training step keeps in memory, for the memory planner."""
    return memory_model.BertMemory(self.bert_config,
                                   self.flags.max_seq_length,
                                   self.flags.optimizer)

  def head_shapes(self):
    """(name, shape) of the variables the task adds to BERT, which
    --init_checkpoint may lack (checkpoint_checks.check_checkpoints)."""
    return ()

  def head(self, features, mode, settings):
    """The model on a batch: runner/training_graph.ModelOutputs."""
    raise NotImplementedError()

  def train_input_fn(self):
    """Writes (or reuses) the training features.

    Returns:
      (input_fn, lines): the training input_fn and what to log of the
      training set (e.g. "Num examples = 3668").
    """
    raise NotImplementedError()

  def evaluate(self, estimator, checkpoint_path=None):
    """Evaluates `checkpoint_path` (None: the newest checkpoint of
    --output_dir) on the dev set: Metrics, or None. Called again for each
    checkpoint a run scores: what it prepares once, it keeps."""
    raise NotImplementedError()

  def eval_metric_names(self):
    """The names of the metrics `evaluate` reports, the task's headline
    metric first (the default --best_metric); called after `read_data`."""
    raise NotImplementedError()

  def on_best_checkpoint(self, metrics):
    """Called when evaluations make a checkpoint the run's best, with its
    metrics (name -> number): a task records here what it tuned on the
    dev set for that checkpoint."""
    del metrics  # Most tasks tune nothing.

  def predict(self, estimator, checkpoint_path=None):
    """Predicts the test set with `checkpoint_path` (None: the newest) and
    writes the prediction files: Metrics when the set has answers to
    score, else None."""
    raise NotImplementedError()

  def serving_input_receiver_fn(self):
    """The serving input of the export (runner/serving_input.py)."""
    raise NotImplementedError()

  def prepare_features(self, file_name, data_files, num_records, write, *,
                       record_format, what="features", **fingerprint):
    """A feature file in `work_dir`, reused when its sidecar vouches for it
    (runner/feature_cache.py), else written.

    Args:
      file_name: the file's name in `work_dir`.
      data_files: the data files its records are made from.
      num_records: how many records it holds.
      write: callable(path, depends_on) that writes the file through
        feature_cache.FeatureFile(path, ..., depends_on=depends_on).
      record_format: the task's record layout version.
      what: what its records are, for the log ("features", "windows").
      **fingerprint: the rest the records depend on (their order, the
        windows' stride, ...).

    Returns:
      The file's path.
    """
    path = os.path.join(self.work_dir, file_name)
    depends_on = feature_cache.fingerprint(
        data_files, self.flags.spm_model_file or self.flags.vocab_file,
        self.flags.do_lower_case, self.flags.max_seq_length, self.name,
        num_records, record_format=record_format, **fingerprint)
    feature_cache.prepare(path, depends_on, lambda: write(path, depends_on),
                          what=what)
    return path

  def training_order(self, examples, train_example_order):
    """(the training examples in `train_example_order`, what their feature
    file's fingerprint says of the order): "shuffled" permutes them with
    --seed, "file" keeps the data file's order."""
    order = {"example_order": train_example_order}
    if train_example_order == feature_cache.SHUFFLED:
      examples = shuffled(examples, self.flags.seed)
      order["shuffle_seed"] = self.flags.seed
    return examples, order

  def padded_features(self, examples, batch_size, prepare, title,
                      unit="examples"):
    """(`examples` padded to whole batches of `batch_size`, the path that
    prepare(padded examples) returns: their feature file), logged under
    `title` as Google's scripts log an evaluation or a prediction."""
    padded = pad_to_batch_multiple(examples, batch_size)
    path = prepare(padded)
    log_block(title, [
        "Num %s = %d (%d actual, %d padding)" % (
            unit, len(padded), len(examples), len(padded) - len(examples)),
        "Batch size = %d" % batch_size])
    return padded, path

  def write_output(self, file_name, text):
    """Writes `text` to file_name in --output_dir, whole or not at all."""
    output_files.write_text(os.path.join(self.flags.output_dir, file_name),
                            text, flag="--output_dir")
