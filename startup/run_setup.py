# coding=utf-8
"""From the shared flags' values to the run a training script makes.

`start` checks everything that costs nothing (startup/checks.py) and
returns the flags with --precision=auto resolved and a Hugging Face
--init_checkpoint replaced by its conversion; `check_output_dir` refuses
an --output_dir whose run_info.json contradicts this run; `set_up` makes
the output directory, takes its lock for the rest of the run (in a
multi-worker cluster only the chief, which writes there, takes it),
checks the checkpoints and makes the `RunSetup`: the distribution
strategy, the memory settings (memory/memory_settings.py), the
out-of-memory advice and the runner's RunConfig. They raise cli.UserError
for bad input and never exit.
"""

import collections
import dataclasses
import os

from absl import logging
import tensorflow as tf

from checkpoints import checkpoint_checks
from checkpoints import conversion
from checkpoints import run_info
from memory import memory_model
from memory import memory_settings
from memory import out_of_memory
from runner import distribution as distribution_lib
from runner import estimator
from startup import checks
from startup import precision
from userio import folder_lock
from userio import user_errors
from userio import verbosity

class RunSetup(collections.namedtuple(
    "RunSetup", ["distribution", "memory", "run_config", "oom_message_fn",
                 "lock"], defaults=(None,))):
  """What the flags make of a run.

  Fields:
    distribution: the tf.distribute strategy, or None for one device.
    memory: memory_settings.MemorySettings (precision, micro_batch_size,
      num_accumulation_steps, gradient_checkpointing, device, replicas).
    run_config: the estimator.RunConfig (its num_accumulation_steps is
      memory.num_accumulation_steps).
    oom_message_fn: callable(ResourceExhaustedError) -> the out-of-memory
      advice (also in run_config).
    lock: the folder_lock.FolderLock of --output_dir (None on a worker that
      is not the chief); the run keeps it by keeping this RunSetup.
  """

  @property
  def num_accumulation_steps(self):
    return self.memory.num_accumulation_steps

  @property
  def gradient_checkpointing(self):
    return self.memory.gradient_checkpointing

  @property
  def compute_dtype(self):
    return self.memory.compute_dtype


class Start(collections.namedtuple(
    "Start", ["flags", "bert_config", "tokenizer"])):
  """What `start` returns.

  Fields:
    flags: the shared_flags.SharedFlags to run with (a Hugging Face
      --init_checkpoint replaced by its conversion).
    bert_config: modeling.BertConfig of --bert_config_file.
    tokenizer: tokenization.FullTokenizer of the vocabulary flags, or None
      for a script without them.
  """


# Training logs a progress line at least this often (seconds), also between
# the --log_step_count_steps updates: an update of a large model on a CPU
# takes seconds, and a hundred of them would pass without a line.
TRAINING_PROGRESS_SECS = 30.0

def use_hf_init_checkpoint(shared, work_dir):
  """The flags with a Hugging Face model folder as --init_checkpoint
  replaced by its conversion.

  The folder is converted once into `work_dir` (conversion.
  resolve_init_checkpoint caches it by content) and --init_checkpoint
  becomes the converted checkpoint. --bert_config_file and --vocab_file,
  when not given, become the converted ones; --do_lower_case, when not given
  on the command line, becomes the model's casing. Anything else returns
  `shared` unchanged.

  Returns:
    shared_flags.SharedFlags.
  """
  path = shared.init_checkpoint
  if not path or not conversion.is_hf_folder(path):
    return shared
  checks.prepare_output_dir(work_dir)
  prefix = conversion.resolve_init_checkpoint(path, work_dir)
  folder = os.path.dirname(prefix)
  changes = {"init_checkpoint": prefix}
  if not shared.bert_config_file:
    changes["bert_config_file"] = os.path.join(folder, run_info.CONFIG_FILE)
  if "vocab_file" in shared.defined and not (
      shared.vocab_file or shared.spm_model_file):
    changes["vocab_file"] = os.path.join(folder, conversion.VOCAB_FILE)
  if ("do_lower_case" in shared.defined and
      "do_lower_case" not in shared.given):
    changes["do_lower_case"] = run_info.read(folder)["do_lower_case"]
  return dataclasses.replace(shared, **changes)


def start(shared, *, do_train, min_seq_length, vocab_required=True,
          work_dir=None):
  """Logging on; flags, files, config and vocabulary checked.

  Reads the config and the vocabulary, nothing bigger (a Hugging Face
  --init_checkpoint is converted first).

  Args:
    shared: shared_flags.SharedFlags of the command line.
    do_train: whether the run trains.
    min_seq_length: see `checks.check_flags`.
    vocab_required: False for a script whose --vocab_file is optional
      (run_pretraining.py reads token ids; a vocabulary given is checked
      against the config all the same).
    work_dir: where this process writes what it derives (a Hugging Face
      --init_checkpoint's conversion); default --output_dir.

  Returns:
    Start(flags, bert_config, tokenizer).
  """
  verbosity.start_logging()
  checks.check_flags(shared, do_train=do_train, min_seq_length=min_seq_length)
  shared = precision.resolve_precision_flag(shared, do_train=do_train)
  precision.check_cpu_kernels(shared.precision)
  precision.note_slow_precision(shared.precision)
  shared = use_hf_init_checkpoint(shared, work_dir or shared.output_dir)
  checks.check_required_files(shared, do_train, vocab_required)
  bert_config = checks.load_bert_config(shared.bert_config_file)
  checks.check_max_seq_length(shared.max_seq_length, bert_config,
                       shared.bert_config_file)
  tokenizer = checks.make_tokenizer(shared.vocab_file, shared.do_lower_case,
                             shared.spm_model_file)
  if tokenizer is not None:
    checks.check_vocab(tokenizer, bert_config, vocab_file=shared.vocab_file,
                spm_model_file=shared.spm_model_file,
                do_lower_case=shared.do_lower_case,
                bert_config_file=shared.bert_config_file)
  return Start(shared, bert_config, tokenizer)


# ------------------------------------------------------------- output_dir


def check_output_dir(output_dir, record, *, do_train):
  """Refuses to continue a run in `output_dir` that `record` contradicts
  (another task, labels, casing, config, vocabulary; or, when training,
  another --max_seq_length). See checkpoints/run_info.py."""
  run_info.check(
      output_dir, record,
      has_checkpoint=bool(checkpoint_checks.latest_checkpoint(output_dir)),
      do_train=do_train)


# ------------------------------------------------------------------ setup


def resolve_memory(shared, bert_config, do_train, distribution=None,
                   step_memory=None):
  """The memory_settings.MemorySettings of the memory flags.

  Args:
    shared: shared_flags.SharedFlags.
    bert_config: modeling.BertConfig of the model.
    do_train: whether the run trains.
    distribution: the strategy of distribution.make_distribution, or None.
    step_memory: what a training step keeps in memory (default:
      memory_model.BertMemory of the config, --max_seq_length and
      --optimizer).
  """
  return memory_settings.resolve(
      _step_memory(shared, bert_config, step_memory),
      train_batch_size=shared.train_batch_size,
      micro_batch_size=shared.micro_batch_size,
      num_accumulation_steps=shared.explicit_accumulation_steps,
      precision=shared.precision,
      gradient_checkpointing=shared.explicit_gradient_checkpointing,
      device_memory_gb=shared.device_memory_gb,
      max_seq_length=shared.max_seq_length, do_train=do_train,
      distribution=distribution)


def _step_memory(shared, bert_config, step_memory):
  """`step_memory`, or the BertMemory of the config and the flags."""
  if step_memory is not None:
    return step_memory
  return memory_model.BertMemory(bert_config, shared.max_seq_length,
                                 shared.optimizer)


def make_run_config(shared, memory, distribution=None, oom_message_fn=None):
  """The estimator.RunConfig of the flags and the resolved settings.

  Args:
    shared: shared_flags.SharedFlags.
    memory: memory_settings.MemorySettings of `resolve_memory`, whose
      num_accumulation_steps the RunConfig carries.
    distribution: the strategy of distribution.make_distribution (None: one
      device).
    oom_message_fn: callable(ResourceExhaustedError) -> str, or None.
  """
  return estimator.RunConfig(
      model_dir=shared.output_dir,
      save_checkpoints_steps=shared.save_checkpoints_steps,
      save_checkpoints_secs=shared.save_checkpoints_secs or None,
      keep_checkpoint_max=shared.keep_checkpoint_max,
      log_step_count_steps=shared.log_step_count_steps,
      log_step_count_secs=TRAINING_PROGRESS_SECS,
      save_summary_steps=shared.save_summary_steps,
      tf_random_seed=shared.seed,
      num_accumulation_steps=memory.num_accumulation_steps,
      oom_message_fn=oom_message_fn,
      distribution=distribution,
      use_xla=shared.use_xla,
      init_checkpoint=shared.init_checkpoint)


def skip_padding(requested, use_xla):
  """Whether the model skips the padding tokens (modeling.BertModel's
  `skip_padding`): as --skip_padding asks, but never under XLA, which
  compiles the graph for fixed shapes while the number of real tokens
  changes from batch to batch. Saying so when it turns the request down.

  Args:
    requested: bool, --skip_padding (or what a script without that flag
      always asks for).
    use_xla: bool, --use_xla (False for a script that never compiles with
      XLA).

  Returns:
    bool.
  """
  if requested and use_xla:
    logging.info("--skip_padding is off with --use_xla: XLA compiles the "
                 "graph for fixed shapes, and the number of real tokens "
                 "changes from batch to batch.")
    return False
  return bool(requested)


def _remove_new_folder(output_dir, lock):
  """Removes the folder this run made, with its lock, when nothing else
  came into it: a run refused for its checkpoint leaves no empty folder."""
  if lock is not None:
    lock.release()
  if not tf.io.gfile.listdir(output_dir):
    tf.io.gfile.rmtree(output_dir)


def set_up(shared, bert_config, *, do_train, record=None, step_memory=None,
           heads=(), heads_are_new=True, lock_file=folder_lock.LOCK_FILE):
  """Locks output_dir (the chief of a multi-worker cluster alone: the
  workers share it), checks the checkpoints, then makes the run's settings.

  Args:
    shared: shared_flags.SharedFlags, as `start` returned them.
    bert_config: modeling.BertConfig of the model.
    do_train: whether the run trains.
    record: the run_info.json of this run (run_info.make_record), which
      `check_output_dir` compared with the stored one; a training run
      writes it (with copies of the config and the vocabulary). None: no
      record.
    step_memory: what a training step keeps in memory (default:
      memory_model.BertMemory of the config); a script whose model adds
      heads passes its own.
    heads: (name, shape) of the variables the script's model adds to BERT
      that --init_checkpoint may lack (they then start fresh), e.g.
      checkpoint_checks.pretraining_head_shapes; a present one must have
      the shape, and a checkpoint a run resumes from must hold them all.
    heads_are_new: see checkpoint_checks.check_checkpoints.
    lock_file: the name of the lock the run holds in the folder: a
      training's, or one of a run that only scores the folder's checkpoints
      beside its training.

  Returns:
    RunSetup.
  """
  output_dir = shared.output_dir
  # First: a cluster whose workers do not all start writes nothing.
  distribution = distribution_lib.make_distribution(
      shared.distribution, shared.devices, shared.worker_wait_secs)
  new_folder = not tf.io.gfile.exists(output_dir)
  checks.prepare_output_dir(output_dir)
  chief = estimator.is_chief(distribution)
  # Before the checkpoints are read: another run may be writing them.
  lock = (folder_lock.hold(output_dir, flag="--output_dir",
                           lock_file=lock_file) if chief else None)
  try:
    checkpoint_checks.check_checkpoints(
        output_dir, shared.init_checkpoint, bert_config,
        shared.bert_config_file, do_train=do_train, heads=heads,
        heads_are_new=heads_are_new)
  except user_errors.UserError:
    if new_folder:
      _remove_new_folder(output_dir, lock)
    raise
  model = _step_memory(shared, bert_config, step_memory)
  memory = resolve_memory(shared, bert_config, do_train, distribution, model)
  oom_message_fn = out_of_memory.training_advice_fn(model, memory,
                                                    shared.train_batch_size)
  run_config = make_run_config(shared, memory, distribution, oom_message_fn)
  for line in settings_lines(shared, bert_config, memory, do_train=do_train):
    logging.info("%s", line)
  precision.log_cpu_kernels()
  if do_train and record is not None and chief:
    # The precision this training computes in, which a later run that
    # only predicts or exports keeps (startup/precision.py).
    record = dict(record, **{run_info.PRECISION_FIELD: memory.precision})
    if checkpoint_checks.latest_checkpoint(output_dir):
      # A resumed run keeps what evaluations learned of its checkpoints.
      record = dict(run_info.learned_fields(output_dir), **record)
    run_info.write(output_dir, record, shared.bert_config_file,
                   shared.vocab_file, shared.spm_model_file)
  return RunSetup(distribution, memory, run_config, oom_message_fn, lock)


def settings_lines(shared, bert_config, memory, *, do_train):
  """The run's settings in a few lines, for the start of its log.

  Args:
    shared: shared_flags.SharedFlags of the run.
    bert_config: modeling.BertConfig of the model.
    memory: memory_settings.MemorySettings the run resolved.
    do_train: whether the run trains.

  Returns:
    list of str.
  """
  latest = checkpoint_checks.latest_checkpoint(shared.output_dir)
  weights = (latest or shared.init_checkpoint or
             "random initialization (no --init_checkpoint)")
  lines = ["Model: %s (%d layers, hidden size %d); weights: %s." % (
      shared.bert_config_file, bert_config.num_hidden_layers,
      bert_config.hidden_size, weights)]
  settings = "Settings: max_seq_length=%s, precision=%s" % (
      shared.max_seq_length, memory.precision)
  if shared.precision_reason:
    settings += " (%s)" % shared.precision_reason
  if do_train and shared.train_batch_size is not None:
    settings += ", train_batch_size=%d (%d micro-batch%s of %d per update)" % (
        shared.train_batch_size, memory.num_accumulation_steps,
        "" if memory.num_accumulation_steps == 1 else "es",
        memory.micro_batch_size)
    if memory.gradient_checkpointing:
      settings += ", gradient checkpointing"
  lines.append(settings + ".")
  lines.append("Output: %s" % shared.output_dir)
  return lines
